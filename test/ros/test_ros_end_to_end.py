"""Trajectory controller + sim robot as separate processes: a commanded target is reached through
real topics (action_chunk -> controller -> joint_trajectory -> sim -> joint_states), and bad
chunks are rejected, counted and reported without disturbing anything."""
import math
import os

import numpy as np
import pytest
from physai_ros_interfaces.msg import ActionChunk, ExecutionInfo, TrajectorySegment
from sensor_msgs.msg import JointState
from trajectory_msgs.msg import JointTrajectory

from physai_ros.fleet.processes import ProcessSpec
from physai_ros.protocol.chunk import ActionChunkData
from physai_ros.ros.codecs.chunk import chunk_to_msg
from physai_ros.ros.qos import reliable_qos
from physai_ros.ros.time_conv import now_sec, time_from_sec, to_sec
from physai_ros.sim.robot import ArmConfig
from auth_rig import ServerKeys
from ros_test_helpers import fail_with_logs

pytestmark = pytest.mark.ros


def chunk_msg(robot_id, round_id, stamp, names, actions, horizon):
    """An answer with actions 0.05 s apart, as the policy server would send it."""
    return chunk_to_msg(ActionChunkData(robot_id, "task", round_id, stamp, dt=0.05, joint_names=names,
                                        actions=actions, horizon=horizon))


def test_controller_drives_sim_joints_to_a_commanded_target(ros, procs):
    ns = f"/e2e{os.getpid()}"
    cfg = ArmConfig(num_joints=3)
    names = cfg.joint_names
    procs.start(ProcessSpec("sim_robot", "physai_ros.nodes.sim_robot", ns, {"num_joints": 3, "task": "reach"}))
    procs.start(ProcessSpec("controller", "physai_ros.nodes.trajectory_controller", ns,
                            {"num_joints": 3, "robot_id": "e2e", "control_rate_hz": 240.0}))
    state = {}
    trajs = []
    n = ros.node
    n.create_subscription(JointState, f"{ns}/joint_states", lambda m: state.__setitem__("js", m), reliable_qos())
    n.create_subscription(ExecutionInfo, f"{ns}/execution_info", lambda m: state.__setitem__("info", m),
                          reliable_qos())
    n.create_subscription(JointTrajectory, f"{ns}/joint_trajectory", trajs.append, reliable_qos())
    pub = n.create_publisher(ActionChunk, f"{ns}/action_chunk", reliable_qos())
    SERVER = ServerKeys()  # the test plays the policy server: its chunks carry the server's signature
    if not ros.spin_until(lambda: "js" in state and "info" in state and trajs, timeout=40.0):
        fail_with_logs(procs, f"no joint_states/execution_info/joint_trajectory: {sorted(state)} {len(trajs)}")

    target = cfg.home() + np.array([0.6, 0.3, -0.4])
    target = np.concatenate([target, [0.03]])
    rounds = iter(range(1, 1000))

    def send_chunk():
        # 1.5 s of actions ramping from the measured position to the target, answering an
        # observation now (re-sent until arrival; each one starts where the joints are).
        js = state["js"]
        start = np.array([js.position[list(js.name).index(k)] for k in names])
        t = now_sec(ros.node)
        ramp = np.clip(np.arange(30) / 10.0, 0.0, 1.0)[:, None]
        pub.publish(SERVER.chunk(chunk_msg("e2e", next(rounds), t, names, start + ramp * (target - start), 30)))

    def arrived():
        js = state["js"]
        pos = np.array([js.position[list(js.name).index(k)] for k in names])
        return np.max(np.abs(pos - target)) < 2e-3

    if not ros.spin_until(arrived, timeout=30.0, every=send_chunk, period=1.0):
        fail_with_logs(procs, f"joints did not reach {target}: {list(state['js'].position)}")
    info = state["info"]
    assert info.chunks_accepted >= 1 and info.robot_id == "e2e"
    accepted_before, rejected_before = info.chunks_accepted, info.chunks_rejected

    # ros2_control conventions on what the controller published.
    for msg in trajs[-50:]:
        assert tuple(msg.joint_names) == names and msg.points
        tfs = [to_sec(p.time_from_start) for p in msg.points]
        assert all(b > a for a, b in zip(tfs, tfs[1:])) and tfs[0] > 0
        assert all(len(p.positions) == len(names) for p in msg.points)

    # Bad chunks: NaN, unknown joint, stale round, wrong robot. All rejected and counted.
    t = now_sec(ros.node)
    nan_actions = np.full((5, 4), 0.1)
    nan_actions[2, 1] = math.nan
    bad = [chunk_msg("e2e", 500, t, names, nan_actions, 5),
           chunk_msg("e2e", 501, t, names[:-1] + ("elbow_x",), np.zeros((5, 4)), 5),
           chunk_msg("e2e", 1, t, names, np.zeros((5, 4)), 5),
           chunk_msg("someone_else", 502, t, names, np.zeros((5, 4)), 5)]
    for m in bad:
        pub.publish(SERVER.chunk(m))  # authentic, so what is tested is the validation
    ok = ros.spin_until(lambda: state["info"].chunks_rejected >= rejected_before + 4, timeout=15.0)
    info = state["info"]
    assert ok, (info.chunks_rejected, info.last_reject_reason)
    assert info.chunks_accepted == accepted_before and info.last_reject_reason
    # Still holding the target and still commanding: nothing crashed, nothing moved.
    n_before = len(trajs)
    ros.spin_for(1.0)
    assert len(trajs) > n_before and arrived()
    assert not procs.exited()

    # Streaming mode: a dense 120 Hz segment moving to a second target, starting now.
    target2 = target + np.array([-0.3, 0.2, 0.2, 0.0])
    seg_rounds = iter(range(600, 700))

    def send_segment():
        t0 = now_sec(ros.node) + 0.05
        js = state["js"]
        here = np.array([js.position[list(js.name).index(k)] for k in names])
        s = np.clip(np.arange(240) / 120.0, 0.0, 1.0)[:, None]
        nodes = here + s * (target2 - here)
        msg = TrajectorySegment(robot_id="e2e", round_id=next(seg_rounds), segment_id=1, joint_names=list(names),
                                dt=1 / 120, num_nodes=240, dim=4, positions=nodes.reshape(-1).tolist(),
                                committed=[False] * 240)
        msg.start_time = time_from_sec(t0)
        pub_seg.publish(SERVER.segment(msg))

    pub_seg = n.create_publisher(TrajectorySegment, f"{ns}/trajectory_segment", reliable_qos(depth=50))
    target = target2  # what arrived() checks from now on
    if not ros.spin_until(arrived, timeout=30.0, every=send_segment, period=1.5):
        fail_with_logs(procs, f"segments did not move the joints to {target2}: {list(state['js'].position)}")
