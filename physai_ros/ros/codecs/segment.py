"""physai_ros_interfaces/TrajectorySegment <-> protocol.segment.TrajectorySegmentData."""
from __future__ import annotations

import numpy as np
from physai_ros_interfaces.msg import TrajectorySegment

from physai_ros.protocol.segment import TrajectorySegmentData
from physai_ros.ros.codecs._arrays import f32_field, f32_values
from physai_ros.ros.time_conv import time_from_sec, to_sec


class SegmentMessageError(ValueError):
    """The message's sizes do not describe a segment (the buffer validates the content)."""


def segment_to_msg(seg: TrajectorySegmentData) -> TrajectorySegment:
    msg = TrajectorySegment()
    msg.header.stamp = time_from_sec(seg.stamp)
    msg.robot_id = seg.robot_id
    msg.round_id = int(seg.round_id)
    msg.segment_id = int(seg.segment_id)
    msg.joint_names = list(seg.joint_names)
    msg.start_time = time_from_sec(seg.start_time)
    msg.dt = float(seg.dt)
    n, d = seg.positions.shape
    msg.num_nodes, msg.dim = int(n), int(d)
    msg.positions = f32_field(seg.positions)
    msg.committed = [bool(c) for c in seg.committed]
    return msg


def segment_from_msg(msg: TrajectorySegment) -> TrajectorySegmentData:
    """The segment (no committed flags: none committed), or SegmentMessageError when positions
    and flags do not fill num_nodes x dim."""
    n, d = int(msg.num_nodes), int(msg.dim)
    if n * d != len(msg.positions) or len(msg.committed) not in (0, n) or n == 0:
        raise SegmentMessageError(f"{len(msg.positions)} positions, {len(msg.committed)} flags for {n}x{d}")
    committed = np.asarray(msg.committed, dtype=bool) if len(msg.committed) else np.zeros(n, dtype=bool)
    return TrajectorySegmentData(
        robot_id=msg.robot_id, round_id=int(msg.round_id), segment_id=int(msg.segment_id),
        joint_names=tuple(msg.joint_names), start_time=to_sec(msg.start_time), dt=float(msg.dt),
        positions=f32_values(msg.positions).reshape(n, d), committed=committed,
        tick_time=to_sec(msg.header.stamp))
