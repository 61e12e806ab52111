"""A robot client's operator commands as plain logic (the ROS service is nodes/robot_client_operator):
first who sent it (the authentication the node passes in), then whether it is for this robot and
makes sense now, then what it does. Every refusal has a reason and is counted by it.

  resume       leaves the STOPPED state of an SLO escalation; with a pipeline, its acknowledge
               (which clears the pipeline's latch and the client's own stop together)
  acknowledge  clears a latched pipeline escalation (a robot without a pipeline has none)
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Callable, Optional

from physai_ros.security.handshake import AuthError

ROBOT_COMMANDS = ("resume", "acknowledge")


@dataclass(frozen=True)
class OperatorRequest:
    robot_id: str
    command: str
    note: str
    operator: str


@dataclass(frozen=True)
class OperatorAnswer:
    accepted: bool
    reason: str = ""  # "<reason>: <detail>" when refused
    cleared: str = ""  # the escalation that was cleared

    @property
    def refusal(self) -> str:
        return self.reason.split(":", 1)[0]


class OperatorCommands:
    """`core`: the RobotClientCore; `acknowledge(note)`: the pipeline's (accepted, reason,
    cleared), or None for a robot without a pipeline."""

    def __init__(self, robot_id: str, core, acknowledge: Optional[Callable[[str], tuple[bool, str, str]]] = None):
        self.robot_id, self.core, self._acknowledge = robot_id, core, acknowledge
        self.refused: Counter = Counter()
        self.accepted: Counter = Counter()

    def handle(self, req: OperatorRequest, authenticate: Optional[Callable[[], object]]) -> OperatorAnswer:
        """`authenticate()` raises AuthError unless an operator of the fleet signed `req` (None:
        the fleet runs insecure)."""
        if authenticate is not None:
            try:
                authenticate()
            except AuthError as e:
                return self._refuse(e.refusal_reason, e.detail)
        if req.robot_id != self.robot_id:
            return self._refuse("wrong_robot", f"for {req.robot_id[:64]!r}, this is {self.robot_id}")
        if req.command == "resume":
            answer = self._resume(req.note)
        elif req.command == "acknowledge":
            if self._acknowledge is None:
                return self._refuse("not_escalated", "this robot's task has no pipeline to acknowledge")
            answer = OperatorAnswer(*self._acknowledge(req.note))
        else:
            return self._refuse("unknown_command", f"{req.command[:32]!r}, expected one of {ROBOT_COMMANDS}")
        if answer.accepted:
            self.accepted[req.command] += 1
        else:
            self.refused[answer.refusal] += 1
        return answer

    def _resume(self, note: str) -> OperatorAnswer:
        if self._acknowledge is not None:  # the pipeline's acknowledge resumes the client too
            return OperatorAnswer(*self._acknowledge(note))
        if not self.core.stopped:
            return OperatorAnswer(False, f"not_stopped: the robot is {self.core.state.value}")
        cleared = self.core.escalations[-1] if self.core.escalations else "stopped"
        self.core.resume()
        return OperatorAnswer(True, "", cleared)

    def _refuse(self, reason: str, detail: str) -> OperatorAnswer:
        self.refused[reason] += 1
        return OperatorAnswer(False, f"{reason}: {detail}")
