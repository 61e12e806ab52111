"""The sim robot's side of a joint trajectory: sample the newest plan at the current time.

Like ros2_control's joint_trajectory_controller, a new trajectory replaces the old one, a plan
must name every joint (in any order), positions are interpolated linearly between points, the
first point is the target before it is due, and the last point is held once the plan has ended.
"""
from __future__ import annotations

import numpy as np

from physai_ros.control.joint_trajectory import JointTrajectoryPlan


class TrajectoryFollower:
    def __init__(self, joint_names: tuple[str, ...]):
        self.joint_names = tuple(joint_names)
        self._index = {n: i for i, n in enumerate(self.joint_names)}
        self._times: np.ndarray | None = None
        self._pos: np.ndarray | None = None
        self.accepted = 0
        self.rejected = 0
        self.last_error = ""

    def set_plan(self, plan: JointTrajectoryPlan) -> bool:
        """Adopt `plan`; False (counted, reason in last_error) if it does not fit this robot."""
        missing = set(self.joint_names) - set(plan.joint_names)
        unknown = set(plan.joint_names) - set(self.joint_names)
        if missing or unknown:
            self.rejected += 1
            self.last_error = f"joint names do not match: missing {sorted(missing)}, unknown {sorted(unknown)}"
            return False
        order = [plan.joint_names.index(n) for n in self.joint_names]
        self._pos = np.array([[p.positions[j] for j in order] for p in plan.points], dtype=float)
        self._times = plan.stamp + np.array([p.time_from_start for p in plan.points])
        self.accepted += 1
        return True

    @property
    def has_plan(self) -> bool:
        return self._times is not None

    def sample(self, now: float) -> np.ndarray | None:
        if self._times is None:
            return None
        t, p = self._times, self._pos
        if now <= t[0]:
            return p[0].copy()
        if now >= t[-1]:
            return p[-1].copy()
        i = int(np.searchsorted(t, now, side="right"))
        a = (now - t[i - 1]) / (t[i] - t[i - 1])
        return (1 - a) * p[i - 1] + a * p[i]
