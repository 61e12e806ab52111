"""Hold chunks: how the robot client stops the trajectory controller on an SLO miss.

The client (physai_ros/client/robot_client.py decides, `hold_chunk` builds) sends an ordinary
ActionChunk repeating the current position, marked by ``error == HOLD_ERROR`` and
``engine_instance == HOLD_ENGINE_INSTANCE`` (physai_ros.protocol.chunk). Its round id carries
the decision (observations use even ids r):
  - r-1: keep waiting for round r (fallback ``hold``): the late answer must still be executed;
  - r+1: give round r up (``stop_and_resend``, escalation): r must be refused, the resend
    (r+2, whatever its capture time) taken.
Inserted like a chunk, its stamp would become the newest capture time, and any answer captured
before it would be refused as ``time_backwards``. So the controller never inserts it: it stops
the buffer (holding the last commanded position) and only raises the stale-round bar to the
hold's own id. That single rule serves both variants, whatever the hold's stamp.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from physai_ros.control.trajectory_buffer import TrajectoryBuffer
from physai_ros.protocol.chunk import HOLD_ENGINE_INSTANCE, HOLD_ERROR, STATUS_OK, ActionChunkData


def hold_chunk(robot_id: str, task_id: str, hold, joint_names: Sequence[str]) -> ActionChunkData:
    """A client_core.HoldCommand as the chunk the controller recognises: `num_actions` copies of
    `positions`, `dt` apart, stamped with the hold's capture time."""
    n = int(hold.num_actions)
    return ActionChunkData(
        robot_id=robot_id, task_id=task_id, round_id=int(hold.round_id), stamp=hold.capture_time,
        status=STATUS_OK, error=HOLD_ERROR, joint_names=tuple(joint_names), dt=float(hold.dt),
        actions=np.tile(np.asarray(hold.positions, np.float32).reshape(1, -1), (n, 1)), horizon=n,
        confidence=np.ones(n, np.float32), engine_instance=HOLD_ENGINE_INSTANCE)


@dataclass(frozen=True)
class HoldOutcome:
    applied: bool
    dropped_nodes: int
    detail: str


def apply_hold(buffer: TrajectoryBuffer, round_id: int, now: float) -> HoldOutcome:
    """Stop the buffer and refuse every round up to ``round_id`` from now on.

    A hold older than the newest accepted round is ignored: it is a keep-waiting hold that
    crossed the answer it was waiting for (the answer is executing; stopping would throw it
    away). Never touches the newest capture time, so answers stamped before the hold are taken.
    """
    rid = int(round_id)
    last = buffer.last_round_id
    if rid < last:
        return HoldOutcome(False, 0, f"hold round {rid} is older than accepted round {last}: answer already here")
    dropped = buffer.stop(now, refuse_through_round=rid)
    return HoldOutcome(True, dropped, f"holding; rounds <= {rid} refused from now on ({dropped} nodes dropped)")
