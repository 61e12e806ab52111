"""ROSA §3.4.2-3.4.3 steady-state solver on tiny synthetic profiles whose answers are computed by hand."""
from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

from physai_ros.scheduler.factory import (
    CONTINUOUS, STATIC, ComponentSpec, FactoryProblem, FactorySchedule, ModelProfile, ProfilePoint, Route,
    ServerAssignment, ServerPool, TaskClass, solve,
)
from physai_ros.scheduler.factory.compaction import compact
from physai_ros.scheduler.factory.configs import LatencyTable, Stream
from physai_ros.scheduler.factory.obligations import aggregate_rates, provision_obligations
from physai_ros.scheduler.factory.packing import PlannedServer

HW = "gpu"


def flat(model: str, caps: dict[int, float], mean: float, p99: float, batching: str = STATIC) -> ModelProfile:
    """Constant latency up to each batch size's capacity (ten points, 10 %-100 %), saturated above."""
    pts = tuple(ProfilePoint(b, cap * i / 10, mean, p99) for b, cap in caps.items() for i in range(1, 11))
    return ModelProfile(model, HW, batching, pts)


def robots(prefix: str, n: int) -> tuple[str, ...]:
    return tuple(f"{prefix}{i}" for i in range(n))


S1 = ComponentSpec("system1", "s1", 0.2)
PROFILES = {
    ("s1", HW): flat("s1", {1: 10.0, 4: 30.0}, mean=0.04, p99=0.05),
    ("s2", HW): flat("s2", {1: 100.0}, mean=0.5, p99=0.6, batching=CONTINUOUS),
    ("safe", HW): flat("safe", {1: 20.0}, mean=0.05, p99=0.1, batching=CONTINUOUS),
    ("mon", HW): flat("mon", {1: 20.0}, mean=0.2, p99=0.5, batching=CONTINUOUS),
    ("fast", HW): flat("fast", {1: 1000.0}, mean=0.05, p99=0.06),
}


def check_routes(problem: FactoryProblem, sched: FactorySchedule) -> None:
    """Every robot has exactly one route per component its class needs, to a serving server."""
    serving = {a.server: a for a in sched.assignments if a.standby_for is None}
    for cls in problem.classes:
        for r in cls.robot_ids:
            for spec in cls.components:
                mine = [x for x in sched.routes if x.robot_id == r and x.component == spec.component]
                assert len(mine) == 1, (r, spec.component)
                a = serving[mine[0].server]
                assert a.component == spec.component and a.model == spec.model and r in a.robot_ids
    for a in serving.values():  # loads are the sum of the routes' rates
        assert a.load_hz == pytest.approx(sum(x.rate_hz for x in sched.routes if x.server == a.server))


def test_homogeneous_capacity_bound_optimum_by_hand():
    # 10 robots, 2 servers. Batch 4 carries 30 Hz (batch 1 only 10): at most 2 x 30 = 60 Hz for
    # 10 robots -> f* = 6 Hz (5 robots per server). Eq. (4) allows 1 / (0.01 + 0.04) = 20 Hz.
    cls = TaskClass("A", robots("r", 10), (S1,), action_period_s=0.01)
    problem = FactoryProblem((cls,), ServerPool(2, HW))
    sched = solve(problem, PROFILES, rate_tolerance=0.001)
    assert sched.feasible, sched.reason
    f = sched.action_rate_hz["A"]
    assert 6.0 * (1 - 0.001) <= f <= 6.0 + 1e-9
    serving = [a for a in sched.assignments if a.standby_for is None]
    assert len(serving) <= 2  # the ILP respects the server budget
    assert all(a.batch == 4 and len(a.robot_ids) == 5 for a in serving)
    assert sched.factory_throughput == pytest.approx(10 * f)
    assert sched.weighted_objective == pytest.approx(10 * f)
    assert sched.predicted_slo_attainment == {"system1": 1.0}
    assert all(r.rate_hz == pytest.approx(f) for r in sched.routes)
    check_routes(problem, sched)


