"""Message conversions (no DDS needed: they are pure functions over generated message types)."""
import dataclasses
import math

import numpy as np
import pytest
from builtin_interfaces.msg import Time
from physai_ros_interfaces.msg import ActionChunk
from sensor_msgs.msg import Image
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from physai_ros.client.types import HoldCommand
from physai_ros.control.hold import hold_chunk
from physai_ros.control.joint_trajectory import JointTrajectoryPlan, TrajectoryPoint
from physai_ros.control.types import ExecutionState
from physai_ros.protocol import chunk as chunk_codes
from physai_ros.protocol.chunk import is_hold_chunk
from physai_ros.protocol.chunk import ActionChunkData
from physai_ros.protocol.segment import TrajectorySegmentData
from physai_ros.ros.codecs.chunk import ChunkMessageError, chunk_from_msg, chunk_to_msg, executable_chunk_from_msg
from physai_ros.ros.codecs.execution_info import execution_info_to_msg, execution_state_from_msg
from physai_ros.ros.codecs.joint_trajectory import TrajectoryMessageError, msg_to_plan, plan_to_msg
from physai_ros.ros.codecs.segment import SegmentMessageError, segment_from_msg, segment_to_msg
from physai_ros.ros.image import ImageBridge, ImageConversionError, make_bridge
from physai_ros.ros.time_conv import duration_from_sec, time_from_sec, to_ns, to_sec


def test_image_round_trip_reuses_one_buffer_and_reads_without_copy():
    bridge = ImageBridge()
    a = np.random.default_rng(0).integers(0, 255, (48, 64, 3), dtype=np.uint8)
    msg = bridge.cv2_to_imgmsg(a, "rgb8")
    assert (msg.height, msg.width, msg.step, msg.encoding) == (48, 64, 192, "rgb8")
    view = bridge.imgmsg_to_cv2(msg)
    np.testing.assert_array_equal(view, a)
    assert np.shares_memory(view, np.frombuffer(msg.data, np.uint8))  # read is zero-copy
    buf = msg.data
    msg2 = bridge.cv2_to_imgmsg(a[::-1].copy(), "rgb8")
    assert msg2.data is buf  # write reuses the buffer
    np.testing.assert_array_equal(bridge.imgmsg_to_cv2(msg2, "bgr8"), a[::-1][..., ::-1])


@pytest.mark.parametrize("arr,enc", [(np.zeros((5, 7), np.uint8), "mono8"), (np.ones((5, 7), np.uint16) * 513, "mono16"),
                                     (np.full((3, 4), 1.5, np.float32), "32FC1"), (np.zeros((2, 3, 4), np.uint8), "rgba8")])
def test_image_other_encodings(arr, enc):
    b = ImageBridge()
    np.testing.assert_array_equal(b.imgmsg_to_cv2(b.cv2_to_imgmsg(arr, enc)), arr)


def test_image_errors_are_clear():
    b = ImageBridge()
    with pytest.raises(ImageConversionError, match="channel"):
        b.cv2_to_imgmsg(np.zeros((4, 4), np.uint8), "rgb8")
    with pytest.raises(ImageConversionError, match="encoding"):
        b.cv2_to_imgmsg(np.zeros((4, 4, 3), np.uint8), "yuv422")
    short = Image(height=10, width=10, encoding="rgb8", step=30, data=bytes(100))
    with pytest.raises(ImageConversionError, match="do not fit"):
        b.imgmsg_to_cv2(short)
    assert hasattr(make_bridge(), "imgmsg_to_cv2")


def test_time_conversions():
    t = time_from_sec(1234.000000001)
    assert (t.sec, t.nanosec) == (1234, 1)
    assert to_ns(Time(sec=2, nanosec=5)) == 2_000_000_005
    assert to_sec(duration_from_sec(-0.25)) == pytest.approx(-0.25)
    with pytest.raises(ValueError):
        time_from_sec(-1.0)
    with pytest.raises(ValueError):
        time_from_sec(math.nan)


