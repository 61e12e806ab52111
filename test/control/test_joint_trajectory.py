"""Buffer nodes -> ros2_control-style point lists."""
import numpy as np
import pytest

from physai_ros.control.joint_trajectory import hold_plan, to_joint_trajectory
from physai_ros.control.trajectory_buffer import TrajectoryBuffer
from physai_ros.control.types import TrajectoryNodes
from physai_ros.protocol.chunk import ActionChunkData

JOINTS = ("a", "b")


def nodes(times, dim=2):
    t = np.asarray(times, dtype=float)
    return TrajectoryNodes(t, np.stack([t * (j + 1) for j in range(dim)], axis=1),
                           np.ones(len(t), dtype=np.int64))


def test_points_name_all_joints_with_strictly_increasing_times_after_now():
    plan = to_joint_trajectory(nodes([0.9, 1.0, 1.01, 1.02, 1.03]), now=1.0, joint_names=JOINTS)
    assert plan.stamp == 1.0 and plan.joint_names == JOINTS
    tfs = [p.time_from_start for p in plan.points]
    assert tfs == pytest.approx([0.01, 0.02, 0.03])
    assert all(len(p.positions) == 2 for p in plan.points)
    assert plan.points[0].positions == pytest.approx((1.01, 2.02))


def test_stride_and_max_points_keep_the_last_node():
    t = 1.0 + np.arange(1, 49) / 480.0
    plan = to_joint_trajectory(nodes(t), now=1.0, joint_names=JOINTS, stride=8)
    tfs = [p.time_from_start for p in plan.points]
    assert len(tfs) == 7 and tfs[-1] == pytest.approx(48 / 480.0)
    assert np.all(np.diff(tfs) > 0)
    capped = to_joint_trajectory(nodes(t), now=1.0, joint_names=JOINTS, max_points=5)
    assert len(capped.points) == 5


def test_duplicate_times_are_dropped_and_empty_input_gives_no_points():
    plan = to_joint_trajectory(nodes([1.1, 1.1, 1.2]), now=1.0, joint_names=JOINTS)
    assert [p.time_from_start for p in plan.points] == pytest.approx([0.1, 0.2])
    assert to_joint_trajectory(nodes([]), now=1.0, joint_names=JOINTS).points == ()


def test_from_a_real_buffer_at_480hz():
    b = TrajectoryBuffer(JOINTS, rate_hz=480.0)
    b.insert(ActionChunkData("r", "t", 1, 2.0, dt=0.02, joint_names=JOINTS, actions=np.ones((10, 2)), horizon=10),
             now=2.0)
    plan = to_joint_trajectory(b.tentative_nodes(), now=2.0, joint_names=b.joint_names,
                               stride=4)
    tfs = np.array([p.time_from_start for p in plan.points])
    assert tfs[0] > 0 and np.all(np.diff(tfs) > 0)
    assert tfs[-1] == pytest.approx(0.2 - 1 / 480.0)


def test_mismatched_shapes_and_settings_raise():
    with pytest.raises(ValueError, match="joints"):
        to_joint_trajectory(nodes([1.0], dim=3), now=0.0, joint_names=JOINTS)
    with pytest.raises(ValueError, match="stride"):
        to_joint_trajectory(nodes([1.0]), now=0.0, joint_names=JOINTS, stride=0)


def test_hold_plan():
    plan = hold_plan([0.1, 0.2], now=5.0, joint_names=JOINTS)
    assert len(plan.points) == 1 and plan.points[0].positions == (0.1, 0.2)
    assert plan.points[0].time_from_start > 0
    with pytest.raises(ValueError):
        hold_plan([0.1], now=5.0, joint_names=JOINTS)
