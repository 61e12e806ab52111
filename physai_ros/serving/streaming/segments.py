"""One streaming robot's segments on their way out: at most `segment_rate_hz` messages per robot,
and every committed node sent exactly once (a message carries every node committed since the
previous one plus the newest tentative nodes)."""
from __future__ import annotations

import math

import numpy as np


class SegmentMerger:
    """Rate limiter for one robot's segments that never drops a committed node.

    Every tick's segment starts at the robot's first unsent node, so consecutive segments
    overlap only in tentative nodes: the merge of ticks k1..k2 is the committed nodes of
    k1..k2-1 followed by all of tick k2. A gap (the window restarted after a stop) flushes the
    merge first, because a message holds one evenly spaced run of nodes."""

    def __init__(self, rate_hz: float):
        self.period = 1.0 / rate_hz
        self._parts: list = []
        self._last_out = -math.inf

    def add(self, seg, now: float) -> list[list]:
        """Returns the groups of segments to publish now (each group -> one message)."""
        out = []
        if self._parts and not _contiguous(self._parts[-1], seg):
            out.append(self._parts)
            self._parts = []
        self._parts.append(seg)
        if now - self._last_out >= self.period:
            out.append(self._parts)
            self._parts = []
        if out:
            self._last_out = now
        return out

    def pending(self) -> int:
        return len(self._parts)


def _committed_count(seg) -> int:
    c = np.asarray(seg.committed, bool)
    return int(c.size) if c.all() else int(np.argmin(c))


def _contiguous(prev, seg) -> bool:
    nxt = prev.start_time + _committed_count(prev) * prev.dt
    return abs(seg.start_time - nxt) < 0.5 * prev.dt and abs(seg.dt - prev.dt) < 1e-12


def merge_segments(parts: list) -> tuple[np.ndarray, np.ndarray]:
    """(positions, committed) of a contiguous run of one robot's segments."""
    pos = [p.positions[: _committed_count(p)] for p in parts[:-1]] + [parts[-1].positions]
    com = [p.committed[: _committed_count(p)] for p in parts[:-1]] + [parts[-1].committed]
    return np.concatenate(pos, axis=0), np.concatenate(com, axis=0)