def test_more_servers_raise_the_rate_and_budget_holds():
    cls = TaskClass("A", robots("r", 12), (S1,), action_period_s=0.01)
    few = solve(FactoryProblem((cls,), ServerPool(2, HW)), PROFILES, rate_tolerance=0.001)
    many = solve(FactoryProblem((cls,), ServerPool(4, HW)), PROFILES, rate_tolerance=0.001)
    # 12 robots: 2 servers -> 6 per server, f* = 5; 4 servers -> 3 per server, f* = 10.
    assert few.action_rate_hz["A"] == pytest.approx(5.0, rel=0.002)
    assert many.action_rate_hz["A"] == pytest.approx(10.0, rel=0.002)
    assert len([a for a in few.assignments if a.standby_for is None]) <= 2
    assert len([a for a in many.assignments if a.standby_for is None]) <= 4


def test_closed_loop_eq4_binds_when_t_act_dominates():
    # Capacity is ample (1000 Hz), so eq. (4) sets the rate: 1 / (t_act + l_S1 + l_S2 / H).
    s1 = ComponentSpec("system1", "fast", 0.2)
    s2 = ComponentSpec("system2", "s2", 2.0)
    only_s1 = TaskClass("A", robots("r", 8), (s1,), action_period_s=0.2)
    sched = solve(FactoryProblem((only_s1,), ServerPool(2, HW)), PROFILES, rate_tolerance=0.001)
    assert sched.action_rate_hz["A"] == pytest.approx(1 / (0.2 + 0.05), rel=0.002)
    assert sched.action_rate_hz["A"] <= 1 / 0.25 + 1e-9
    with_s2 = TaskClass("A", robots("r", 8), (s1, s2), action_period_s=0.2, system2_ratio=10)
    problem = FactoryProblem((with_s2,), ServerPool(2, HW))
    sched = solve(problem, PROFILES, rate_tolerance=0.001)
    f = sched.action_rate_hz["A"]
    assert f == pytest.approx(1 / (0.2 + 0.05 + 0.5 / 10), rel=0.002)
    for r in sched.routes:  # System 2 is asked once per H System 1 calls
        assert r.rate_hz == pytest.approx(f if r.component == "system1" else f / 10)
    check_routes(problem, sched)


def test_obligations_get_the_minimum_number_of_servers():
    # 16 robots: safety 2 Hz each = 32 Hz at 20 Hz per server -> 10 robots per server -> 2 servers;
    # monitor 0.5 Hz each = 8 Hz -> 1 server. System 1 has the other 5 at most.
    comps = (S1, ComponentSpec("safety", "safe", 0.5, freq_hz=2.0), ComponentSpec("monitor", "mon", 2.0, freq_hz=0.5))
    cls = TaskClass("A", robots("r", 16), comps, action_period_s=0.2)
    problem = FactoryProblem((cls,), ServerPool(8, HW))
    sched = solve(problem, PROFILES)
    assert sched.feasible, sched.reason
    count = {c: sum(1 for a in sched.assignments if a.component == c) for c in ("system1", "safety", "monitor")}
    assert (count["safety"], count["monitor"]) == (2, 1) and 1 <= count["system1"] <= 5
    for r in sched.routes:
        if r.component == "safety":
            assert r.rate_hz == 2.0
        if r.component == "monitor":
            assert r.rate_hz == 0.5
    assert sched.predicted_slo_attainment == {"system1": 1.0, "safety": 1.0, "monitor": 1.0}
    check_routes(problem, sched)


def test_infeasible_when_obligations_do_not_fit():
    comps = (S1, ComponentSpec("safety", "safe", 0.5, freq_hz=2.0))
    cls = TaskClass("A", robots("r", 30), comps, action_period_s=0.2)  # safety needs 3 servers
    sched = solve(FactoryProblem((cls,), ServerPool(2, HW)), PROFILES)
    assert not sched.feasible
    assert "obligations do not fit" in sched.reason and "safety" in sched.reason
    assert sched.routes == () and sched.assignments == ()
    # Obligations that fit exactly leave nothing for System 1: named too.
    sched = solve(FactoryProblem((cls,), ServerPool(3, HW)), PROFILES)
    assert not sched.feasible and "goal-coupled" in sched.reason


