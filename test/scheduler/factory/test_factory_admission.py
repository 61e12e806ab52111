"""ROSA §3.4.4: placement-preserving admission, hot-standby failover and release."""
from __future__ import annotations

import pytest

from physai_ros.scheduler.factory import (
    ComponentSpec, FactoryProblem, ModelProfile, ProfilePoint, ServerPool, STATIC, TaskClass,
    admit, failover, release, solve,
)

HW = "gpu"


def flat(model: str, caps: dict[int, float], mean: float, p99: float) -> ModelProfile:
    pts = tuple(ProfilePoint(b, cap * i / 10, mean, p99) for b, cap in caps.items() for i in range(1, 11))
    return ModelProfile(model, HW, STATIC, pts)


PROFILES = {
    ("s1", HW): flat("s1", {4: 30.0}, mean=0.04, p99=0.05),  # 30 Hz per server
    ("fast", HW): flat("fast", {1: 1000.0}, mean=0.05, p99=0.06),
    ("mon", HW): flat("mon", {1: 20.0}, mean=0.2, p99=0.5),
}


def problem(n: int, model: str = "s1", fmin: float = 0.0, t_act: float = 0.01, standby: int = 0,
            monitor: bool = False) -> FactoryProblem:
    comps = (ComponentSpec("system1", model, 0.2),)
    if monitor:
        comps += (ComponentSpec("monitor", "mon", 2.0, freq_hz=0.5),)
    cls = TaskClass("A", tuple(f"r{i}" for i in range(n)), comps, action_period_s=t_act, min_throughput=fmin)
    return FactoryProblem((cls,), ServerPool(2, HW, standby=standby))


def test_admits_into_headroom_without_changing_rate_or_placement():
    # 1000 Hz servers, eq. (4) bound at 1 / (0.2 + 0.05) = 4 Hz: one more robot fits at the same rate.
    p = problem(8, model="fast", t_act=0.2, monitor=True)
    sched = solve(p, PROFILES)
    d = admit(sched, p, PROFILES, "A", "new")
    assert d.admitted, d.reason
    assert d.proposed is None  # the re-solve is not notably better
    assert d.schedule.action_rate_hz["A"] == sched.action_rate_hz["A"]
    placement = lambda s: sorted((a.server, a.component, a.model) for a in s.assignments)  # noqa: E731
    assert placement(d.schedule) == placement(sched)
    for comp in ("system1", "monitor"):
        route = d.schedule.route("new", comp)
        assert route is not None
        a = next(x for x in d.schedule.assignments if x.server == route.server)
        assert "new" in a.robot_ids
    assert d.schedule.factory_throughput == pytest.approx(9 * sched.action_rate_hz["A"])
    assert d.schedule.predicted_slo_attainment["system1"] == 1.0
    # Old routes are untouched apart from the new robot's.
    assert set(sched.routes) <= set(d.schedule.routes)


def test_admission_lowers_the_rate_when_servers_are_full():
    # 10 robots on 2 x 30 Hz servers run at 6 Hz (5 per server). An 11th puts 6 on one: 5 Hz.
    p = problem(10)
    sched = solve(p, PROFILES, rate_tolerance=0.001)
    d = admit(sched, p, PROFILES, "A", "new")
    assert d.admitted, d.reason
    f = d.schedule.action_rate_hz["A"]
    assert 5.0 * 0.99 <= f <= 5.0 + 1e-9
    assert "lowered" in d.reason
    assert all(r.rate_hz == pytest.approx(f) for r in d.schedule.routes)
    assert all(a.load_hz <= 30.0 + 1e-9 for a in d.schedule.assignments)


def test_admission_refuses_when_fmin_forbids_lowering_and_proposes_a_resolve():
    # F_min = 59 actions/s: 11 robots need >= 5.36 Hz, but fixed placement allows only 5 Hz.
    p = problem(10, fmin=59.0)
    sched = solve(p, PROFILES, rate_tolerance=0.001)
    assert sched.feasible, sched.reason
    d = admit(sched, p, PROFILES, "A", "new")
    assert not d.admitted
    assert d.schedule is sched
    assert "placement-preserving admission failed" in d.reason
    assert d.proposed is not None  # the global re-solve (here itself infeasible: 60 Hz / 11 < 5.36)
    assert not d.proposed.feasible and "F_min" in d.proposed.reason


def test_admission_rejects_unknown_class_and_duplicate_robot():
    p = problem(4)
    sched = solve(p, PROFILES)
    assert not admit(sched, p, PROFILES, "nope", "x").admitted
    assert not admit(sched, p, PROFILES, "A", "r0").admitted


def test_failover_moves_routes_to_the_standby():
    p = problem(10, standby=1)
    sched = solve(p, PROFILES)
    standby = next(a for a in sched.assignments if a.standby_for is not None)
    failed = standby.standby_for
    moved = {r.robot_id for r in sched.routes if r.server == failed}
    assert moved
    after = failover(sched, failed)
    assert after.feasible
    assert not any(r.server == failed for r in after.routes)
    assert {r.robot_id for r in after.routes if r.server == standby.server} == moved
    promoted = next(a for a in after.assignments if a.server == standby.server)
    assert promoted.standby_for is None and set(promoted.robot_ids) == moved
    assert all(a.server != failed for a in after.assignments)
    assert after.action_rate_hz == sched.action_rate_hz  # no re-solve
    # The other server has no standby: failover says so.
    other = next(a.server for a in sched.assignments if a.standby_for is None and a.server != failed)
    no = failover(sched, other)
    assert not no.feasible and "no hot standby" in no.reason


def test_release_removes_a_robots_routes():
    p = problem(10, monitor=True)
    sched = solve(p, PROFILES)
    after = release(sched, "r3", p)
    assert after.route("r3", "system1") is None and after.route("r3", "monitor") is None
    assert all("r3" not in a.robot_ids for a in after.assignments)
    assert sum(a.load_hz for a in after.assignments) == pytest.approx(
        sum(a.load_hz for a in sched.assignments) - sched.action_rate_hz["A"] - 0.5)
    assert after.factory_throughput == pytest.approx(9 * sched.action_rate_hz["A"])
    with pytest.raises(ValueError):
        release(after, "r3")


def test_released_robot_is_admitted_back():
    p = problem(8, model="fast", t_act=0.2, monitor=True)
    sched = solve(p, PROFILES)
    gone = release(sched, "r2", p)
    d = admit(gone, p, PROFILES, "A", "r2", resolve=False)
    assert d.admitted, d.reason
    assert d.schedule.route("r2", "system1") is not None and d.schedule.route("r2", "monitor") is not None
    assert d.schedule.action_rate_hz["A"] == sched.action_rate_hz["A"]


def test_first_robot_of_an_empty_class_shares_existing_servers():
    s1 = ComponentSpec("system1", "fast", 0.2)
    a = TaskClass("A", ("a0", "a1"), (s1,), action_period_s=0.2)
    b = TaskClass("B", (), (s1,), action_period_s=0.1)
    p = FactoryProblem((a, b), ServerPool(1, HW))
    sched = solve(p, PROFILES)
    assert sched.feasible and sched.action_rate_hz["B"] == 0.0
    d = admit(sched, p, PROFILES, "B", "b0", resolve=False)
    assert d.admitted, d.reason
    # Eq. (4) for B alone: 1 / (0.1 + 0.05) Hz on the shared 1000 Hz server.
    assert d.schedule.action_rate_hz["B"] == pytest.approx(1 / 0.15, rel=0.02)
    assert d.schedule.route("b0", "system1").server == d.schedule.route("a0", "system1").server
