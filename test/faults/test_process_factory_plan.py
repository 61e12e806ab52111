"""A factory plan in a real policy_server process, robots over real DDS: the plan places robots
on two System 1 instances and their rounds run there; a robot beyond the plan joins and is
served; an instance dies with no standby (PHYSAI_FAULT_INJECTION kills engine_0's thread) and a
new plan is applied with that reason; every robot's rounds are answered exactly once throughout.

fleet.yaml: tiny model, two engine instances, max_batch 2, the wait-ratio scheduler, System 1
measured at start-up, and a factory block planning robots a and b (c is listed but not planned)
on two servers (a profile file is written here too; the start-up measurement replaces System 1's). The robots are closed loops in the
test process (process_rig.ClosedLoop); tests run in file order and share the server.
"""
from __future__ import annotations

import pytest

from physai_lab.fault_injection import fault_env
from physai_ros.client.robot_client import RobotClientCore
from physai_ros.config.fleet import load_fleet
from physai_ros.ros.codecs.registration import registration_to_request

from fault_fleet import write_factory_fleet
from process_rig import STARTUP_S, ClosedLoop, ProcessRig, server_spec

pytestmark = [pytest.mark.ros, pytest.mark.slow]

DIE_AT = 100  # engine_0's batch that kills its thread


def _fleet(d) -> str:
    # System 1 measured at start-up (server.profile) and a drift threshold no load swing reaches:
    # the plans here change for the robots and instances only (drift: test_factory_replanning.py and
    # test_process_factory_drift.py).
    return write_factory_fleet(d, ("a", "b", "c"), profile_drift=100.0)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    d = tmp_path_factory.mktemp("factory_plan")
    fleet_file = _fleet(d)
    cfg = load_fleet(fleet_file)
    rig = ProcessRig(d / "logs")
    loops: dict[str, ClosedLoop] = {}
    try:
        rig.start(server_spec("policy_server", fleet_file, fault_env(f"engine_0:die@{DIE_AT}")))
        replies = {rid: rig.register(registration_to_request(RobotClientCore(cfg.robot(rid)).registration()))
                   for rid in ("a", "b")}
        assert all(r.accepted for r in replies.values()), (replies, rig.logs())
        loops.update({rid: ClosedLoop(rig, rid).start() for rid in ("a", "b")})
        yield rig, cfg, replies, loops
    finally:
        for lp in loops.values():
            lp.stop()
        rig.close()


def _routes(reply) -> dict[str, str]:
    return dict(zip(reply.route_components, reply.route_instances))


def test_the_plan_places_the_robots_on_two_instances_and_their_rounds_run_there(served):
    rig, cfg, replies, loops = served
    on = {rid: _routes(r)["system1"] for rid, r in replies.items()}
    assert sorted(on.values()) == ["engine_0", "engine_1"], on  # the solver's plan: one robot each
    rig.wait(lambda: all(len(lp.ok()) >= 5 for lp in loops.values()), STARTUP_S, "5 rounds per robot")
    with rig.lock:
        for rid, lp in loops.items():
            assert {c.engine_instance for c in lp.ok()} == {on[rid]}, (rid, on)


def test_a_robot_beyond_the_plan_joins_and_is_served(served):
    rig, cfg, replies, loops = served
    reply = rig.register(registration_to_request(RobotClientCore(cfg.robot("c")).registration()))
    assert reply.accepted, reply.reason
    assert _routes(reply)["system1"] in ("engine_0", "engine_1") and reply.max_request_rate_hz > 0
    loops["c"] = ClosedLoop(rig, "c").start()
    rig.wait(lambda: len(loops["c"].ok()) >= 3, 60, "3 rounds for the newcomer")
    rig.wait(lambda: "joined beyond the plan" in _diag(rig).get("factory.recent_plan_changes", ""), 120,
             "a plan with c applied (/diagnostics factory.recent_plan_changes)")


def test_an_instance_dying_with_no_standby_moves_its_robots_and_a_new_plan_is_applied(served):
    rig, cfg, replies, loops = served
    rig.wait(lambda: "engine_0 lost" in _diag(rig).get("factory.recent_plan_changes", ""), 240,
             "a plan applied after engine_0 died")
    with rig.lock:
        base = {rid: len(lp.ok()) for rid, lp in loops.items()}
    rig.wait(lambda: all(len(lp.ok()) >= base[rid] + 3 for rid, lp in loops.items()), 60,
             "3 more rounds per robot on the new plan")
    with rig.lock:
        for lp in loops.values():
            lp.assert_answered_exactly_once()
            assert lp.ok()[-1].engine_instance == "engine_1"
    rig.assert_alive("after the new plan")


def _diag(rig) -> dict[str, str]:
    return rig.status("policy_server: factory plan")