def test_infeasible_when_slo_or_fmin_cannot_be_met():
    tight = TaskClass("A", robots("r", 4), (ComponentSpec("system1", "s1", 0.04),), action_period_s=0.01)
    sched = solve(FactoryProblem((tight,), ServerPool(2, HW)), PROFILES)
    assert not sched.feasible and "system1" in sched.reason and "SLO" in sched.reason
    # 10 robots on 2 servers top out at 60 actions/s (first test); ask for 70.
    greedy = TaskClass("A", robots("r", 10), (S1,), action_period_s=0.01, min_throughput=70.0)
    sched = solve(FactoryProblem((greedy,), ServerPool(2, HW)), PROFILES)
    assert not sched.feasible and "F_min" in sched.reason and "A" in sched.reason


def two_classes(v_a: float, v_b: float, fmin_b: float = 0.0) -> FactoryProblem:
    a = TaskClass("A", robots("a", 8), (S1,), action_period_s=0.01, value_weight=v_a)
    b = TaskClass("B", robots("b", 8), (S1,), action_period_s=0.01, value_weight=v_b, min_throughput=fmin_b)
    return FactoryProblem((a, b), ServerPool(4, HW))


def test_heterogeneous_weight_shifts_rate_and_fmin_holds():
    heavy_a = solve(two_classes(3.0, 1.0, fmin_b=40.0), PROFILES)
    heavy_b = solve(two_classes(1.0, 3.0, fmin_b=40.0), PROFILES)
    assert heavy_a.feasible and heavy_b.feasible, (heavy_a.reason, heavy_b.reason)
    assert heavy_a.action_rate_hz["A"] > heavy_b.action_rate_hz["A"]
    assert heavy_b.action_rate_hz["B"] > heavy_a.action_rate_hz["B"]
    for s in (heavy_a, heavy_b):
        assert 8 * s.action_rate_hz["B"] >= 40.0 * (1 - 1e-9)  # F_min of B
        assert s.weighted_objective == pytest.approx(
            sum(v * 8 * s.action_rate_hz[c] for c, v in zip("AB", (3, 1) if s is heavy_a else (1, 3))))
        assert len([a for a in s.assignments if a.standby_for is None]) <= 4
    # Total capacity is 4 x 30 = 120 Hz: with B at its 40 actions/s floor, A can have at most 80.
    assert 8 * heavy_a.action_rate_hz["A"] <= 80.0 + 1e-6
    check_routes(two_classes(3.0, 1.0), heavy_a)


def test_compaction_merges_two_low_load_servers():
    table = LatencyTable(PROFILES, HW)

    def server(cls: str, robot: str, rate: float) -> PlannedServer:
        return PlannedServer("system1", "s1", 1, (Stream(cls, robot, rate, 0.2, "p99"),))

    merged = compact(table, [server("A", "a0", 2.0), server("B", "b0", 3.0)])
    assert len(merged) == 1 and {s.robot_id for s in merged[0].streams} == {"a0", "b0"}
    assert merged[0].load_hz == pytest.approx(5.0)
    # 20 + 20 Hz exceeds the 30 Hz of batch 4: no merge.
    assert len(compact(table, [server("A", "a0", 20.0), server("B", "b0", 20.0)])) == 2
    # Different models never share a server.
    other = PlannedServer("system1", "fast", 1, (Stream("B", "b1", 1.0, 0.2, "p99"),))
    assert len(compact(table, [server("A", "a0", 2.0), other])) == 2


def test_hot_standby_mirrors_busiest_goal_server_and_round_trips():
    comps = (S1, ComponentSpec("monitor", "mon", 2.0, freq_hz=0.5))
    cls = TaskClass("A", robots("r", 10), comps, action_period_s=0.01)
    problem = FactoryProblem((cls,), ServerPool(3, HW, standby=1))
    sched = solve(problem, PROFILES)
    assert sched.feasible, sched.reason
    standbys = [a for a in sched.assignments if a.standby_for is not None]
    serving = {a.server: a for a in sched.assignments if a.standby_for is None}
    assert len(standbys) == 1 and sorted(serving) == [0, 1, 2] and standbys[0].server == 3
    target = serving[standbys[0].standby_for]
    assert target.component == "system1"
    assert (standbys[0].component, standbys[0].model, standbys[0].batch) == (target.component, target.model, target.batch)
    assert not any(r.server == 3 for r in sched.routes) and standbys[0].robot_ids == ()
    check_routes(problem, sched)
    d = json.loads(json.dumps(sched.to_dict()))
    back = FactorySchedule(**{**d, "assignments": tuple(
        ServerAssignment(**{**a, "robot_ids": tuple(a["robot_ids"])}) for a in d["assignments"]),
                              "routes": tuple(Route(**r) for r in d["routes"])})
    assert back == sched
    assert not math.isnan(sched.solver_time_s)


