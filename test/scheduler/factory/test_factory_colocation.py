"""Obligation components answered by one model share servers (ROSA §3.4.1 dedicates a
server to a MODEL). Tiny profiles, every count below is worked out by hand.

The "vla" curve (continuous batching, b = 1) is measured at 2, 4, ..., 20 Hz with
p99 = 0.1 + 0.02 * rate and mean = 0.05 + 0.01 * rate. Safety: 2 Hz per robot, 0.32 s at p99
(rate cap 11 Hz); monitor: 0.5 Hz per robot, 1.0 s at p99 (cap 20 Hz, the end of the curve).
"""
from __future__ import annotations

from dataclasses import replace

import pytest

from physai_ros.scheduler.factory import (
    CONTINUOUS, STATIC, ComponentSpec, FactoryProblem, ModelProfile, ProfilePoint, ServerPool, TaskClass,
    admit, failover, hosted_components, release, solve,
)
from physai_ros.scheduler.factory.colocation import obligation_pair, pooled_label, pooled_stream
from physai_ros.scheduler.factory.configs import Part
from physai_ros.scheduler.factory.obligations import aggregate_rates
from physai_ros.scheduler.factory.schedule import servers_from_schedule

HW = "gpu"


def linear(model: str) -> ModelProfile:
    pts = tuple(ProfilePoint(1, r, 0.05 + 0.01 * r, 0.1 + 0.02 * r) for r in range(2, 21, 2))
    return ModelProfile(model, HW, CONTINUOUS, pts)


PROFILES = {
    ("vla", HW): linear("vla"),
    ("vla_b", HW): linear("vla_b"),  # the same curve under another name: a different model
    ("fast", HW): ModelProfile("fast", HW, STATIC, tuple(ProfilePoint(1, 100.0 * i, 0.05, 0.06) for i in range(1, 11))),
}
S1 = ComponentSpec("system1", "fast", 0.2)


def safety(model: str = "vla") -> ComponentSpec:
    return ComponentSpec("safety", model, 0.32, freq_hz=2.0)


def monitor(model: str = "vla") -> ComponentSpec:
    return ComponentSpec("monitor", model, 1.0, freq_hz=0.5)


def problem(n: int, comps: tuple[ComponentSpec, ...], servers: int = 4, standby: int = 0) -> FactoryProblem:
    cls = TaskClass("A", tuple(f"r{i}" for i in range(n)), comps, action_period_s=0.2)
    return FactoryProblem((cls,), ServerPool(servers, HW, standby=standby))


def obligation_servers(sched):
    return [a for a in sched.assignments if a.standby_for is None and a.component != "system1"]


def test_same_model_safety_and_monitor_share_servers():
    # Pooled: 2 + 0.5 = 2.5 Hz per robot at the strictest SLO (0.32 s -> 11 Hz): 4 robots per
    # server, 8 robots -> 2 servers. Listed monitor first: the label is still in OBLIGATION order.
    p = problem(8, (S1, monitor(), safety()))
    sched = solve(p, PROFILES)
    assert sched.feasible, sched.reason
    obl = obligation_servers(sched)
    assert len(obl) == 2
    for a in obl:
        assert (a.component, a.model) == ("safety+monitor", "vla")
        assert hosted_components(a) == ("safety", "monitor")
        assert len(a.robot_ids) == 4 and a.load_hz == pytest.approx(10.0)
        # p99 at 10 Hz = 0.1 + 0.2 = 0.3 s, within the strictest SLO (safety's 0.32 s); the
        # monitor's own 1.0 s alone would have let 8 robots (20 Hz) onto one server.
        assert a.predicted_p99_s == pytest.approx(0.3) and a.predicted_p99_s <= min(0.32, 1.0)
    # Eq. (2) is still reported per component; the attainment too, never per pooled label.
    assert aggregate_rates(p) == {"safety": pytest.approx(16.0), "monitor": pytest.approx(4.0)}
    assert sched.predicted_slo_attainment == {"system1": 1.0, "safety": 1.0, "monitor": 1.0}


def test_different_models_keep_separate_servers():
    # Safety alone: 2 Hz at 11 Hz cap -> 5 robots per server -> 2 servers; monitor alone: 0.5 Hz
    # up to 20 Hz -> 1 server. Three, one more than pooled.
    sched = solve(problem(8, (S1, safety("vla"), monitor("vla_b"))), PROFILES)
    assert sched.feasible, sched.reason
    obl = obligation_servers(sched)
    assert sorted((a.component, a.model) for a in obl) == [("monitor", "vla_b"), ("safety", "vla"), ("safety", "vla")]
    assert all(len(hosted_components(a)) == 1 for a in obl)
    # With 3 servers the pooled plan still leaves one for System 1; the separate one cannot.
    assert solve(problem(8, (S1, safety(), monitor()), servers=3), PROFILES).feasible
    tight = solve(problem(8, (S1, safety("vla"), monitor("vla_b")), servers=3), PROFILES)
    assert not tight.feasible and "goal-coupled" in tight.reason