def test_chunk_round_trip():
    data = ActionChunkData(robot_id="r", task_id="t", round_id=7, stamp=100.25, dt=0.02,
                           joint_names=("a", "b", "c"), actions=np.arange(12, dtype=float).reshape(4, 3),
                           horizon=3, confidence=np.array([1.0, 0.5, 0.5, 0.25]), queue_ms=1.5,
                           inference_ms=20.25, prepare_ms=0.75, engine_instance="engine_1")
    for decode in (chunk_from_msg, executable_chunk_from_msg):
        back = decode(chunk_to_msg(data))
        assert (back.robot_id, back.task_id, back.round_id, back.dt, back.joint_names, back.horizon) == (
            "r", "t", 7, 0.02, ("a", "b", "c"), 3)
        assert (back.status, back.error, back.queue_ms, back.inference_ms, back.prepare_ms, back.engine_instance) == (
            0, "", 1.5, 20.25, 0.75, "engine_1")
        assert back.stamp == pytest.approx(100.25, abs=1e-9)
        np.testing.assert_array_equal(back.actions, data.actions)
        np.testing.assert_array_equal(back.confidence, data.confidence)


def test_status_codes_match_the_message_constants():
    assert (chunk_codes.STATUS_OK, chunk_codes.STATUS_ERROR, chunk_codes.STATUS_REFUSED) == (
        ActionChunk.STATUS_OK, ActionChunk.STATUS_ERROR, ActionChunk.STATUS_REFUSED)


def test_a_refusal_travels_without_actions_and_reads_back_as_one():
    refusal = ActionChunkData("r", "t", 4, 2.0, status=chunk_codes.STATUS_REFUSED, error="stale: too old")
    msg = chunk_to_msg(refusal)
    assert (msg.num_actions, msg.action_dim, len(msg.actions), len(msg.confidence)) == (0, 0, 0, 0)
    back = chunk_from_msg(msg)
    assert back.status == chunk_codes.STATUS_REFUSED and back.error == "stale: too old" and back.actions.size == 0
    with pytest.raises(ChunkMessageError, match="status"):
        executable_chunk_from_msg(msg)


def test_the_clients_hold_chunk_keeps_both_markers_on_the_wire():
    hold = chunk_from_msg(chunk_to_msg(hold_chunk("r", "t", HoldCommand(3, np.array([0.1, 0.2]), "miss", 5.0, 0.02, 4),
                                                  ("j0", "j1"))))
    assert is_hold_chunk(hold.status, hold.error, hold.engine_instance)
    assert (hold.round_id, hold.horizon, hold.actions.shape) == (3, 4, (4, 2))


@pytest.mark.parametrize("mutate,match", [
    (lambda m: setattr(m, "num_actions", 5), "not num_actions"),
    (lambda m: setattr(m, "confidence", [1.0]), "confidence"),
    (lambda m: setattr(m, "status", ActionChunk.STATUS_ERROR), "status"),
])
def test_chunk_messages_that_cannot_be_executed(mutate, match):
    msg = chunk_to_msg(ActionChunkData("r", "t", 1, 1.0, dt=0.1, joint_names=("a",), actions=np.zeros((4, 1)),
                                       horizon=4, confidence=np.ones(4)))
    mutate(msg)
    with pytest.raises(ChunkMessageError, match=match):
        executable_chunk_from_msg(msg)


def test_segment_round_trip_and_validation():
    seg = TrajectorySegmentData(robot_id="r", round_id=6, segment_id=11, joint_names=("a", "b"), start_time=20.5,
                                dt=1 / 480, positions=np.arange(6, dtype=np.float32).reshape(3, 2),
                                committed=np.array([True, False, False]), tick_time=20.49, wrench_stamp=20.48,
                                ticks_merged=2)
    msg = segment_to_msg(seg)
    assert to_sec(msg.header.stamp) == pytest.approx(20.48)  # the wrench sample's stamp when there is one
    back = segment_from_msg(msg)
    assert (back.robot_id, back.round_id, back.segment_id, back.joint_names) == ("r", 6, 11, ("a", "b"))
    assert back.start_time == pytest.approx(20.5) and back.dt == pytest.approx(1 / 480)
    assert back.stamp == pytest.approx(20.48)
    np.testing.assert_array_equal(back.positions, seg.positions)
    np.testing.assert_array_equal(back.committed, seg.committed)
    no_wrench = segment_to_msg(TrajectorySegmentData(**{**seg.__dict__, "wrench_stamp": math.nan}))
    assert to_sec(no_wrench.header.stamp) == pytest.approx(20.49)  # the tick time before any sample
    no_flags = segment_to_msg(seg)
    no_flags.committed = []
    assert not segment_from_msg(no_flags).committed.any()
    for field, value in (("num_nodes", 4), ("committed", [True]), ("num_nodes", 0)):
        bad = segment_to_msg(seg)
        setattr(bad, field, value)
        if field == "num_nodes" and value == 0:
            bad.positions, bad.committed = [], []
        with pytest.raises(SegmentMessageError):
            segment_from_msg(bad)


