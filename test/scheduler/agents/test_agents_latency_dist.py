"""Kairos §4.3 convergence (doubling checkpoints + Wasserstein) and the §6 expected time (KDE mode)."""
import numpy as np
import pytest

from physai_ros.scheduler.agents.latency_dist import (
    AgentLatencyProfiler,
    ConvergenceConfig,
    LatencyDistribution,
    mode_of,
)


def test_checks_run_at_doublings_only():
    d = LatencyDistribution(ConvergenceConfig(min_samples=16, rel_threshold=0.05))
    hits = [n for n in range(1, 130) if d.add(1.0 + 0.01 * (n % 7)) is not None]
    # 16 only sets the reference; 32, 64, 128 compare with the previous checkpoint.
    assert hits == [32, 64, 128]
    assert [(c.n_previous, c.n_current) for c in d.checks] == [(16, 32), (32, 64), (64, 128)]


def test_settled_distribution_converges():
    rng = np.random.default_rng(1)
    d = LatencyDistribution(ConvergenceConfig(min_samples=16, rel_threshold=0.05))
    d.extend(rng.lognormal(np.log(0.5), 0.3, 256))
    assert d.converged
    assert d.checks[-1].relative < 0.05


def test_shifting_distribution_does_not_converge():
    # Latency drifts upward with every sample (e.g. load building up): each doubling moves the
    # distribution, so the test must keep refusing it.
    rng = np.random.default_rng(2)
    d = LatencyDistribution(ConvergenceConfig(min_samples=16, rel_threshold=0.05))
    d.extend(0.5 + 0.01 * np.arange(256) + rng.normal(0, 0.01, 256).clip(-0.4))
    assert not d.converged
    assert all(c.relative > 0.05 for c in d.checks)


def test_window_detects_a_shift_after_convergence():
    rng = np.random.default_rng(3)
    d = LatencyDistribution(ConvergenceConfig(min_samples=16, rel_threshold=0.05, max_samples=64))
    d.extend(rng.normal(1.0, 0.05, 64))
    assert d.converged and len(d) == 64
    d.extend(rng.normal(3.0, 0.05, 64))      # one full window later: compared with the old one
    assert len(d) == 64 and not d.converged


def test_mode_of_bimodal_sample_is_the_taller_peak():
    rng = np.random.default_rng(4)
    x = np.concatenate([rng.normal(0.2, 0.02, 300), rng.normal(1.5, 0.05, 100)])
    assert mode_of(x) == pytest.approx(0.2, abs=0.03)
    assert mode_of(np.concatenate([rng.normal(0.2, 0.02, 100), rng.normal(1.5, 0.05, 300)])) == \
        pytest.approx(1.5, abs=0.05)


def test_mode_of_degenerate_samples_falls_back_to_median():
    assert mode_of([0.7] * 20) == 0.7
    assert mode_of([0.1, 0.3]) == pytest.approx(0.2)
    with pytest.raises(ValueError):
        mode_of([])


def test_profiler_expected_time_and_default():
    p = AgentLatencyProfiler()
    assert p.expected_time("planner", default=2.0) == 2.0
    for v in [1.0] * 10 + [1.01] * 10:
        p.add_single("planner", v)
    assert p.expected_time("planner") == pytest.approx(1.0, abs=0.02)
    with pytest.raises(ValueError):
        p.add_single("planner", -1.0)
