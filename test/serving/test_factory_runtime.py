"""A factory schedule applied to a real ServingCore (serving.factory_runtime): placement, batch
caps, rates and routes at registration, refusal of what the plan does not hold, and the hot
standby taking a failed System 1 instance's streams without a new schedule. Real tiny pi0
engines and the real FIFO scheduler; the schedules are written by hand so each expectation is
the plan's own word (the solver's schedules are checked in test/scheduler/factory)."""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from physai_ros.client.robot_client import RobotClientCore
from physai_ros.config.fleet import parse_fleet
from physai_ros.config_fields import FleetConfigError
from physai_ros.scheduler.factory.types import (ComponentSpec, FactoryProblem, FactorySchedule, Route,
                                                ServerAssignment, ServerPool, TaskClass)
from physai_ros.serving.factory_runtime import FactoryRuntime, bind_servers
from physai_ros.serving.startup.engine_builder import build_core

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "faults"))
from fault_fleet import fleet_doc, obs, robot_entry  # noqa: E402

PLANNED = ("r0", "r1")
S1_RATE = 2.5


def _problem() -> FactoryProblem:
    comps = (ComponentSpec("system1", "pi0", 5.0), ComponentSpec("monitor", "vlm", 5.0, freq_hz=0.5))
    return FactoryProblem((TaskClass("pick_place", PLANNED, comps, action_period_s=0.2),), ServerPool(2, "cpu", 1))


def _schedule() -> FactorySchedule:
    s1 = ServerAssignment(0, "system1", "pi0", 2, PLANNED, 2 * S1_RATE, 0.05, 0.1)
    mon = ServerAssignment(1, "monitor", "vlm", 1, PLANNED, 1.0, 0.2, 0.4)
    standby = ServerAssignment(2, "system1", "pi0", 2, (), 0.0, 0.05, 0.1, standby_for=0)
    routes = tuple(Route(r, "system1", 0, S1_RATE) for r in PLANNED) + tuple(Route(r, "monitor", 1, 0.5) for r in PLANNED)
    return FactorySchedule(True, "hand-made", (s1, mon, standby), routes, {"pick_place": S1_RATE}, 2 * S1_RATE,
                           2 * S1_RATE, {"system1": 1.0, "monitor": 1.0})


@pytest.fixture()
def served():
    robots = [robot_entry(r, i) for i, r in enumerate(PLANNED)] + [robot_entry("stranger", 5, task="other")]
    cfg = parse_fleet(fleet_doc(robots=robots, server={"engine_instances": 2, "standby_instances": 1},
                                tasks={"other": {}}))
    core = build_core(cfg, instance_id="factory")
    runtime = FactoryRuntime(_problem(), {}, _schedule(), [(i, s.standby) for i, s in core.engines.items()])
    core.apply_factory(runtime)
    return cfg, core, runtime


def _register(core, cfg, rid):
    return core.register(RobotClientCore(cfg.resolve_robot(rid)).registration())


def _serve(core, robots, round_id):
    for rid in robots:
        core.submit(obs(rid, round_id))
    chunks = []
    for _ in range(10):
        chunks += core.step().chunks
        if core.pending() == 0:
            break
    return chunks


def test_servers_bind_to_instances_in_build_order_and_a_short_server_is_named():
    roles = bind_servers(_schedule(), [("engine_0", False), ("engine_1", False), ("engine_2", True)])
    assert {i: (r.component, r.batch, r.standby_for) for i, r in roles.items()} == {
        "engine_0": ("system1", 2, None), "engine_1": ("monitor", 1, None), "engine_2": ("system1", 2, "engine_0")}
    with pytest.raises(FleetConfigError, match=r"the plan uses 2 serving server\(s\) and 1 standby\(s\), the server "
                                               r"has 1 active and 1 standby"):
        bind_servers(_schedule(), [("engine_0", False), ("engine_2", True)])
    with pytest.raises(FleetConfigError, match="no feasible schedule for this server: too small"):
        FactoryRuntime(_problem(), {}, FactorySchedule(False, "too small"), [("engine_0", False)])


