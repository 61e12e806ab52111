"""Plain data crossing the boundary between the control logic and the ROS nodes (the chunk
they execute is physai_ros.protocol.chunk.ActionChunkData, shared with the serving side).

All times are float seconds on the robot's clock (the clock that stamped the observation).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ExecutionState:
    """What the trajectory controller reports (ExecutionInfo.msg, Kairos section 4).

    ``actions_remaining`` counts the tentative (not yet due) part of the buffer in units of the
    executing chunk's action period, so ``actions_remaining * control_period`` is the time the
    robot can keep moving without a new chunk. ``control_period`` is therefore that chunk's
    ``dt`` (the buffer's node period before any chunk arrived).
    """

    executing_round_id: int
    exec_phase_start: float
    actions_remaining: int
    control_period: float
    buffer_nodes: int
    buffer_dry: bool
    underruns: int
    chunks_accepted: int
    chunks_rejected: int
    last_reject_reason: str


@dataclass(frozen=True)
class TrajectoryNodes:
    """A run of buffer nodes: ``times[i]`` (seconds) and ``positions[i]`` (``[M, D]``).

    ``round_ids[i]`` is the round of the chunk or segment that last wrote node ``i``.
    """

    times: np.ndarray
    positions: np.ndarray
    round_ids: np.ndarray

    def __len__(self) -> int:
        return int(self.times.shape[0])
