"""Threshold calibration recomputes exactly the horizon the confidence policy would choose."""
import numpy as np
import pytest

from physai_ros.engine.horizon import ConfidenceHorizon, action_confidence
from physai_lab.evaluation.calibrate import horizons_for, thresholds_for


def test_horizons_from_confidence_match_the_policy():
    rng = np.random.default_rng(0)
    updates = [rng.gamma(2.0, 1.0, size=(10, 8, 5)) * rng.uniform(0.5, 1.5, size=(10, 1, 1)) for _ in range(40)]
    conf = np.stack([action_confidence(u) for u in updates])
    for t in (0.0, 0.1, 0.3, 1.0):
        for h_min in (1, 3):
            want = [ConfidenceHorizon(t, h_min).decide(u).horizon for u in updates]
            assert horizons_for(conf, t, h_min).tolist() == want


def test_thresholds_reach_their_target_horizons():
    rng = np.random.default_rng(1)
    conf = np.clip(rng.uniform(0.3, 1.2, size=(200, 10)), 0, 1)
    ts = thresholds_for(conf, [2, 4, 6, 9], h_min=1)
    assert ts == sorted(ts) and len(ts) == 4
    means = [horizons_for(conf, t, 1).mean() for t in ts]
    assert all(m >= target - 1e-9 for m, target in zip(means, [2, 4, 6, 9]))
    with pytest.raises(ValueError):
        horizons_for(np.ones(5), 0.1, 1)