def test_planned_robots_get_their_rate_and_routes_and_system1_runs_only_where_planned(served):
    cfg, core, runtime = served
    res = _register(core, cfg, "r0")
    assert res.accepted and res.max_request_rate_hz == S1_RATE
    assert dict(res.routes) == {"system1": "engine_0", "monitor": "engine_1"}
    assert _register(core, cfg, "r1").accepted
    assert core.engines["engine_0"].max_batch == 2 and core.engines["engine_1"].max_batch == 4
    chunks = _serve(core, PLANNED, 2) + _serve(core, PLANNED, 4)
    assert len(chunks) == 4 and all(c.error == "" for c in chunks)
    # engine_1 hosts the monitor, engine_2 is a standby: System 1 never ran there.
    assert {c.engine_instance for c in chunks} == {"engine_0"}
    assert core.engines["engine_1"].batches == 0 and core.engines["engine_2"].batches == 0
    d = core.failover_diagnostics()
    assert d["factory.admissions"] == {"planned": 2} and d["factory.action_rate_hz"] == {"pick_place": S1_RATE}
    assert core.engine_diagnostics()["engine_1"]["factory_role"] == "monitor (vlm, batch 1)"


def test_a_task_the_plan_does_not_hold_is_refused_with_the_reason(served):
    cfg, core, runtime = served
    res = _register(core, cfg, "stranger")
    assert not res.accepted and res.reason.startswith("factory_schedule: task 'other' is not in the plan")
    assert core.registration("stranger") is None and runtime.admissions["refused"] == 1


def test_the_standby_takes_over_a_failed_system1_instance_without_a_new_schedule(served):
    cfg, core, runtime = served
    for rid in PLANNED:
        assert _register(core, cfg, rid).accepted
    assert {c.engine_instance for c in _serve(core, PLANNED, 2)} == {"engine_0"}
    before = runtime.schedule
    core.instance_failed("engine_0", "test: its GPU fell off the bus")
    chunks = _serve(core, PLANNED, 4)
    assert len(chunks) == 2 and {c.engine_instance for c in chunks} == {"engine_2"}
    assert core.engines["engine_1"].batches == 0  # the monitor's instance stays the monitor's
    assert runtime.schedule is before  # routed to the warm standby, not re-planned
    assert core.failover_diagnostics()["standby_serving"] == "engine_2"


def test_the_client_sends_no_faster_than_the_planned_rate(served):
    cfg, core, _ = served
    client = RobotClientCore(cfg.resolve_robot("r0"))
    client.on_registered(core.register(client.registration()))
    assert client.trigger.max_rate_hz == pytest.approx(S1_RATE)
    assert client.routes == {"system1": "engine_0", "monitor": "engine_1"}
    # Without a plan (a server that runs none) the cap is lifted again.
    from physai_ros.protocol.registration import RegistrationResult

    client.on_registered(RegistrationResult(True, "", "factory"))
    assert client.trigger.max_rate_hz == 0.0 and client.routes == {}


def _solved_runtime(core, monitor_hz=0.5):
    """The real solver's plan for r0 and r1 on this core's instances, with profiles made here."""
    from physai_ros.scheduler.factory.profiling import profile_from_service_times
    from physai_ros.scheduler.factory.solver import solve
    from physai_ros.scheduler.factory.types import CONTINUOUS

    profiles = {("pi0", "cpu"): profile_from_service_times("pi0", "cpu", {1: 0.05, 2: 0.08}, requests=600),
                ("vlm", "cpu"): profile_from_service_times("vlm", "cpu", {1: 0.1, 2: 0.15}, batching=CONTINUOUS,
                                                           requests=600)}
    problem = _problem()
    cls = problem.classes[0]
    comps = tuple(dataclasses.replace(c, freq_hz=monitor_hz) if c.component == "monitor" else c
                  for c in cls.components)
    problem = dataclasses.replace(problem, classes=(dataclasses.replace(cls, components=comps),))
    schedule = solve(problem, profiles)
    assert schedule.feasible, schedule.reason
    runtime = FactoryRuntime(problem, profiles, schedule, [(i, s.standby) for i, s in core.engines.items()])
    core.apply_factory(runtime)
    return runtime


