"""LatencyEstimator: prior, EWMA, window quantile, bad samples."""
import math

import pytest

from physai_ros.control.latency import LatencyEstimator


def test_prior_before_any_sample():
    est = LatencyEstimator(prior_s=0.3)
    assert est.estimate() == 0.3 and est.ewma() == 0.3 and est.window_quantile() == 0.3


def test_ewma_follows_the_recursion():
    est = LatencyEstimator(alpha=0.5, quantile=0.0)
    for x in (0.1, 0.3, 0.2):
        assert est.add(x)
    assert est.ewma() == pytest.approx(0.5 * (0.5 * 0.1 + 0.5 * 0.3) + 0.5 * 0.2)
    # with the 0-quantile (the window minimum) the EWMA dominates
    assert est.estimate() == pytest.approx(est.ewma())


def test_estimate_covers_the_tail_of_a_jittery_link():
    est = LatencyEstimator(alpha=0.2, window=20, quantile=0.9)
    for i in range(20):
        est.add(0.5 if i % 5 == 0 else 0.1)  # 20% spikes
    assert est.ewma() < 0.3
    assert est.estimate() == pytest.approx(0.5)


def test_window_forgets_old_samples():
    est = LatencyEstimator(window=5, quantile=1.0, alpha=1.0)
    est.add(10.0)
    for _ in range(5):
        est.add(0.1)
    assert est.window_quantile() == pytest.approx(0.1)


@pytest.mark.parametrize("bad", [-0.01, math.nan, math.inf, 100.0, "x", None])
def test_bad_samples_are_counted_and_ignored(bad):
    est = LatencyEstimator(prior_s=0.2, max_s=60.0)
    est.add(0.1)
    assert est.add(bad) is False
    s = est.stats()
    assert s.samples == 1 and s.rejected == 1 and s.estimate_s == pytest.approx(0.1)


def test_observe_uses_capture_and_receive_times():
    est = LatencyEstimator()
    assert est.observe(capture_time=10.0, receive_time=10.25)
    assert est.stats().last_s == pytest.approx(0.25)
    assert not est.observe(capture_time=10.0, receive_time=9.0)  # clock went backwards


@pytest.mark.parametrize("kw", [dict(prior_s=-1), dict(alpha=0), dict(alpha=1.5), dict(window=0),
                                dict(quantile=1.5)])
def test_bad_settings_raise(kw):
    with pytest.raises(ValueError):
        LatencyEstimator(**kw)
