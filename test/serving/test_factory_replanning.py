"""A factory plan that decides and adapts, on a real ServingCore with tiny pi0 engines: each
System 1 instance runs the rounds of the robots the plan puts on it; an instance lost with no
standby hands its robots to a live one at once and a re-solved plan is applied; measured
service times drifting from the plan's re-plan with the measured profile; every round is
answered exactly once throughout."""
from __future__ import annotations

import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from physai_ros.client.robot_client import RobotClientCore
from physai_ros.config.fleet import parse_fleet
from physai_ros.scheduler.factory.profiling import profile_from_service_times
from physai_ros.scheduler.factory.types import (ComponentSpec, FactoryProblem, FactorySchedule, Route,
                                                ServerAssignment, ServerPool, TaskClass)
from physai_ros.serving.factory_runtime import FactoryRuntime
from physai_ros.serving.startup.engine_builder import build_core

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "faults"))
from fault_fleet import fleet_doc, obs, robot_entry  # noqa: E402

ROBOTS = ("r0", "r1", "r2", "r3")
ON = {"r0": "engine_0", "r1": "engine_0", "r2": "engine_1", "r3": "engine_1"}
SERVICE = {1: 0.05, 2: 0.08}


def _plan(service=SERVICE):
    """Two System 1 servers, two robots each (the plan's word, written by hand)."""
    problem = FactoryProblem((TaskClass("pick_place", ROBOTS, (ComponentSpec("system1", "pi0", 5.0),),
                                        action_period_s=0.2),), ServerPool(2, "cpu"))
    s0 = ServerAssignment(0, "system1", "pi0", 2, ("r0", "r1"), 4.0, 0.05, 0.1)
    s1 = ServerAssignment(1, "system1", "pi0", 2, ("r2", "r3"), 4.0, 0.05, 0.1)
    routes = tuple(Route(r, "system1", int(ON[r][-1]), 2.0) for r in ROBOTS)
    schedule = FactorySchedule(True, "hand-made", (s0, s1), routes, {"pick_place": 2.0}, 8.0, 8.0, {"system1": 1.0})
    profiles = {("pi0", "cpu"): profile_from_service_times("pi0", "cpu", service, requests=600)}
    return problem, profiles, schedule


@pytest.fixture()
def fleet():
    cfg = parse_fleet(fleet_doc(robots=[robot_entry(r, i) for i, r in enumerate(ROBOTS)],
                                server={"engine_instances": 2, "scheduler": "wait_ratio"}))
    core = build_core(cfg, instance_id="plan")
    problem, profiles, schedule = _plan()
    runtime = FactoryRuntime(problem, profiles, schedule, [(i, s.standby) for i, s in core.engines.items()],
                             planned_service=SERVICE)
    core.apply_factory(runtime)
    for rid in ROBOTS:
        assert core.register(RobotClientCore(cfg.resolve_robot(rid)).registration()).accepted
    return core, runtime


def _serve_round(core, round_id, robots=ROBOTS):
    for rid in robots:
        assert core.submit(obs(rid, round_id)) == []
    chunks = []
    for _ in range(20):
        chunks += core.step().chunks
        if core.pending() == 0:
            break
    return chunks


def _answered_once(chunks, robots, rounds):
    seen = Counter((c.robot_id, c.round_id) for c in chunks if c.error == "")
    assert seen == Counter({(r, k): 1 for r in robots for k in rounds}), seen


def test_each_robots_rounds_run_on_the_instance_the_plan_names(fleet):
    core, runtime = fleet
    chunks = _serve_round(core, 1) + _serve_round(core, 2)
    _answered_once(chunks, ROBOTS, (1, 2))
    assert {c.robot_id: c.engine_instance for c in chunks} == ON
    assert core.scheduler.stats()["lanes"] == {"shared": 0, "engine_0": 0, "engine_1": 0}


def test_an_instance_lost_without_a_standby_hands_its_robots_over_and_a_new_plan_is_applied(fleet):
    core, runtime = fleet
    chunks = _serve_round(core, 1)
    core.instance_failed("engine_0", "test: its GPU fell off the bus")
    # At once, before any new plan: engine_0's robots run on the live instance.
    after = _serve_round(core, 2)
    assert {c.engine_instance for c in after} == {"engine_1"}
    assert runtime.wait_for_proposals(120)
    change = runtime.changes[-1]
    assert change.reason == "instance engine_0 lost with no standby to take its streams", runtime.changes
    assert {iid: r.component for iid, r in runtime.roles.items()} == {"engine_1": "system1"}
    assert {r.robot_id for r in runtime.schedule.routes} == set(ROBOTS)
    later = _serve_round(core, 3)
    _answered_once(chunks + after + later, ROBOTS, (1, 2, 3))
    assert {c.engine_instance for c in later} == {"engine_1"}
    d = core.failover_diagnostics()
    assert d["factory.plan_changes"] == 1 and "engine_0 lost" in d["factory.last_plan_change"]


def test_measured_service_times_beyond_the_plan_re_plan_with_the_measured_profile(fleet):
    core, runtime = fleet
    for slot in core.engines.values():  # every batch now takes at least 0.3 s (planned: 50-80 ms)
        slot.before_batch = lambda iid, n: time.sleep(0.3)
    chunks = []
    for k in range(1, 9):  # 8 rounds of 2 robots per instance: a window of batches of 2 each
        chunks += _serve_round(core, k)
    _answered_once(chunks, ROBOTS, range(1, 9))
    assert runtime.wait_for_proposals(120)
    reasons = [c.reason for c in runtime.changes]
    assert any(r.startswith("System 1 batch 2 measured at") and "80.0 ms planned" in r for r in reasons), reasons
    assert "measured while serving" in runtime.profiles[("pi0", "cpu")].note
    assert runtime.online.reference[2] >= 0.3
    # The plan now runs on the measured times: lower rates than the 2 Hz planned at 80 ms.
    assert runtime.schedule.action_rate_hz["pick_place"] < 2.0


def test_with_shared_queues_the_routes_are_advisory_and_any_system1_instance_serves_any_robot():
    cfg = parse_fleet(fleet_doc(robots=[robot_entry(r, i) for i, r in enumerate(ROBOTS)],
                                server={"engine_instances": 2, "scheduler": "wait_ratio"}))
    core = build_core(cfg, instance_id="plan")
    problem, profiles, schedule = _plan()
    core.apply_factory(FactoryRuntime(problem, profiles, schedule, [(i, s.standby) for i, s in core.engines.items()],
                                      per_instance_queues=False))
    for rid in ROBOTS:
        assert core.register(RobotClientCore(cfg.resolve_robot(rid)).registration()).accepted
    chunks = _serve_round(core, 1)
    _answered_once(chunks, ROBOTS, (1,))
    assert set(core.scheduler.lanes) == {""}  # one queue: both instances took from it
    assert {c.engine_instance for c in chunks} == {"engine_0", "engine_1"}
