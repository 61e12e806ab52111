"""Execution-horizon policies on constructed updates (Kairos Figure 7) and on real sampler output."""
import numpy as np
import pytest
import torch

from physai_ros.engine import Pi0Config, Pi0Engine
from physai_ros.engine.horizon import (
    ConfidenceHorizon,
    HorizonDecision,
    StaticHorizon,
    action_confidence,
    checked_decision,
    make_horizon_policy,
)

from engine_helpers import make_input


def figure7_updates():
    """6 actions, 4 steps, 2 dims. Magnitudes per action: earlier steps shrink (coarse to fine);
    A1-A4 end small, A5's final update is 50% above its earlier mean, A6 larger still."""
    steps, chunk = 4, 6
    mags = np.zeros((steps, chunk))
    mags[:3] = [[1.0] * chunk, [0.6] * chunk, [0.2] * chunk]  # earlier mean 0.6
    mags[3] = [0.1, 0.15, 0.3, 0.6, 0.9, 1.2]  # A5: 0.9 = 1.5 x 0.6
    u = np.zeros((steps, chunk, 2))
    u[..., 0] = mags * 0.6
    u[..., 1] = mags * 0.8  # norm = mags
    return u


def test_figure7_threshold_040_gives_h4():
    d = ConfidenceHorizon(t=0.4, h_min=1).decide(figure7_updates())
    assert d.horizon == 4


def test_threshold_and_h_min_interplay():
    u = figure7_updates()
    assert ConfidenceHorizon(t=0.6, h_min=1).decide(u).horizon == 5  # A5 (1.5x) passes, A6 (2x) does not
    assert ConfidenceHorizon(t=1.5, h_min=1).decide(u).horizon == 6  # nobody exceeds: whole chunk
    assert ConfidenceHorizon(t=0.4, h_min=5).decide(u).horizon == 5  # H = max(H_thresh, H_min)
    assert ConfidenceHorizon(t=0.4, h_min=50).decide(u).horizon == 6  # clipped to the chunk


def test_confidence_formula_matches_threshold_rule():
    u = figure7_updates()
    c = action_confidence(u)
    np.testing.assert_allclose(c, [1, 1, 1, 1, 0.6 / 0.9, 0.5])
    t = 0.4
    first_low = int(np.nonzero(c < 1 / (1 + t))[0][0])
    assert first_low == ConfidenceHorizon(t).decide(u).horizon


def test_static_and_user_policy_by_import_path():
    u = figure7_updates()
    assert StaticHorizon(3).decide(u).horizon == 3
    assert StaticHorizon(99).decide(u).horizon == 6
    p = make_horizon_policy("test_engine_horizon:HalfChunk")
    assert checked_decision(p, u).horizon == 3
    assert make_horizon_policy("confidence", t=0.4).decide(u).horizon == 4


class HalfChunk:
    def decide(self, updates):
        n = np.asarray(updates).shape[1]
        return HorizonDecision(n // 2, action_confidence(updates), "half")


class Broken:
    def decide(self, updates):
        return HorizonDecision(0, np.ones(1), "zero")


def test_bad_policies_and_inputs_get_clear_errors():
    with pytest.raises(ValueError, match="pkg.module:Class"):
        make_horizon_policy("nonsense")
    with pytest.raises(ValueError, match="cannot be imported"):
        make_horizon_policy("no_such_module_xyz:Policy")
    with pytest.raises(ValueError, match="is not a class"):  # never called: "os:abort" would end the process
        make_horizon_policy("os:getpid")
    with pytest.raises(ValueError, match="expected 1..6"):
        checked_decision(Broken(), figure7_updates())
    with pytest.raises(ValueError, match="NaN"):
        ConfidenceHorizon(0.4).decide(np.full((3, 2, 2), np.nan))
    with pytest.raises(ValueError, match="num_steps >= 2"):
        ConfidenceHorizon(0.4).decide(np.zeros((1, 2, 2)))
    with pytest.raises(ValueError, match="t must be"):
        ConfidenceHorizon(-1)


def test_on_real_sampler_output():
    cfg = Pi0Config.preset("tiny")
    out = Pi0Engine(cfg, seed=1).infer([make_input(cfg, 1, 4, torch.Generator().manual_seed(2))])[0]
    u = out.updates
    assert u.shape == (cfg.num_steps, cfg.chunk_size, cfg.max_action_dim)
    c = action_confidence(u)
    assert c.shape == (cfg.chunk_size,) and np.all((c >= 0) & (c <= 1))
    # Loosening the threshold can only lengthen the horizon.
    hs = [ConfidenceHorizon(t, h_min=1).decide(u).horizon for t in (0.0, 0.2, 0.5, 1.0, 10.0)]
    assert hs == sorted(hs) and hs[-1] == cfg.chunk_size
    # The rule recomputed by hand from the raw updates.
    m = u.norm(dim=2)
    over = (m[-1] > 1.2 * m[:-1].mean(0)).nonzero()
    expect = int(over[0]) if len(over) else cfg.chunk_size
    assert ConfidenceHorizon(0.2).decide(u).horizon == max(expect, 1)
