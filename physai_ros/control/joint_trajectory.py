"""Buffer nodes -> a ros2_control-style joint trajectory, as plain data.

joint_trajectory_controller expects every point to name all joints and ``time_from_start`` to
increase strictly; points at or before the header stamp are already in the past for it. The
node turns :class:`JointTrajectoryPlan` into ``trajectory_msgs/JointTrajectory``.

480 Hz nodes are more than a JTC needs (it interpolates itself), so ``stride`` keeps every
k-th node and ``max_points`` caps the length; the last node is always kept so the plan ends
where the buffer ends.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from physai_ros.control.types import TrajectoryNodes


@dataclass(frozen=True)
class TrajectoryPoint:
    positions: tuple[float, ...]
    time_from_start: float  # seconds after JointTrajectoryPlan.stamp


@dataclass(frozen=True)
class JointTrajectoryPlan:
    stamp: float  # header.stamp, seconds
    joint_names: tuple[str, ...]
    points: tuple[TrajectoryPoint, ...]


def to_joint_trajectory(nodes: TrajectoryNodes, now: float, joint_names, *, stride: int = 1,
                        max_points: int | None = None,
                        min_time_from_start: float = 1e-6) -> JointTrajectoryPlan:
    """Points for the nodes due after ``now`` (stamp = ``now``).

    Nodes closer to ``now`` than ``min_time_from_start`` are skipped: a JTC would treat them
    as already reached.
    """
    names = tuple(str(n) for n in joint_names)
    if stride < 1:
        raise ValueError(f"stride must be >= 1, got {stride}")
    if max_points is not None and max_points < 1:
        raise ValueError(f"max_points must be >= 1, got {max_points}")
    times = np.asarray(nodes.times, dtype=np.float64)
    pos = np.asarray(nodes.positions, dtype=np.float64)
    if pos.ndim != 2 or pos.shape[0] != times.shape[0] or pos.shape[1] != len(names):
        raise ValueError(f"nodes have positions {pos.shape} for {times.shape[0]} times and "
                         f"{len(names)} joints")
    tfs = times - float(now)
    idx = np.flatnonzero(tfs >= min_time_from_start)
    if idx.size:
        last = idx[-1]
        idx = idx[::stride]
        if max_points is not None and idx.size > max_points:
            idx = idx[:max_points]
        elif idx[-1] != last:
            idx = np.append(idx, last)
    points = []
    prev = -np.inf
    for i in idx:
        t = float(tfs[i])
        if not t > prev:  # duplicate node times would break the JTC's ordering rule
            continue
        points.append(TrajectoryPoint(tuple(float(v) for v in pos[i]), t))
        prev = t
    return JointTrajectoryPlan(float(now), names, tuple(points))


def hold_plan(position, now: float, joint_names, settle_s: float = 0.01) -> JointTrajectoryPlan:
    """A one-point plan that holds ``position`` (what a dry or stopped buffer sends)."""
    names = tuple(str(n) for n in joint_names)
    pos = np.asarray(position, dtype=np.float64).reshape(-1)
    if pos.shape != (len(names),):
        raise ValueError(f"hold position has {pos.shape[0]} values for {len(names)} joints")
    if not settle_s > 0:
        raise ValueError(f"settle_s must be > 0, got {settle_s}")
    return JointTrajectoryPlan(float(now), names,
                               (TrajectoryPoint(tuple(float(v) for v in pos), float(settle_s)),))
