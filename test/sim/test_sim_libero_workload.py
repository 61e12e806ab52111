"""The LIBERO-like workload generator (lab/physai_lab/libero_workload.py): distribution shape,
determinism per seed, and traces the fleet simulator accepts. Fast; no timing thresholds."""
import random
import statistics
from pathlib import Path

import pytest
import yaml

from physai_ros.scheduler import LatencyProfile
from physai_lab.fleet_sim import InstanceSpec, SimConfig, poisson_arrivals, run_online
from physai_lab.libero_workload import (
    LONGEST_DEMO, LiberoWorkload, build_libero_trace, build_traces, capacity_rps, describe,
    mean_rounds, sample_tasks, saturation_rate,
)

REPO = Path(__file__).resolve().parents[2]
WL = LiberoWorkload()


@pytest.fixture(scope="module")
def tasks():
    return sample_tasks(WL, 400, random.Random(0))


def test_task_lengths_follow_each_suite_and_vary_widely(tasks):
    by_suite = {}
    for t in tasks:
        by_suite.setdefault(t.suite, []).append(t.total_actions)
        lo, _, hi = WL.suites[t.suite].length_frac
        assert lo * LONGEST_DEMO[t.suite] - 1 <= t.total_actions <= hi * LONGEST_DEMO[t.suite] + 1
    assert set(by_suite) == {"libero_spatial", "libero_object", "libero_goal", "libero_10"}
    assert all(70 <= len(v) <= 130 for v in by_suite.values())        # equal weights, 400 tasks
    mean = {s: statistics.fmean(v) for s, v in by_suite.items()}
    assert mean["libero_10"] > 2 * mean["libero_spatial"]              # long-horizon suite
    assert max(t.total_actions for t in tasks) > 6 * min(t.total_actions for t in tasks)


def test_phases_cover_the_task_and_libero_10_has_two_subgoals(tasks):
    for t in tasks:
        assert sum(steps for _, steps, _ in t.phases) == t.total_actions
        names = [n for n, _, _ in t.phases]
        if t.suite == "libero_10":
            assert names.count("grasp") == 2 and names.count("place") == 2
        elif t.suite == "libero_goal":
            assert names == ["approach", "manipulate"]
        for name, _, ratio in t.phases:
            assert (1.5 <= ratio <= 3.0) if name in ("approach", "transport") else ratio == 1.0
        assert WL.h_min <= t.task_horizon <= WL.chunk_size


def test_same_seed_same_tasks_and_traces_other_seed_differs():
    a = sample_tasks(WL, 30, random.Random(7))
    b = sample_tasks(WL, 30, random.Random(7))
    c = sample_tasks(WL, 30, random.Random(8))
    assert a == b and a != c
    for dyn in (False, True):
        assert [tr.rounds for tr in build_traces(WL, a, dyn)] == [tr.rounds for tr in build_traces(WL, b, dyn)]


def test_traces_are_valid_and_execute_every_action(tasks):
    for t in tasks[:100]:
        st, dy = build_libero_trace(WL, t, False), build_libero_trace(WL, t, True)
        for tr in (st, dy):
            assert tr.total_actions == t.total_actions and tr.control_period == WL.control_period_s
            assert tr.rounds[-1].trigger_remaining == 0
            for r in tr.rounds[:-1]:
                assert r.trigger_remaining == min(r.horizon - 1, round(WL.trigger_fraction * r.horizon))
        assert all(r.horizon == t.task_horizon for r in st.rounds[:-1])
        assert all(WL.h_min <= r.horizon <= WL.chunk_size for r in dy.rounds[:-1])


def test_dynamic_horizon_follows_the_phases(tasks):
    """Fig. 4 shape: a good share of rounds run >= 2x the static H (free-motion phases), contact
    phases stay near it; Fig. 10 shape: most consecutive rounds keep their horizon."""
    st = build_traces(WL, tasks, False)
    dy = build_traces(WL, tasks, True)
    ratios = [r.horizon / t.task_horizon for t, tr in zip(tasks, dy) for r in tr.rounds[:-1]]
    share_2x = sum(x >= 2 for x in ratios) / len(ratios)
    assert 0.2 <= share_2x <= 0.7
    assert min(ratios) >= WL.h_min / WL.chunk_size
    assert mean_rounds(dy) < 0.85 * mean_rounds(st)
    same = [a.horizon == b.horizon for tr in dy for a, b in zip(tr.rounds[:-2], tr.rounds[1:-1])]
    assert sum(same) / len(same) > 0.5