@pytest.fixture()
def core_with_a_newcomer():
    robots = [robot_entry(r, i) for i, r in enumerate(PLANNED + ("r2",))]
    cfg = parse_fleet(fleet_doc(robots=robots, server={"engine_instances": 2, "standby_instances": 1}))
    return cfg, build_core(cfg, instance_id="factory")


def test_a_newcomer_with_headroom_is_admitted_placement_preserving_and_a_reschedule_is_proposed(
        core_with_a_newcomer):
    cfg, core = core_with_a_newcomer
    runtime = _solved_runtime(core)
    placement = {iid: r.component for iid, r in runtime.roles.items()}
    res = _register(core, cfg, "r2")
    assert res.accepted and res.max_request_rate_hz > 0
    assert dict(res.routes)["system1"] == "engine_0" and runtime.admissions["admitted"] == 1
    assert {iid: r.component for iid, r in runtime.roles.items()} == placement  # placement kept
    assert "r2" in runtime.problem.classes[0].robot_ids and runtime.schedule.route("r2", "monitor") is not None
    assert runtime.wait_for_proposals(60) and runtime.proposed is not None and runtime.proposed.feasible
    assert {r.robot_id for r in runtime.proposed.routes} == {"r0", "r1", "r2"}
    # The planned robots re-register (their clients do every 2 s) and hear the class's rate now.
    assert _register(core, cfg, "r0").max_request_rate_hz == pytest.approx(
        runtime.schedule.action_rate_hz["pick_place"])
    assert runtime.admissions["planned"] == 1  # a keep-alive is not a second robot
    # The newcomer leaves: its routes and load go (the planned robots keep theirs).
    assert core.release("r2")
    assert runtime.schedule.route("r2", "system1") is None and "r2" not in runtime.problem.classes[0].robot_ids
    assert runtime.admissions["released"] == 1 and runtime.schedule.route("r0", "system1") is not None
    assert not runtime.release("r0")  # a planned robot is not released from the plan


def test_a_newcomer_the_placement_cannot_carry_is_refused_with_the_reason(core_with_a_newcomer):
    cfg, core = core_with_a_newcomer
    # The monitor asks at 5 Hz: one monitor instance (capacity ~13 questions/s) carries two robots,
    # not three, and an obligation's rate is not lowered to make room.
    runtime = _solved_runtime(core, monitor_hz=5.0)
    assert [r.component for r in runtime.roles.values()].count("monitor") == 1
    res = _register(core, cfg, "r2")
    assert not res.accepted and res.reason.startswith("factory_schedule: placement-preserving admission failed")
    assert "monitor" in res.reason, res.reason
    assert core.registration("r2") is None and runtime.admissions["refused"] == 1
    assert runtime.wait_for_proposals(60) and runtime.proposals_done == 1  # the operator gets a proposal
    # The refused robot retries (its client does every few seconds): refused again, not solved again.
    assert not _register(core, cfg, "r2").accepted and runtime.admissions["refused"] == 2
    assert runtime.wait_for_proposals(60) and runtime.proposals_done == 1


def test_start_up_plan_measures_system1_and_the_backbone_components_on_this_server(tmp_path):
    """apply_factory as the policy server runs it with server.profile on: System 1's profile from
    the start-up measurement, the `model: vla` components timed on the engine, then the plan."""
    import json

    import yaml

    from physai_ros.scheduler.factory.types import CONTINUOUS, STATIC
    from physai_ros.serving.startup.engine_builder import profile_local_engines
    from physai_ros.serving.startup.factory_plan import apply_factory

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from component_helpers import fleet_doc as component_fleet

    doc = component_fleet()
    doc["server"].update(engine_instances=3, profile={"reps": 1, "max_batch": 2, "views": 1})
    doc["tasks"]["inspect"]["pipeline"]["action_period_ms"] = 500
    (tmp_path / "none.json").write_text(json.dumps({"profiles": [{"model": "unused", "hardware": "here",
                                                                  "batching": "static", "points": []}]}))
    doc["factory"] = {"servers": 3, "hardware": "here", "profiles": "none.json", "apply": True,
                      "models": {"system1": "tiny-s1", "system2": "tiny-vla", "safety": "tiny-vla",
                                 "monitor": "tiny-vla"}, "robots": {"plain": 0}}
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(doc))
    cfg = parse_fleet(yaml.safe_load(path.read_text()), str(path))
    core = build_core(cfg, instance_id="startup")
    measured = profile_local_engines(core, cfg)
    runtime = apply_factory(core, cfg, measured=list(measured))
    s1, vla = runtime.profiles[("tiny-s1", "here")], runtime.profiles[("tiny-vla", "here")]
    assert s1.batching == STATIC and "System 1 measured at this server's start-up" in s1.note
    assert vla.batching == CONTINUOUS and "measured at this server's start-up" in vla.note
    assert runtime.schedule.feasible, runtime.schedule.reason
    # System 2 is not pooled with the obligations (another serving mode); safety and monitor are.
    assert sorted(r.component for r in runtime.roles.values()) == ["safety+monitor", "system1", "system2"]


