"""The robot client's hold chunks against a real trajectory_controller process, over DDS.

This process plays the robot client and the policy server on action_chunk: a chunk, then an
SLO miss answered with a hold chunk (built by the client's own control.hold.hold_chunk), then the late or
resent answer. A keep-waiting hold (round r-1) must let the late answer to r execute although
its capture time is older than the hold; a give-up hold (r+1) must refuse the answer to r and
take the resend's answer r+2, whose image was also captured before the hold. Checked through
execution_info counters and the controller's /diagnostics.
"""
import os

import numpy as np
import pytest
from diagnostic_msgs.msg import DiagnosticArray
from physai_ros_interfaces.msg import ActionChunk, ExecutionInfo

from physai_ros.client.types import HoldCommand
from physai_ros.control.hold import hold_chunk
from physai_ros.fleet.processes import ProcessSpec
from physai_ros.protocol.chunk import ActionChunkData
from physai_ros.ros.codecs.chunk import chunk_to_msg
from physai_ros.ros.qos import reliable_qos
from physai_ros.ros.time_conv import now_sec
from physai_ros.sim.robot import ArmConfig
from auth_rig import RobotKeys, ServerKeys
from ros_test_helpers import fail_with_logs

pytestmark = pytest.mark.ros

RID = "holdbot"


def test_hold_chunks_keep_or_give_up_the_awaited_answer(ros, procs):
    ns = f"/hold{os.getpid()}"
    names = ArmConfig(num_joints=3).joint_names
    procs.start(ProcessSpec("controller", "physai_ros.nodes.trajectory_controller", ns,
                            {"num_joints": 3, "robot_id": RID, "control_rate_hz": 240.0}))
    state, diags = {}, {}
    n = ros.node
    n.create_subscription(ExecutionInfo, f"{ns}/execution_info", lambda m: state.__setitem__("info", m),
                          reliable_qos())

    def on_diag(msg):
        for st in msg.status:
            if st.hardware_id == RID:
                diags[st.name] = (st.level, st.message, {kv.key: kv.value for kv in st.values})

    n.create_subscription(DiagnosticArray, "/diagnostics", on_diag, reliable_qos(50))
    pub = n.create_publisher(ActionChunk, f"{ns}/action_chunk", reliable_qos())
    if not ros.spin_until(lambda: "info" in state and pub.get_subscription_count() > 0, timeout=40.0):
        fail_with_logs(procs, "controller never came up (no execution_info / no action_chunk subscriber)")

    server, robot = ServerKeys(), RobotKeys(RID)  # sign as the server and the robot's client do

    def answer(rnd, capture, value):
        # 5 s of plan, so no action has expired by the time it arrives even on a loaded machine
        actions = np.full((50, len(names)), value)
        return server.chunk(chunk_to_msg(ActionChunkData(RID, "task", rnd, capture, dt=0.1, joint_names=names,
                                                         actions=actions, horizon=50)))

    def hold(rnd, now):
        # Stamped `now`, newer than the answers that follow: the controller must not let a hold's
        # stamp decide anything (inserting it as a chunk would refuse them as time_backwards).
        cmd = HoldCommand(rnd, np.zeros(len(names)), "SLO miss (test)", capture_time=now, dt=0.02, num_actions=3)
        return robot.hold(chunk_to_msg(hold_chunk(RID, "task", cmd, names)))  # the robot client's key

    def info():
        return state["info"]

    pub.publish(answer(2, now_sec(n) - 1.0, 0.1))  # older than every later capture time
    if not ros.spin_until(lambda: info().executing_round_id == 2, timeout=15.0):
        fail_with_logs(procs, f"first chunk not executed: {info()}")

    # keep waiting (fallback hold): observation 4 captured 0.3 s ago, hold 3 stamped now, late answer 4
    t = now_sec(n)
    pub.publish(hold(3, t))
    pub.publish(answer(4, t - 0.3, 0.2))
    ok = ros.spin_until(lambda: info().executing_round_id == 4 or info().chunks_rejected > 0, timeout=15.0)
    assert ok and info().executing_round_id == 4, (info().executing_round_id, info().last_reject_reason)
    assert (info().chunks_accepted, info().chunks_rejected) == (2, 0)

    # give up (stop_and_resend): observation 6 captured 0.4 s ago, hold 7 stamped now; the late
    # answer 6 is refused, the resend 8 (image from 0.1 s before the hold) executed
    t = now_sec(n)
    pub.publish(hold(7, t))
    pub.publish(answer(6, t - 0.4, 0.3))
    pub.publish(answer(8, t - 0.1, 0.4))
    ok = ros.spin_until(lambda: info().executing_round_id == 8 or info().chunks_rejected > 1, timeout=15.0)
    assert ok and info().executing_round_id == 8, (info().executing_round_id, info().last_reject_reason)
    assert (info().chunks_accepted, info().chunks_rejected) == (3, 1)
    assert info().last_reject_reason == "stale_round"

    # the controller's diagnostics (monitoring Updater) tell the same story
    node = f"{ns.strip('/')}/trajectory_controller"
    if not ros.spin_until(lambda: diags.get(f"{node}: buffer", (0, "", {}))[2].get("holds_applied") == "2",
                          timeout=10.0):
        fail_with_logs(procs, f"no buffer diagnostics with 2 holds: {diags}")
    assert diags[f"{node}: rejections"][2]["rejected.stale_round"] == "1"
    assert diags[f"{node}: buffer"][2]["holds_ignored"] == "0"
    assert f"{node}: joint_trajectory rate" in diags
    assert not procs.exited()