def test_routes_of_both_components_point_to_one_server_with_their_own_rates():
    sched = solve(problem(8, (S1, safety(), monitor())), PROFILES)
    by_server = {a.server: a for a in sched.assignments}
    for i in range(8):
        s, m = sched.route(f"r{i}", "safety"), sched.route(f"r{i}", "monitor")
        assert s.server == m.server and (s.rate_hz, m.rate_hz) == (2.0, 0.5)
        assert f"r{i}" in by_server[s.server].robot_ids
    for a in obligation_servers(sched):
        assert a.load_hz == pytest.approx(sum(r.rate_hz for r in sched.routes if r.server == a.server))
    # Back to planned servers: one pooled stream per robot, its parts the two components.
    planned = dict(servers_from_schedule(sched, problem(8, (S1, safety(), monitor()))))
    for a in obligation_servers(sched):
        streams = planned[a.server].streams
        assert len(streams) == 4 and planned[a.server].load_hz == pytest.approx(10.0)
        assert all([p.component for p in st.parts] == ["safety", "monitor"] for st in streams)


def test_pooled_stream_uses_the_strictest_slo_at_the_highest_quantile():
    parts = (Part("monitor", 0.5, 0.25, "p50"), Part("safety", 2.0, 0.32, "p99"))
    st = pooled_stream("A", "r0", parts)
    assert (st.rate_hz, st.slo_s, st.quantile) == (2.5, 0.25, "p99")
    assert [p.component for p in st.parts] == ["safety", "monitor"]
    cls = TaskClass("A", ("r0",), (S1, ComponentSpec("monitor", "vla", 0.25, 0.5, slo_quantile=0.5), safety()), 0.2)
    pair = obligation_pair(cls, "vla", (safety(), cls.component("monitor")))
    assert (pair.component, pair.rate_hz, pair.slo_s, pair.quantile) == ("safety+monitor", 2.5, 0.25, "p99")
    assert pooled_label(["monitor", "safety"]) == "safety+monitor" and hosted_components("system1") == ("system1",)


def test_goal_coupled_components_on_one_model_stay_apart():
    # System 2 and the monitor both on "vla": System 2 (continuous batching, f / H per robot) keeps
    # its own servers; the monitor is not pooled with it.
    s2 = ComponentSpec("system2", "vla", 2.0)
    sched = solve(problem(4, (S1, s2, monitor())), PROFILES)
    assert sched.feasible, sched.reason
    labels = sorted(a.component for a in sched.assignments)
    assert "monitor" in labels and "system2" in labels and not any("+" in c for c in labels)


def test_classes_pool_on_one_model_server():
    # Class A: safety + monitor on vla, 2 robots (5 Hz); class B: safety only on vla, 2 robots
    # (4 Hz). 9 Hz <= 11 Hz: compaction puts all four robots on one "safety+monitor" server.
    a = TaskClass("A", ("a0", "a1"), (S1, safety(), monitor()), action_period_s=0.2)
    b = TaskClass("B", ("b0", "b1"), (S1, safety()), action_period_s=0.2)
    sched = solve(FactoryProblem((a, b), ServerPool(4, HW)), PROFILES)
    assert sched.feasible, sched.reason
    (obl,) = obligation_servers(sched)
    assert obl.component == "safety+monitor" and sorted(obl.robot_ids) == ["a0", "a1", "b0", "b1"]
    assert obl.load_hz == pytest.approx(9.0) and obl.predicted_p99_s <= 0.32
    assert sched.route("b0", "safety").server == obl.server and sched.route("b0", "monitor") is None


def test_admission_onto_a_pooled_server_with_headroom():
    # 7 robots: 4 + 3 per pooled server (10 and 7.5 Hz). The 8th goes to the one with 3 (both its
    # routes, 10 Hz there afterwards); a 9th fits nowhere (12.5 Hz > 11 Hz).
    p = problem(7, (S1, safety(), monitor()))
    sched = solve(p, PROFILES)
    before = {a.server: len(a.robot_ids) for a in obligation_servers(sched)}
    assert sorted(before.values()) == [3, 4]
    d = admit(sched, p, PROFILES, "A", "new", resolve=False)
    assert d.admitted, d.reason
    s, m = d.schedule.route("new", "safety"), d.schedule.route("new", "monitor")
    assert s.server == m.server and before[s.server] == 3 and (s.rate_hz, m.rate_hz) == (2.0, 0.5)
    host = next(a for a in d.schedule.assignments if a.server == s.server)
    assert host.component == "safety+monitor" and host.load_hz == pytest.approx(10.0) and host.predicted_p99_s <= 0.32
    assert d.schedule.predicted_slo_attainment["safety"] == 1.0 == d.schedule.predicted_slo_attainment["monitor"]
    bigger = FactoryProblem((replace(p.classes[0], robot_ids=p.classes[0].robot_ids + ("new",)),), p.servers)
    no = admit(d.schedule, bigger, PROFILES, "A", "ninth", resolve=False)
    assert not no.admitted and "safety+monitor" in no.reason


