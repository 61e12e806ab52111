"""Trade-off bookkeeping: average horizon, success rate, intervals, dominance, seed checks."""
from __future__ import annotations

import math

import pytest

from physai_lab.evaluation.results import (EpisodeResult, TradeoffPoint, average_horizon, dominance,
                                           static_success_at, summarize, wilson_interval)
from physai_lab.evaluation.sweep import disjoint_from_training, eval_seeds, training_seeds


def ep(success: bool, horizons, seed: int = 0) -> EpisodeResult:
    return EpisodeResult("s", "r", "reach", seed, success, 1.0, tuple(horizons))


def test_average_horizon_pools_rounds_not_episodes():
    eps = [ep(True, [2, 2, 2, 2]), ep(False, [8])]
    # Per round: (2*4 + 8) / 5 = 3.2; a per-episode mean would say (2 + 8) / 2 = 5.
    assert average_horizon(eps) == pytest.approx(3.2)
    assert math.isnan(average_horizon([ep(False, [])]))


def test_summarize_counts_successes_and_rounds():
    p = summarize("static", 4, [ep(True, [4, 4]), ep(False, [4]), ep(True, [4, 4, 4]), ep(False, [])])
    assert (p.episodes, p.successes, p.rounds) == (4, 2, 6)
    assert p.success_rate == 0.5 and p.avg_horizon == 4.0
    lo, hi = p.ci95
    assert lo < 0.5 < hi
    d = p.as_dict()
    assert {"policy", "parameter", "avg_horizon", "success_rate"} <= set(d)
    with pytest.raises(ValueError):
        summarize("static", 4, [])


def test_wilson_interval_edges():
    assert wilson_interval(0, 50)[0] == 0.0 and wilson_interval(0, 50)[1] > 0.0
    assert wilson_interval(50, 50)[1] == 1.0 and wilson_interval(50, 50)[0] < 1.0
    lo, hi = wilson_interval(25, 50)
    assert lo == pytest.approx(1 - hi)


def pt(policy, param, h, s):
    return TradeoffPoint(policy, param, h, s, 50, round(s * 50), 100)


def test_static_curve_interpolation_and_dominance():
    static = [pt("static", 1, 1.0, 0.9), pt("static", 4, 4.0, 0.6), pt("static", 8, 8.0, 0.2)]
    assert static_success_at(static, 2.5) == pytest.approx(0.75)
    assert static_success_at(static, 0.5) is None and static_success_at(static, 9) is None
    better = [pt("confidence", 0.5, 3.0, 0.8), pt("confidence", 2, 6.0, 0.5)]
    d = dominance(static, better)
    assert d["confidence_dominates"] and d["points_above_static_curve"] == 2
    # +0.10 over the curve at 50 episodes each: inside the 95% interval, not evidence.
    assert d["points"][0]["gain_within_ci"] and not d["significant"]
    worse = better + [pt("confidence", 4, 3.5, 0.5)]
    d = dominance(static, worse)
    assert not d["confidence_dominates"]
    assert d["points"][2]["dominated_by_static_H"] == [4]


def test_eval_seeds_are_disjoint_per_task_and_from_training():
    a, b = eval_seeds("reach", 60), eval_seeds("pick_and_place", 60)
    assert not set(a) & set(b) and len(set(a)) == 60
    manifest = {"data": {"reach": {"seeds": [0, 1, 2]}, "seed_range": [100, 200]}, "seed": 0,
                "interface": {"training_cell_seeds": {"pick_and_place": {"range": [300, 310]}}}}
    assert training_seeds(manifest) == {0, 1, 2} | set(range(100, 200)) | set(range(300, 310))
    assert disjoint_from_training(a, manifest) == []
    assert disjoint_from_training([5, 150], manifest) == [150]


def test_mcnemar_counts_the_discordant_pairs_and_gives_the_exact_binomial_p():
    from physai_lab.evaluation.results import mcnemar_exact
    a = [True] * 10 + [False] * 2 + [True] * 5
    b = [False] * 10 + [True] * 2 + [True] * 5
    r = mcnemar_exact(a, b)
    assert (r["only_first"], r["only_second"]) == (10, 2)
    # 2 * P(X <= 2), X ~ Binomial(12, 1/2) = 2 * (1 + 12 + 66) / 4096
    assert abs(r["p_two_sided"] - round(2 * 79 / 4096, 4)) < 1e-9
    assert mcnemar_exact([True, False], [True, False])["p_two_sided"] == 1.0
    with pytest.raises(ValueError, match="unequal"):
        mcnemar_exact(a, b[:-1])
