"""trajectory_msgs/JointTrajectory <-> control.joint_trajectory.JointTrajectoryPlan."""
from __future__ import annotations

import math

from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from physai_ros.control.joint_trajectory import JointTrajectoryPlan, TrajectoryPoint
from physai_ros.ros.time_conv import duration_from_sec, time_from_sec, to_sec


class TrajectoryMessageError(ValueError):
    pass


def plan_to_msg(plan: JointTrajectoryPlan, frame_id: str = "") -> JointTrajectory:
    msg = JointTrajectory()
    msg.header.stamp = time_from_sec(plan.stamp)
    msg.header.frame_id = frame_id
    msg.joint_names = list(plan.joint_names)
    pts = []
    for p in plan.points:
        pt = JointTrajectoryPoint()
        pt.positions = list(p.positions)
        pt.time_from_start = duration_from_sec(p.time_from_start)
        pts.append(pt)
    msg.points = pts
    return msg


def msg_to_plan(msg: JointTrajectory, now: float) -> JointTrajectoryPlan:
    """Validated plan; a zero header stamp means "start now" (ros2_control convention)."""
    names = tuple(msg.joint_names)
    if not names:
        raise TrajectoryMessageError("trajectory names no joints")
    if len(set(names)) != len(names):
        raise TrajectoryMessageError(f"duplicate joint names {names}")
    if not msg.points:
        raise TrajectoryMessageError("trajectory has no points")
    stamp = to_sec(msg.header.stamp) or now
    points = []
    prev = -math.inf
    for i, p in enumerate(msg.points):
        if len(p.positions) != len(names):
            raise TrajectoryMessageError(f"point {i} has {len(p.positions)} positions for {len(names)} joints")
        pos = tuple(float(v) for v in p.positions)
        if not all(math.isfinite(v) for v in pos):
            raise TrajectoryMessageError(f"point {i} has a NaN or inf position")
        t = to_sec(p.time_from_start)
        if not t > prev:
            raise TrajectoryMessageError(f"time_from_start must increase strictly (point {i})")
        prev = t
        points.append(TrajectoryPoint(pos, t))
    return JointTrajectoryPlan(stamp, names, tuple(points))
