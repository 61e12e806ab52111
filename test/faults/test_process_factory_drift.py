"""A factory plan re-made when System 1's measured service times drift, in a real policy_server
process with robots over real DDS: both System 1 instances are slowed by fault injection
(PHYSAI_FAULT_INJECTION slow@k: every batch from the k-th on waits 0.25 s, as a throttled GPU
would), the server's online profile sees it, a new plan is solved on the measured times and
applied with that reason on /diagnostics, and every robot's rounds are answered exactly once and
run where the plan puts them throughout.

fleet.yaml: tiny model, two engine instances, System 1 measured at start-up, the default drift
threshold (0.5); the robots are closed loops in the test process (process_rig.ClosedLoop).
"""
from __future__ import annotations

import re

import pytest

from physai_lab.fault_injection import SLOW_S, fault_env
from physai_ros.client.robot_client import RobotClientCore
from physai_ros.config.fleet import load_fleet
from physai_ros.ros.codecs.registration import registration_to_request

from fault_fleet import write_factory_fleet
from process_rig import STARTUP_S, ClosedLoop, ProcessRig, server_spec

pytestmark = [pytest.mark.ros, pytest.mark.slow]

SLOW_FROM = 10  # each instance's batch from which it is slowed


def _diag(rig) -> dict[str, str]:
    return rig.status("policy_server: factory plan")


def _slowed_plan_change(diag: dict[str, str]) -> str | None:
    """The applied change whose reason is a System 1 service time measured at the slowed speed."""
    for ms in re.findall(r"System 1 batch \d+ measured at ([\d.]+) ms", diag.get("factory.recent_plan_changes", "")):
        if float(ms) >= SLOW_S * 1e3:
            return ms
    return None


def test_a_slowed_system1_is_measured_and_a_new_plan_applied_with_no_round_lost(tmp_path):
    fleet_file = write_factory_fleet(tmp_path, ("a", "b"))  # profile_drift: the default 0.5
    cfg = load_fleet(fleet_file)
    rig = ProcessRig(tmp_path / "logs")
    loops: dict[str, ClosedLoop] = {}
    try:
        rig.start(server_spec("policy_server", fleet_file,
                              fault_env(f"engine_0:slow@{SLOW_FROM},engine_1:slow@{SLOW_FROM}")))
        replies = {rid: rig.register(registration_to_request(RobotClientCore(cfg.robot(rid)).registration()))
                   for rid in ("a", "b")}
        assert all(r.accepted for r in replies.values()), (replies, rig.logs())
        on = {rid: dict(zip(r.route_components, r.route_instances))["system1"] for rid, r in replies.items()}
        assert sorted(on.values()) == ["engine_0", "engine_1"], on
        loops.update({rid: ClosedLoop(rig, rid).start() for rid in ("a", "b")})
        rig.wait(lambda: _slowed_plan_change(_diag(rig)) is not None, STARTUP_S + 120,
                 "a plan applied for System 1 measured at the slowed speed (/diagnostics factory.recent_plan_changes)")
        diag = _diag(rig)
        online = re.search(r"\b1: ([\d.]+)", diag.get("factory.online_service_ms", ""))
        assert online and float(online.group(1)) >= SLOW_S * 1e3, diag  # the plan's times now: the slowed ones
        text = diag["factory.recent_plan_changes"]
        at = text.index(f"measured at {_slowed_plan_change(diag)} ms")
        # Its reason, throughput and roles: up to the next change in the rendered list, if any.
        ends = [i for i in (text.find("', ", at), text.find('", ', at)) if i >= 0]
        change = text[at:min(ends, default=len(text))]
        system1 = set(re.findall(r"\b(engine_\d+) system1\b", change))
        assert system1, change
        with rig.lock:
            base = {rid: len(lp.ok()) for rid, lp in loops.items()}
        rig.wait(lambda: all(len(lp.ok()) >= base[rid] + 3 for rid, lp in loops.items()), 60,
                 "3 more rounds per robot on the new plan")
        for lp in loops.values():
            lp.stop()
        with rig.lock:
            for rid, lp in loops.items():
                lp.assert_answered_exactly_once()
                # The first rounds ran where the start-up plan put the robot (no drift is checked
                # before 8 batches in all); the rounds after the change, on the instance it names.
                first = [c.engine_instance for c in lp.ok()[:3]]
                assert set(first) == {on[rid]}, (rid, on, first)
                after = {c.engine_instance for c in lp.ok()[base[rid] + 1:]}
                assert after <= system1 and len(after) == 1, (rid, after, change)
        rig.assert_alive("after the new plan")
    finally:
        for lp in loops.values():
            lp.stop()
        rig.close()