def test_obligations_across_classes_reach_the_aggregate_footprint():
    # Three classes x 64 robots x 0.5 Hz = 96 Hz of monitor load (eq. 2) on 20 Hz servers: 5 servers.
    # Isolated packing gives each class 2 servers at 16 Hz; no two merge whole (32 > 20), so only
    # stream-level compaction gets from 6 to 5.
    mon = ComponentSpec("monitor", "mon", 2.0, freq_hz=0.5)
    classes = tuple(TaskClass(n, robots(n, 64), (mon,), action_period_s=0.2) for n in "ABC")
    problem = FactoryProblem(classes, ServerPool(8, HW))
    assert aggregate_rates(problem) == {"monitor": pytest.approx(96.0)}
    servers, why = provision_obligations(problem, LatencyTable(PROFILES, HW))
    assert why is None
    assert len(servers) == 5
    assert sorted(st.robot_id for s in servers for st in s.streams) == sorted(r for c in classes for r in c.robot_ids)
    assert all(s.load_hz <= 20.0 + 1e-9 for s in servers)
    servers, why = provision_obligations(replace(problem, servers=ServerPool(4, HW)), LatencyTable(PROFILES, HW))
    assert servers == [] and "monitor needs 5 servers" in why


def test_spare_servers_spread_load_when_latency_grows_with_it():
    # System 1 and System 2 (H = 1) both take 0.01 s of mean latency per Hz of load; t_act = 0.1 s.
    # One robot per server: f (0.1 + 0.01 f + 0.01 f) = 1 -> f* = 5 Hz. At 5 Hz the configurations
    # allow 2 robots per server (0.01 * 2 * 5 = 0.1 s, all of eq. (4)'s slack if the other model
    # were idle), so the minimum-server packing is 4 + 4 servers with a 0.3 s loop; only spreading
    # over all 16 servers reaches 5 Hz, through steps (5 servers: 2,2,2,1,1) that do not yet lower
    # the slowest robot's latency.
    pts = tuple(ProfilePoint(1, r, 0.01 * r, 0.0125 * r) for r in (0.0, 50.0, 100.0))
    profiles = {(m, HW): ModelProfile(m, HW, STATIC, pts) for m in ("lin1", "lin2")}
    comps = (ComponentSpec("system1", "lin1", 5.0), ComponentSpec("system2", "lin2", 5.0))
    cls = TaskClass("A", robots("r", 8), comps, action_period_s=0.1, system2_ratio=1)
    sched = solve(FactoryProblem((cls,), ServerPool(16, HW)), profiles, rate_tolerance=0.001)
    assert 5.0 * (1 - 0.001) <= sched.action_rate_hz["A"] <= 5.0 + 1e-9
    assert sorted(len(a.robot_ids) for a in sched.assignments) == [1] * 16


def test_heterogeneous_compaction_fits_classes_on_a_shared_server():
    # Isolated packing gives each class its own System 1 server (2 > budget 1); compaction merges
    # them, and the shared 1000 Hz server leaves each class at its eq. (4) bound.
    s1 = ComponentSpec("system1", "fast", 0.2)
    a = TaskClass("A", robots("a", 2), (s1,), action_period_s=0.2)
    b = TaskClass("B", robots("b", 2), (s1,), action_period_s=0.1)
    problem = FactoryProblem((a, b), ServerPool(1, HW))
    sched = solve(problem, PROFILES, rate_tolerance=0.001)
    assert sched.feasible, sched.reason
    (server,) = sched.assignments
    assert set(server.robot_ids) == {"a0", "a1", "b0", "b1"}
    assert sched.action_rate_hz["A"] == pytest.approx(1 / 0.25, rel=0.002)
    assert sched.action_rate_hz["B"] == pytest.approx(1 / 0.15, rel=0.002)
    check_routes(problem, sched)
