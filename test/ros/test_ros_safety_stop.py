"""Safety as a stop, end to end over real DDS between real processes: a sim robot with intruders,
its robot client with a safety component, its trajectory controller, and the policy server
serving System 1 (the trained sim checkpoint). The safety answers come from this process,
standing in for the server's safety model with the sim's own ground truth (a perfect safety
component: "unsafe" while the sim's task_status says a person is in the cell), signed with the
server's key over the real component topics; the robot side cannot tell it from the server.

Measured from the sim robot's own joint states:
- intruder -> arm stopped: how long and how far the arm moves after each entry; the aim is one
  ask period of the safety component plus its SLO plus one control period (and the sim's
  settling), the test allows twice that (a busy machine) and prints what it measured;
- silence -> arm stopped: the stand-in stops answering (no intruder); the arm must stop (within
  the same allowance after the last answer) and stay stopped while the silence lasts.
"""
import os
import time

import pytest
import yaml

from physai_lab.evaluation.safety_watch import SETTLE_S, STILL, SafetyWatch
from physai_ros.config.fleet import default_fleet_path, load_fleet
from physai_ros.fleet import plan as fleet_plan
from auth_rig import server_auth
from ros_test_helpers import fail_with_logs

pytestmark = [pytest.mark.ros, pytest.mark.slow]

SAFETY_HZ = 5.0
SAFETY_SLO_S = 0.3
STARTUP_S = 120.0
MOVING = 0.02  # rad of joint path in a 0.5 s window: the arm is moving


def _fleet_files(tmp_path, rid):
    """(robot side with the safety component, server side without it: its answers are ours)."""
    doc = yaml.safe_load(default_fleet_path().read_text())
    doc["robots"] = [dict(doc["robots"][0], id=rid, task="pick_place",
                          sim=dict(doc["robots"][0].get("sim", {}), intruder_rate_per_min=10.0,
                                   intruder_duration_s=2.0))]
    task = doc["tasks"]["pick_place"]
    task.pop("language", None)
    server_doc = yaml.safe_load(yaml.safe_dump(doc))
    task.update({"max_consecutive_slo_violation": 1000, "slo_startup_grace_s": 60,
                 "safety_and_slo_violation": {"max_consecutive_safety_replan": 1000,
                                              "max_consecutive_slo_violation": 1000},
                 "components": {"safety": {"model": "vla", "prompt": "is the workcell safe?", "freq_hz": SAFETY_HZ,
                                           "slo_ms": SAFETY_SLO_S * 1e3, "fallback": "hold"}}})
    paths = []
    for name, d in (("robot.yaml", doc), ("server.yaml", server_doc)):
        (tmp_path / name).write_text(yaml.safe_dump(d))
        paths.append(tmp_path / name)
    return paths


def test_an_intruder_and_a_silent_safety_component_each_stop_the_arm(ros, procs, tmp_path):
    rid = f"safe{os.getpid()}"
    robot_file, server_file = _fleet_files(tmp_path, rid)
    fleet, server_fleet = load_fleet(robot_file), load_fleet(server_file)
    control_period = 1.0 / fleet.robots[0].control_rate_hz
    safety = SafetyWatch(ros.node, rid, server_auth(fleet))
    procs.start(fleet_plan.server_spec(server_fleet))
    for spec in fleet_plan.robot_specs(fleet, fleet.robots[0], controller=True):
        procs.start(spec)
    budget = 1.0 / SAFETY_HZ + SAFETY_SLO_S + control_period + SETTLE_S  # the aim
    allowed = 2 * budget

    # System 1 moves the arm (real chunks from the server, executed by the controller).
    def moving():
        now = time.monotonic()
        return safety.path(now - 0.5, now) > MOVING
    if not ros.spin_until(moving, STARTUP_S):
        fail_with_logs(procs, f"the arm never moved (answers: {len(safety.answers)}, joints: {len(safety.joints)})")

    # Intruders: after each entry the arm stops within the budget and stays stopped.
    stops = []
    deadline = time.monotonic() + 150
    while len(stops) < 2 and time.monotonic() < deadline:
        n = len(safety.entries)
        ros.spin_until(lambda: len(safety.entries) > n, max(0.0, deadline - time.monotonic()))
        if len(safety.entries) == n:
            break
        entry = safety.entries[-1]
        ros.spin_until(lambda: len(safety.exits) > len(safety.entries) - 1 or time.monotonic() > entry + 2.5, 10)
        leave = safety.exits[-1] if len(safety.exits) >= len(safety.entries) else time.monotonic()
        if leave - entry < allowed + 0.2 or safety.path(entry - 0.5, entry) <= MOVING:
            continue  # a visit too short to tell a stop from the budget, or the arm at rest anyway
        stop = safety.stopped_at(entry, leave)
        stops.append((entry, leave, stop, safety.path(entry, leave)))
    if not stops:
        fail_with_logs(procs, f"no intrusion into a moving arm long enough seen within 150 s (entries {safety.entries})")
    for entry, leave, stop, moved in stops:
        print(f"intruder: arm stopped {stop - entry:.3f} s after entry, moved {moved:.4f} rad in the visit "
              f"of {leave - entry:.2f} s (aim {budget:.3f} s)")
        assert stop is not None and stop - entry <= allowed, (stop and stop - entry, allowed, stops)

    # Silence: no intruder, the arm moving again; the stand-in stops answering.
    ros.spin_until(lambda: not safety.intruder and moving(), 30)
    assert not safety.intruder and moving(), "the arm did not move again after the intrusions"
    with safety.lock:
        safety.answering = False
        last = safety.answers[-1][0]
    ros.spin_until(lambda: time.monotonic() > last + allowed + 2.0, 10)
    silent_from = last + allowed
    stop = safety.stopped_at(last, time.monotonic())
    moved_after = safety.path(silent_from, time.monotonic())
    print(f"silence: arm stopped {stop - last:.3f} s after the last answer, moved {moved_after:.4f} rad "
          f"in the {time.monotonic() - silent_from:.1f} s after the allowance (aim {budget:.3f} s)")
    assert moved_after <= STILL, f"the arm moved {moved_after:.4f} rad while the safety component was silent"