def test_component_questions_follow_each_robots_route_to_its_instance():
    """A plan with the monitor on two instances (r0 -> engine_1, r1 -> engine_2): the component
    service builds the backbone backend on each, answers each robot's questions on its routed
    instance, one worker thread per instance."""
    import threading

    from physai_ros.serving.pipeline.service import ComponentService

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from component_helpers import fleet_doc as component_fleet
    from component_helpers import request

    doc = component_fleet()
    doc["server"].update(engine_instances=3)
    cfg = parse_fleet(doc)
    core = build_core(cfg, instance_id="routes")
    for rid in ("r0", "r1"):
        assert core.register(RobotClientCore(cfg.robot(rid)).registration()).accepted
    comps = (ComponentSpec("system1", "pi0", 5.0), ComponentSpec("monitor", "vlm", 5.0, freq_hz=1.0))
    problem = FactoryProblem((TaskClass("inspect", ("r0", "r1"), comps, action_period_s=0.5),), ServerPool(3, "cpu"))
    schedule = FactorySchedule(
        True, "hand-made", (ServerAssignment(0, "system1", "pi0", 2, ("r0", "r1"), 4.0, 0.05, 0.1),
                            ServerAssignment(1, "monitor", "vlm", 1, ("r0",), 1.0, 0.2, 0.4),
                            ServerAssignment(2, "monitor", "vlm", 1, ("r1",), 1.0, 0.2, 0.4)),
        (Route("r0", "system1", 0, 2.0), Route("r1", "system1", 0, 2.0), Route("r0", "monitor", 1, 1.0),
         Route("r1", "monitor", 2, 1.0)), {"inspect": 2.0}, 4.0, 4.0, {"system1": 1.0, "monitor": 1.0})
    core.apply_factory(FactoryRuntime(problem, {}, schedule, [(i, s.standby) for i, s in core.engines.items()]))
    got, cv = [], threading.Condition()

    def collect(answers):
        with cv:
            got.extend(answers)
            cv.notify_all()

    svc = ComponentService(cfg, core, collect)
    try:
        assert {"vla@engine_1", "vla@engine_2"} <= set(svc.backends) and len(svc._threads) == 2
        assert svc.submit(request("r0", "monitor", 1)) is None
        assert svc.submit(request("r1", "monitor", 2, views=2)) is None
        with cv:
            assert cv.wait_for(lambda: len(got) >= 2, 60), got
        by_robot = {a.robot_id: a.backend for a in got}
        assert by_robot == {"r0": "vla_backbone@engine_1/own", "r1": "vla_backbone@engine_2/own"}, got
    finally:
        svc.close(10.0)


def test_a_refused_robot_not_heard_from_again_is_not_planned_for(core_with_a_newcomer, monkeypatch):
    """A plan keeps no capacity for a robot that tried once and went away: the re-plan takes a
    refused robot only while it keeps retrying (within NEWCOMER_TTL_S; 0 here)."""
    from physai_ros.serving import factory_replan

    monkeypatch.setattr(factory_replan, "NEWCOMER_TTL_S", 0.0)
    cfg, core = core_with_a_newcomer
    runtime = _solved_runtime(core, monitor_hz=5.0)
    assert not _register(core, cfg, "r2").accepted
    assert runtime.wait_for_proposals(60) and runtime.proposals_done == 1
    assert {r.robot_id for r in runtime.proposed.routes} == {"r0", "r1"}