def test_execution_info_round_trip():
    st = ExecutionState(executing_round_id=8, exec_phase_start=12.25, actions_remaining=5, control_period=0.02,
                        buffer_nodes=40, buffer_dry=False, underruns=2, chunks_accepted=9, chunks_rejected=1,
                        last_reject_reason="stale_round")
    msg = execution_info_to_msg(st, "robot_3", stamp=13.0)
    assert msg.robot_id == "robot_3" and to_sec(msg.header.stamp) == pytest.approx(13.0)
    back = execution_state_from_msg(msg)
    assert back == ExecutionState(**{**st.__dict__, "exec_phase_start": back.exec_phase_start})
    assert back.exec_phase_start == pytest.approx(12.25)
    # before any chunk the phase start is unset (negative): it travels as time zero
    assert execution_state_from_msg(execution_info_to_msg(ExecutionState(**{**st.__dict__, "exec_phase_start": -1.0}),
                                                          "r", 1.0)).exec_phase_start == 0.0


def test_trajectory_round_trip_and_validation():
    plan = JointTrajectoryPlan(50.5, ("a", "b"), (TrajectoryPoint((0.0, 1.0), 0.01), TrajectoryPoint((0.5, 1.5), 0.02)))
    back = msg_to_plan(plan_to_msg(plan), now=0.0)
    assert back.joint_names == plan.joint_names and back.stamp == pytest.approx(50.5)
    assert [p.time_from_start for p in back.points] == pytest.approx([0.01, 0.02])
    zero_stamp = plan_to_msg(plan)
    zero_stamp.header.stamp = Time()
    assert msg_to_plan(zero_stamp, now=9.0).stamp == 9.0
    bad = JointTrajectory(joint_names=["a"], points=[JointTrajectoryPoint(positions=[0.0], time_from_start=duration_from_sec(0.2)),
                                                      JointTrajectoryPoint(positions=[1.0], time_from_start=duration_from_sec(0.1))])
    with pytest.raises(TrajectoryMessageError, match="strictly"):
        msg_to_plan(bad, 0.0)
    with pytest.raises(TrajectoryMessageError, match="NaN"):
        msg_to_plan(JointTrajectory(joint_names=["a"], points=[JointTrajectoryPoint(positions=[math.inf])]), 0.0)
    with pytest.raises(TrajectoryMessageError, match="positions"):
        msg_to_plan(JointTrajectory(joint_names=["a", "b"], points=[JointTrajectoryPoint(positions=[0.0])]), 0.0)


def test_registration_round_trip_carries_each_cameras_size():
    from physai_ros.protocol.registration import RobotRegistration
    from physai_ros.ros.codecs.registration import registration_from_request, registration_to_request

    reg = RobotRegistration(robot_id="arm", task_id="t", robot_namespace="/arm", prompt="p",
                            camera_topics=("wrist", "top"), num_views=2, image_height=96, image_width=128,
                            joint_names=("a", "b"), state_dim=2, action_dim=2, control_period=0.1,
                            view_sizes=((96, 128), (128, 96)))
    back = registration_from_request(registration_to_request(reg))
    assert back == reg and back.view_size(1) == (128, 96)
    same = dataclasses.replace(reg, view_sizes=())  # one size for all: nothing extra on the wire
    req = registration_to_request(same)
    assert list(req.view_heights) == [] and registration_from_request(req).view_size(1) == (96, 128)
