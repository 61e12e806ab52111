"""A lost grasp, seen from the gripper's own position: the robot-side half of the progress monitor.

The monitor component judges one frame at a time, so it cannot tell a cube that slipped back onto
the table from one about to be picked (docs/training.md: drop recall 0.09). A drop is an event in
time, and the gripper sees it first: fingers closing on an object stop at the object's width and
stay there; when the object slips out, the still-closing fingers move on towards closed. That is
how parallel grippers detect a lost grasp without a camera, and it needs no model.

`GraspWatch.update(now, width, arm)` takes the gripper opening (the last joint position by
default, the sim's convention: metres) and the other joints' positions at whatever rate the
client steps, and returns "grasped", "lost", "closed" or "released" when one happens (else "").
A grasp is the opening held still (within `still`) at more than `min_object` and under the open
width for `settle_s`. When the opening then falls `lost_by` below the held width, the object is
lost if the arm carried it (some joint moved `carried` since the grasp), else the fingers were
only paused on their way and "closed" (a policy may park the gripper half-open over a cube, and
nothing was between the fingers: the one false alarm this removed on held-out shifts). Rising
`lost_by` above the held width is a release. A placement is a release; so is the policy letting go
off the pad, which this watch does not tell from a placement (it sees no pad): it sees slips.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

GRASP_LOST_ACTIONS = ("ignore", "replan", "reset")  # what the pipeline does on "lost" (first: default)


@dataclass(frozen=True)
class GraspWatchConfig:
    on_lost: str = "ignore"  # ignore (counted and reported) | replan (drop the plan) | reset (as a failed task)
    gripper_index: int = -1  # which joint position is the gripper's opening
    min_object: float = 0.01  # held still wider than this: something is between the fingers (m)
    open_width: float = 0.075  # at or over this the gripper is open, not holding (m)
    lost_by: float = 0.004  # closing this far below the held width: the object is gone (m)
    still: float = 0.001  # the most the opening moves while it counts as held still (m)
    settle_s: float = 0.2  # held still this long: a grasp
    carried: float = 0.05  # a joint moved this far since the grasp: the arm carried the object (joint units)

    def __post_init__(self) -> None:
        if self.on_lost not in GRASP_LOST_ACTIONS:
            raise ValueError(f"on_lost must be one of {GRASP_LOST_ACTIONS}, got {self.on_lost!r}")
        for name in ("min_object", "open_width", "lost_by", "still", "settle_s", "carried"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v > 0):
                raise ValueError(f"{name} must be a finite number > 0, got {v}")
        if self.min_object >= self.open_width:
            raise ValueError(f"min_object ({self.min_object}) must be under open_width ({self.open_width})")


class GraspWatch:
    def __init__(self, cfg: GraspWatchConfig = GraspWatchConfig()):
        self.cfg = cfg
        self.held_width: float | None = None  # the width of the grasp in progress
        self._still_since: float | None = None
        self._still_width = math.nan
        self._armed = True  # False after reset() until the gripper is seen open
        self._arm_at_grasp: list[float] | None = None
        self._carried = 0.0  # the most any joint moved since the grasp
        self.counts = {"grasped": 0, "lost": 0, "closed": 0, "released": 0}

    @property
    def holding(self) -> bool:
        return self.held_width is not None

    def reset(self) -> None:
        """The cell is being reset (a new episode, an operator's hand): whatever was held is
        forgotten, and nothing counts as a grasp until the gripper is seen open again, so the
        fingers closing once the cube is taken out are no lost grasp."""
        self.held_width, self._still_since, self._still_width = None, None, math.nan
        self._armed = False

    def update(self, now: float, width: float, arm: Sequence[float] | None = None) -> str:
        """`arm`: the other joints' positions (None: unknown, and every closing counts as carried)."""
        c = self.cfg
        if not math.isfinite(width):
            return ""
        if not self._armed:
            self._armed = width >= c.open_width
            return ""
        if self.held_width is not None:
            if arm is not None and self._arm_at_grasp is not None and len(arm) == len(self._arm_at_grasp):
                moved = max((abs(float(a) - b) for a, b in zip(arm, self._arm_at_grasp)), default=0.0)
                if math.isfinite(moved):
                    self._carried = max(self._carried, moved)
            if width < self.held_width - c.lost_by:
                carried = arm is None or self._arm_at_grasp is None or self._carried >= c.carried
                return self._end("lost" if carried else "closed", now, width)
            if width > self.held_width + c.lost_by:
                return self._end("released", now, width)
            return ""
        if self._still_since is None or abs(width - self._still_width) > c.still:
            self._still_since, self._still_width = now, width
            return ""
        if c.min_object < width < c.open_width and now - self._still_since >= c.settle_s:
            self.held_width = self._still_width
            self._arm_at_grasp = None if arm is None else [float(a) for a in arm]
            self._carried = 0.0
            self.counts["grasped"] += 1
            return "grasped"
        return ""

    def _end(self, what: str, now: float, width: float) -> str:
        self.held_width = None
        self._still_since, self._still_width = now, width
        self.counts[what] += 1
        return what
