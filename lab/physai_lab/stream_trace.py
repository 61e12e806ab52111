"""Tracing a streamed segment into the trajectory controller's commands (plain data, no ROS).

The quick loop (force impulse -> changed command) and the slow loop (visual change -> changed
command) are measured over real topics by matching what the controller publishes against the
segments the server sent: both live on the controller's node grid (tick k due at k / rate_hz),
so a command point at tick k that equals a segment's node at tick k came from that segment
(or from a later one that kept it). Used by test/streaming_ros and bench/streaming.py.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class GridNodes:
    ticks: np.ndarray  # int64 [N]
    positions: np.ndarray  # float64 [N, D]
    committed: np.ndarray  # bool [N] (all False for command points)


def segment_grid(start_time: float, dt: float, positions, committed, rate_hz: float) -> GridNodes:
    """A segment's nodes that sit on the grid (all of them when dt is a whole number of ticks)."""
    pos = np.asarray(positions, dtype=np.float64)
    n = pos.shape[0]
    k = (start_time + np.arange(n) * dt) * rate_hz
    on = np.abs(k - np.round(k)) < 1e-3
    c = np.asarray(committed, dtype=bool) if len(committed) else np.zeros(n, bool)
    return GridNodes(np.round(k[on]).astype(np.int64), pos[on], c[on])


def command_grid(stamp: float, times_from_start, positions, rate_hz: float) -> GridNodes:
    """A JointTrajectory's points (header stamp + time_from_start) on the grid."""
    pos = np.asarray(positions, dtype=np.float64).reshape(len(times_from_start), -1)
    k = (stamp + np.asarray(times_from_start, dtype=np.float64)) * rate_hz
    on = np.abs(k - np.round(k)) < 1e-3
    return GridNodes(np.round(k[on]).astype(np.int64), pos[on], np.zeros(int(on.sum()), bool))


def matching_ticks(command: GridNodes, segment: GridNodes, atol: float = 1e-5, tentative_only: bool = True) -> np.ndarray:
    """Ticks where the command carries the segment's value. A committed node is sent once, in
    the segment whose tick made it final, so it too identifies that segment; tentative_only
    restricts the match to nodes the stream may still change."""
    common, ci, si = np.intersect1d(command.ticks, segment.ticks, assume_unique=True, return_indices=True)
    if common.size == 0:
        return common
    same = np.all(np.abs(command.positions[ci] - segment.positions[si]) <= atol, axis=1)
    if tentative_only:
        same &= ~segment.committed[si]
    return common[same]


def differs_at(a: GridNodes, b: GridNodes, ticks, atol: float = 1e-6) -> np.ndarray:
    """Of `ticks`, those where a and b both have a node and the values differ."""
    common, ai, bi = np.intersect1d(a.ticks, b.ticks, assume_unique=True, return_indices=True)
    keep = np.isin(common, np.asarray(ticks))
    diff = np.any(np.abs(a.positions[ai] - b.positions[bi]) > atol, axis=1)
    return common[keep & diff]
