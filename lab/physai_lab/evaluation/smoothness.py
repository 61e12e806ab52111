"""How smoothly consecutive chunks join, measured on the trajectory buffer (docs/rtc.md):

- boundary jump: when a chunk is merged, how far the buffer's command at the new chunk's first
  node moves from what the old plan commanded there (the old plan's node at that time, its last
  node held when it ended earlier, or the last command when the buffer was dry). This is the
  step a merge rule puts into the commanded trajectory: replace takes the new chunk's value,
  crossfade a blend, RTC a chunk made to continue the old one;
- command jerk: the third difference of the command sampled on the buffer's grid (one sample
  per grid tick, what the controller sends), divided by the grid period cubed.

Arm joints only (the gripper's unit is metres). Plain numpy; the bench (bench/rtc.py) feeds it
from lock-step episodes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from physai_ros.control.types import TrajectoryNodes


def old_command_at(t: float, old: TrajectoryNodes, last_command) -> np.ndarray | None:
    """What the old plan commands at time t: its node there, else its last node before t held,
    else the last command (None when nothing was ever commanded)."""
    if len(old):
        i = int(np.searchsorted(old.times, t + 1e-9, side="right")) - 1
        if i >= 0:
            return old.positions[i]
    return None if last_command is None else np.asarray(last_command, dtype=np.float64)


def boundary_jump(old: TrajectoryNodes, last_command, new: TrajectoryNodes, round_id: int,
                  joints: slice) -> float | None:
    """Max |command change| over `joints` at the first node the merged chunk `round_id` wrote;
    None when the chunk wrote no node or nothing was commanded before."""
    mine = np.flatnonzero(new.round_ids == round_id)
    if mine.size == 0:
        return None
    i = int(mine[0])
    before = old_command_at(float(new.times[i]), old, last_command)
    if before is None:
        return None
    return float(np.max(np.abs(new.positions[i][joints] - before[joints])))


def command_jerk(commands: np.ndarray, period: float) -> np.ndarray:
    """||third difference|| / period^3 per grid tick (rad/s^3) of commands [N, J]; [max(N-3, 0)]."""
    if commands.shape[0] < 4:
        return np.zeros(0)
    d3 = np.diff(commands, n=3, axis=0)
    return np.linalg.norm(d3, axis=1) / period ** 3


@dataclass
class SmoothnessRecorder:
    """One robot's samples over its episodes: call tick() after each buffer.advance, and
    before_merge()/after_merge() around each chunk insert."""

    rate_hz: float
    joints: slice = field(default_factory=lambda: slice(0, -1))
    jumps: list = field(default_factory=list)
    jerks: list = field(default_factory=list)
    _grid: list = field(default_factory=list)
    _last_k: int | None = None
    _merged: int = 0  # chunks merged this episode (the first one joins the hold, not a chunk)

    def tick(self, now: float, command) -> None:
        k = math.floor(now * self.rate_hz + 1e-6)
        if command is None or k == self._last_k:
            return
        self._last_k = k
        self._grid.append(np.asarray(command, dtype=np.float64)[self.joints])

    @staticmethod
    def before_merge(buffer):
        return buffer.tentative_nodes(), buffer.last_command

    def after_merge(self, snapshot, buffer, round_id: int, accepted: bool) -> None:
        if not accepted:
            return
        self._merged += 1
        if self._merged == 1:
            return  # an episode's first chunk starts from the hold position: no chunk boundary
        jump = boundary_jump(snapshot[0], snapshot[1], buffer.tentative_nodes(), round_id, self.joints)
        if jump is not None:
            self.jumps.append(jump)

    def end_episode(self) -> None:
        if self._grid:
            self.jerks.extend(command_jerk(np.stack(self._grid), 1.0 / self.rate_hz).tolist())
        self._grid, self._last_k, self._merged = [], None, 0


def summary(values) -> dict:
    """mean, p50, p99 and max of a sample (None when empty)."""
    v = np.asarray(list(values), dtype=np.float64)
    if v.size == 0:
        return {"n": 0, "mean": None, "p50": None, "p99": None, "max": None}
    return {"n": int(v.size), "mean": float(v.mean()), "p50": float(np.percentile(v, 50)),
            "p99": float(np.percentile(v, 99)), "max": float(v.max())}
