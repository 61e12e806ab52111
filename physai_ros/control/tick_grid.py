"""The robot clock's fixed grid of ``rate_hz`` ticks (tick ``k`` is due at ``k / rate_hz``), and
the mapping of a chunk's or a streamed segment's actions onto it.

Two plans always land on the same node times, so merging them is a per-node operation.
"""
from __future__ import annotations

import math

import numpy as np

from physai_ros.control.plan_checks import CheckedSegment, PlanRejected, RejectReason

# Slack, in ticks, for float rounding when mapping times onto the grid: a time within a
# millionth of a tick of a node is that node.
TICK_EPS = 1e-6


class TickGrid:
    def __init__(self, rate_hz: float):
        self.rate_hz = float(rate_hz)

    def floor(self, t: float) -> int:
        return math.floor(t * self.rate_hz + TICK_EPS)

    def ceil(self, t: float) -> int:
        return math.ceil(t * self.rate_hz - TICK_EPS)

    def chunk_nodes(self, actions: np.ndarray, t0: float, dt: float, first_free: int, now: float):
        """Chunk action ``k`` is due at ``t0 + k * dt``, the last one held for one ``dt``: the
        grid nodes in ``[t0, t0 + H * dt)`` from ``first_free`` on, interpolated linearly."""
        first = max(self.ceil(t0), first_free)
        last = self.ceil(t0 + actions.shape[0] * dt) - 1
        if last < first:
            raise PlanRejected(RejectReason.EXPIRED, f"every action of the horizon is due before now={now:.6f}")
        ticks = np.arange(first, last + 1, dtype=np.int64)
        s = (ticks / self.rate_hz - t0) / dt
        return ticks, interp_rows(s, actions)

    def segment_nodes(self, seg: CheckedSegment, first_free: int, now: float):
        """Segment node ``i`` is due at ``start_time + i * dt`` and is a point (no hold after the
        last one). A grid node between two nodes the server marked committed is locked."""
        n = seg.positions.shape[0]
        first = max(self.ceil(seg.start_time), first_free)
        last = self.floor(seg.start_time + (n - 1) * seg.dt)
        if last < first:
            raise PlanRejected(RejectReason.EXPIRED, f"no segment node is due after now={now:.6f}")
        ticks = np.arange(first, last + 1, dtype=np.int64)
        s = np.clip((ticks / self.rate_hz - seg.start_time) / seg.dt, 0.0, n - 1)
        positions = interp_rows(s, seg.positions)
        # Snap s that is a node index up to float noise, so on-grid nodes keep their own flag.
        lo = np.clip(np.floor(s + TICK_EPS).astype(np.int64), 0, n - 1)
        hi = np.clip(np.ceil(s - TICK_EPS).astype(np.int64), 0, n - 1)
        return ticks, positions, seg.committed[lo] & seg.committed[hi]


def interp_rows(s: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Linear interpolation of ``rows`` (indexed 0..N-1) at fractional indices ``s``, held at
    the ends."""
    idx = np.arange(rows.shape[0], dtype=np.float64)
    out = np.empty((s.shape[0], rows.shape[1]))
    for j in range(rows.shape[1]):
        out[:, j] = np.interp(s, idx, rows[:, j])
    return out
