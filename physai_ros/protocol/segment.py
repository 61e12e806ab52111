"""The streamed trajectory segment (TrajectorySegment.msg) as plain data.

The policy server's streaming service produces it and the trajectory controller inserts it:
one type for both ends. Times are ROS seconds, positions in robot units.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class TrajectorySegmentData:
    """Dense nodes of one robot's streamed plan: node ``i`` is due at ``start_time + i * dt``.

    ``committed`` marks the nodes the server will not change again (a prefix). ``tick_time``,
    ``wrench_stamp`` and ``ticks_merged`` say how the server made it; on the wire only
    ``stamp`` travels, so a decoded segment carries that stamp as its ``tick_time`` (with no
    wrench stamp and no tick count).
    """

    robot_id: str
    round_id: int  # round id of the observation behind the VLM pass the newest tick read
    segment_id: int
    joint_names: tuple[str, ...]
    start_time: float
    dt: float
    positions: np.ndarray  # float32 [N, D]
    committed: np.ndarray  # bool [N], a prefix
    tick_time: float  # ROS seconds of the newest tick merged in
    wrench_stamp: float = math.nan  # newest wrench sample that tick read (nan: none yet)
    ticks_merged: int = 0

    @property
    def stamp(self) -> float:
        """The header stamp: the newest wrench sample's capture time (the tick time before any
        sample), so the quick force loop can be traced end to end."""
        w = self.wrench_stamp
        return w if math.isfinite(w) and w > 0 else self.tick_time
