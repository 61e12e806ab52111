"""Message conversions (no DDS needed: they are pure functions over generated message types)."""
import math

import numpy as np
import pytest
from builtin_interfaces.msg import Time
from physai_ros_interfaces.msg import ActionChunk
from sensor_msgs.msg import Image
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from physai_ros.control.joint_trajectory import JointTrajectoryPlan, TrajectoryPoint
from physai_ros.control.types import ActionChunkData
from physai_ros.ros.chunks import ChunkMessageError, chunk_from_msg, chunk_to_msg
from physai_ros.ros.image import ImageBridge, ImageConversionError, make_bridge
from physai_ros.ros.time_conv import duration_from_sec, time_from_sec, to_ns, to_sec
from physai_ros.ros.trajectory import TrajectoryMessageError, msg_to_plan, plan_to_msg


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
    data = ActionChunkData(robot_id="r", task_id="t", round_id=7, capture_time=100.25, dt=0.02,
                           joint_names=("a", "b", "c"), actions=np.arange(12, dtype=float).reshape(4, 3),
                           horizon=3, confidence=np.array([1.0, 0.5, 0.5, 0.25]))
    back = chunk_from_msg(chunk_to_msg(data))
    assert (back.robot_id, back.task_id, back.round_id, back.dt, back.joint_names, back.horizon) == (
        "r", "t", 7, 0.02, ("a", "b", "c"), 3)
    assert back.capture_time == pytest.approx(100.25, abs=1e-9)
    np.testing.assert_array_equal(back.actions, data.actions)
    np.testing.assert_array_equal(back.confidence, data.confidence)


@pytest.mark.parametrize("mutate,match", [
    (lambda m: setattr(m, "num_actions", 5), "not num_actions"),
    (lambda m: setattr(m, "confidence", [1.0]), "confidence"),
    (lambda m: setattr(m, "status", ActionChunk.STATUS_ERROR), "status"),
])
def test_chunk_messages_that_cannot_be_read(mutate, match):
    msg = chunk_to_msg(ActionChunkData("r", "t", 1, 1.0, 0.1, ("a",), np.zeros((4, 1)), 4, np.ones(4)))
    mutate(msg)
    with pytest.raises(ChunkMessageError, match=match):
        chunk_from_msg(msg)


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
