"""ROSA §3.4.2 Step 2.1-2.2: configuration enumeration and the ILP packing, cross-checked against
brute-force enumeration of every (batch, k) multiset and against ModelProfile.latency."""
from __future__ import annotations

import itertools
import random

import pytest

from physai_ros.scheduler.factory.configs import LatencyTable, Pair
from physai_ros.scheduler.factory.packing import pack_pair, split_counts
from physai_ros.scheduler.factory.types import STATIC, ModelProfile, ProfilePoint

HW = "gpu"
SLO = 0.1


def rising() -> ModelProfile:
    """Batch 1: p99 = 0.02 + 0.01 * rate up to 10 Hz (meets 100 ms up to 8 Hz);
    batch 4: p99 = 0.05 + 0.004 * rate up to 30 Hz (meets 100 ms up to 12.5 Hz)."""
    pts = [ProfilePoint(1, r, 0.01 + 0.008 * r, 0.02 + 0.01 * r) for r in range(1, 11)]
    pts += [ProfilePoint(4, 3.0 * i, 0.04 + 0.0032 * 3 * i, 0.05 + 0.004 * 3 * i) for i in range(1, 11)]
    return ModelProfile("m", HW, STATIC, tuple(pts))


def brute_force_min_servers(profile: ModelProfile, n: int, rate: float, budget: int | None = None) -> int | None:
    """Smallest multiset of configurations (b, k), each meeting the SLO at k * rate, covering
    exactly n robots (eq. 3 with equality), by enumeration."""
    configs = [(b, k) for b in profile.batch_sizes() for k in range(1, n + 1)
               if profile.latency(b, k * rate, "p99") <= SLO]
    for m in range(1, (budget or n) + 1):
        if any(sum(k for _, k in combo) == n for combo in itertools.combinations_with_replacement(configs, m)):
            return m
    return None


@pytest.mark.parametrize("rate", [0.7, 1.5, 2.6, 4.1, 9.0])
@pytest.mark.parametrize("n", [1, 3, 6])
def test_ilp_packing_equals_brute_force(n: int, rate: float):
    profile = rising()
    table = LatencyTable({("m", HW): profile}, HW)
    pair = Pair("system1", "A", "m", tuple(f"r{i}" for i in range(n)), rate, SLO, "p99")
    want = brute_force_min_servers(profile, n, rate)
    got = pack_pair(table, pair)
    if want is None:
        assert isinstance(got, str)
        return
    assert not isinstance(got, str), got
    assert len(got) == want
    assert sorted(s.robot_id for srv in got for s in srv.streams) == sorted(pair.robot_ids)
    for srv in got:  # every chosen server meets the SLO at its real load (profile's own latency)
        assert profile.latency(srv.batch, srv.load_hz, "p99") <= SLO + 1e-12
    # With a budget one short of the optimum there is no packing; at the optimum there is.
    if want > 1:
        assert isinstance(pack_pair(table, pair, budget=want - 1), str)
        assert brute_force_min_servers(profile, n, rate, budget=want - 1) is None
    assert not isinstance(pack_pair(table, pair, budget=want), str)


def test_latency_table_matches_model_profile():
    profile = rising()
    table = LatencyTable({("m", HW): profile}, HW)
    rng = random.Random(0)
    for _ in range(300):
        b = rng.choice([1, 4])
        rate = rng.uniform(0.0, 35.0)
        for q in ("p99", "mean", "p50"):
            assert table.latency("m", b, rate, q) == pytest.approx(profile.latency(b, rate, q))


def test_rate_cap_is_where_the_slo_is_crossed():
    table = LatencyTable({("m", HW): rising()}, HW)
    assert table.rate_cap("m", 1, SLO, "p99") == pytest.approx(8.0)
    assert table.rate_cap("m", 4, SLO, "p99") == pytest.approx(12.5)
    # A mean-latency cap (eq. 4) can bind before the SLO: mean 0.01 + 0.008 r <= 0.05 -> r <= 5.
    assert table.rate_cap("m", 1, SLO, "p99", mean_cap_s=0.05) == pytest.approx(5.0)
    assert table.rate_cap("m", 1, 0.01, "p99") == 0.0  # even the lightest load misses 10 ms
    assert table.rate_cap("m", 4, 10.0, "p99") == 30.0  # never past the measured curve


def test_model_that_does_not_fit_in_memory_has_no_configuration():
    big = ModelProfile("m", HW, STATIC, rising().points, weights_gb=100.0)
    table = LatencyTable({("m", HW): big}, HW, memory_gb=80.0)
    got = pack_pair(table, Pair("system1", "A", "m", ("r0",), 1.0, SLO, "p99"))
    assert isinstance(got, str) and "does not fit" in got


def test_split_counts_is_even_within_capacities():
    assert split_counts([5, 5], 7) == [4, 3]
    assert split_counts([1, 8], 7) == [1, 6]
    assert sum(split_counts([3, 3, 3], 9)) == 9
    with pytest.raises(ValueError):
        split_counts([2, 2], 5)