def test_some_rounds_generation_dominant_some_execution_dominant(tasks):
    """At batch-1 latency (64 ms) nearly every round executes longer than it generates; at the
    saturation batch (0.5 s) every round of the static horizon is generation-dominant."""
    d = describe(tasks, build_traces(WL, tasks, False), (0.0642, 0.27, 0.5))
    share = d["generation_dominant_share"]
    assert share["0.0642s"] < 0.05 and 0.3 < share["0.27s"] < 0.95 and share["0.5s"] == 1.0
    assert set(d["suites"]) == {"libero_spatial", "libero_object", "libero_goal", "libero_10"}


def test_synchronous_clients_and_suite_overrides():
    wl = LiberoWorkload.from_dict({
        "trigger_fraction": 0.0, "chunk_size": 50,
        "suites": {"slow": {"longest_demo": 300, "task_horizon_cdf": [[40, 0], [40, 1]], "trigger_fraction": 0.5},
                   "fast": {"longest_demo": 100, "weight": 3, "phases": "manipulate"}}})
    ts = sample_tasks(wl, 80, random.Random(1))
    for t in ts:
        tr = build_libero_trace(wl, t, False)
        if t.suite == "slow":
            assert t.task_horizon == 40 and tr.rounds[0].trigger_remaining == 20
        else:
            assert all(r.trigger_remaining == 0 for r in tr.rounds)
    assert sum(t.suite == "fast" for t in ts) > 40


@pytest.mark.parametrize("bad", [
    {"trigger_fraction": 1.0}, {"h_min": 0}, {"suites": {}},
    {"suites": {"x": {"longest_demo": 100, "length_frac": [0.9, 0.5, 1.0]}}},
    {"suites": {"x": {"longest_demo": 100, "phases": "juggle"}}},
])
def test_bad_workload_values_are_refused(bad):
    with pytest.raises(ValueError):
        LiberoWorkload.from_dict(bad)


def test_workload_files_parse():
    for name in ("libero_a6000.yaml", "mixed_exec_a6000.yaml"):
        doc = yaml.safe_load((REPO / "bench" / "workloads" / name).read_text())
        assert doc["generator"] == "libero"
        wl = LiberoWorkload.from_dict(doc["workload"])
        assert wl.chunk_size == doc["models"][doc["model"]]["chunk_size"]


def test_capacity_and_saturation_rate_by_hand():
    prof = LatencyProfile.from_pairs([[1, 0.1], [2, 0.1], [4, 0.2]])     # saturates at 2: 20 req/s
    assert capacity_rps(prof) == pytest.approx(20.0)
    assert capacity_rps(prof, max_batch=1) == pytest.approx(10.0)
    trs = build_traces(WL, sample_tasks(WL, 20, random.Random(3)), False)
    assert saturation_rate(trs, prof) == pytest.approx(20.0 / mean_rounds(trs))


def test_simulator_replays_generated_traces_deterministically():
    ts = sample_tasks(WL, 12, random.Random(5))
    trs = build_traces(WL, ts, True)
    arr = poisson_arrivals(12, 0.5, random.Random(6))
    cfg = lambda: SimConfig(scheduler="wait_ratio", seed=2, latency_jitter=0.05,
                            instances=[InstanceSpec("e", "edge", LatencyProfile.from_pairs([[1, 0.064], [4, 0.15]]))])
    a, b = run_online(trs, arr, cfg()), run_online(trs, arr, cfg())
    assert [t.latency for t in a.tasks] == [t.latency for t in b.tasks]
    assert a.summary()["requests"] == sum(len(t.rounds) for t in trs)
    for t, tr in zip(sorted(a.tasks, key=lambda x: x.task_id), sorted(trs, key=lambda x: x.task_id)):
        assert t.latency >= tr.isolated_exec_s
