"""What reaches a robot's trajectory buffer, without ROS: chunks and segments for this robot only,
a robot client's hold instead of a chunk, the first joint state as the position to hold, and
every refusal counted by reason. The trajectory_controller node checks signatures and decodes
messages; everything it then decides lives here.
"""
from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Optional, Sequence

from physai_ros.control.hold import apply_hold
from physai_ros.control.plan_checks import InsertOutcome
from physai_ros.control.trajectory_buffer import TrajectoryBuffer


class ExecutionGate:
    def __init__(self, robot_id: str, buffer: TrajectoryBuffer):
        self.robot_id = robot_id
        self.buffer = buffer
        # Refusals before the buffer saw the message (wrong robot, malformed, unauthenticated).
        self.message_rejections: Counter = Counter()
        self.last_message_reject = ""
        self.holds: Counter = Counter()
        # The server's refusals and error answers (ActionChunk status refused / error): they tell
        # the robot client to fall back or ask again; nothing here executes them, and they are not
        # bad input, so they are counted apart from the rejections, by status.
        self.client_answers: Counter = Counter()
        self.have_start = False  # the first joint state set the position to hold
        self.seen_chunk = False
        self.holding_round: Optional[int] = None  # a robot_client hold in effect (until the next chunk)

    # ---- refusals -----------------------------------------------------------------------

    def wrong_robot(self, claimed: str, what: str) -> Optional[str]:
        """None when a message for `claimed` may be executed here; else the refusal, counted."""
        if claimed and claimed != self.robot_id:
            detail = f"{what} for robot {claimed!r} reached {self.robot_id!r}"
            self.reject("wrong_robot")
            return detail
        return None

    def reject(self, reason: str) -> None:
        self.message_rejections[reason] += 1
        self.last_message_reject = reason  # a code, like the buffer's reasons; the detail goes to the log

    @property
    def rejected_total(self) -> int:
        return self.buffer.chunks_rejected + self.buffer.segments_rejected + sum(self.message_rejections.values())

    def rejections(self) -> Counter:
        return Counter(self.buffer.rejections) + self.message_rejections

    def last_reason(self) -> str:
        return self.last_message_reject or self.buffer.last_reject_reason

    # ---- inputs -------------------------------------------------------------------------

    def on_joint_state(self, names: Sequence[str], positions: Sequence[float]) -> None:
        """The first complete joint state is where the arm holds before any chunk."""
        if self.have_start:
            return
        index = {n: i for i, n in enumerate(names)}
        if all(n in index for n in self.buffer.joint_names) and len(positions) == len(names):
            self.buffer.set_hold_position([positions[index[n]] for n in self.buffer.joint_names])
            self.have_start = True

    def on_client_answer(self, status: str) -> None:
        """A refusal or error answer from the server for the robot client: counted, not executed,
        the buffer untouched."""
        self.client_answers[status] += 1

    def on_hold(self, round_id: int, now: float) -> str:
        """A robot client's hold stops the buffer (it is never inserted); returns what it did."""
        out = apply_hold(self.buffer, round_id, now)
        self.holds["applied" if out.applied else "ignored"] += 1
        if out.applied:
            self.holding_round = round_id
        return out.detail

    def insert_chunk(self, chunk, now: float) -> InsertOutcome:
        return self._taken(self.buffer.insert(chunk, now))

    def insert_segment(self, seg, now: float) -> InsertOutcome:
        return self._taken(self.buffer.insert_segment(seg.start_time, seg.dt, seg.positions, seg.committed,
                                                      seg.round_id, now, joint_names=seg.joint_names))

    def _taken(self, out: InsertOutcome) -> InsertOutcome:
        if out.accepted:
            self.seen_chunk = True
            self.holding_round = None
        else:
            self.last_message_reject = ""  # the buffer's own reason is the last one now
        return out

    def execution_state(self, now: float):
        """The buffer's state, its rejections counting the messages refused before it too."""
        return dataclasses.replace(self.buffer.execution_state(now), chunks_rejected=self.rejected_total,
                                   last_reject_reason=self.last_reason())