def test_failover_and_release_of_a_pooled_server():
    # 3 servers: 2 pooled + 1 System 1; 2 standbys mirror the System 1 server and a pooled one.
    p = problem(8, (S1, safety(), monitor()), servers=3, standby=2)
    sched = solve(p, PROFILES)
    assert sched.feasible, sched.reason
    standby = next(a for a in sched.assignments if a.standby_for is not None and a.component == "safety+monitor")
    failed = standby.standby_for
    moved = {(r.robot_id, r.component) for r in sched.routes if r.server == failed}
    after = failover(sched, failed)
    assert after.feasible and {(r.robot_id, r.component) for r in after.routes if r.server == standby.server} == moved
    assert {c for _, c in moved} == {"safety", "monitor"}
    robot = next(r for r, _ in moved)
    released = release(after, robot, p)
    host = next(a for a in released.assignments if a.server == standby.server)
    assert robot not in host.robot_ids and host.load_hz == pytest.approx(10.0 - 2.5)


# Seeded random fleets where some classes put safety and monitor on one model ("vla") and others
# on two: the invariants of a pooled schedule, checked from its routes with ModelProfile.latency.
RANDOM_PROFILES = {
    **PROFILES,
    ("s1", HW): ModelProfile("s1", HW, STATIC, tuple(ProfilePoint(b, 12.0 * b * i / 10, 0.03 * (1 + i / 10) * b ** 0.3,
                                                                  0.04 * (1 + i / 10) * b ** 0.3)
                                                     for b in (1, 2, 4) for i in range(1, 11))),
}


def random_problem(rng) -> FactoryProblem:
    classes = []
    for c in range(rng.randint(1, 3)):
        s1 = ComponentSpec("system1", rng.choice(["s1", "fast"]), 0.2)
        obl = rng.choice([(safety(), monitor()), (safety("vla"), monitor("vla_b")), (safety(),), (monitor(),),
                          (ComponentSpec("safety", "vla", 0.6, 1.0, slo_quantile=0.5), monitor())])
        k = rng.randint(1, 10)
        classes.append(TaskClass(f"c{c}", tuple(f"c{c}r{i}" for i in range(k)), (s1,) + obl,
                                 action_period_s=rng.choice([0.1, 0.2])))
    return FactoryProblem(tuple(classes), ServerPool(rng.randint(3, 10), HW, standby=rng.randint(0, 2)))


@pytest.mark.parametrize("seed", range(15))
def test_pooled_schedules_hold_their_invariants(seed: int):
    import random

    problem = random_problem(random.Random(seed))
    sched = solve(problem, RANDOM_PROFILES)
    if not sched.feasible:
        assert sched.reason and not sched.routes
        return
    profile = {m: p for (m, _), p in RANDOM_PROFILES.items()}
    serving = {a.server: a for a in sched.assignments if a.standby_for is None}
    load = {s: sum(r.rate_hz for r in sched.routes if r.server == s) for s in serving}
    for s, a in serving.items():
        assert a.load_hz == pytest.approx(load[s])
        assert a.component == pooled_label({r.component for r in sched.routes if r.server == s})
    for cls in problem.classes:
        for robot in cls.robot_ids:
            for spec in cls.components:
                route = sched.route(robot, spec.component)
                a = serving[route.server]
                assert spec.component in hosted_components(a) and a.model == spec.model and robot in a.robot_ids
                if spec.freq_hz is not None:
                    assert route.rate_hz == spec.freq_hz
                column = "p50" if spec.slo_quantile == 0.5 else "p99"
                assert profile[a.model].latency(a.batch, load[a.server], column) <= spec.slo_s * (1 + 1e-9)
            s, m = cls.component("safety"), cls.component("monitor")
            if s is not None and m is not None:  # same model <=> same server
                same = sched.route(robot, "safety").server == sched.route(robot, "monitor").server
                assert same == (s.model == m.model)
    assert set(sched.predicted_slo_attainment) <= {"system1", "safety", "monitor"}
    assert all(v == 1.0 for v in sched.predicted_slo_attainment.values())


def test_every_pipeline_component_is_goal_coupled_or_an_obligation():
    from physai_ros.protocol.component import COMPONENTS, QUESTION_COMPONENTS
    from physai_ros.scheduler.factory.types import GOAL_COUPLED, OBLIGATION

    assert sorted(GOAL_COUPLED + OBLIGATION) == sorted(COMPONENTS)
    assert set(QUESTION_COMPONENTS) == set(COMPONENTS) - {"system1"}
