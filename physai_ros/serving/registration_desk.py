"""The server side of registering a robot, without ROS: the robot's proof, the serving core's
admission, a streaming slot, and every refusal counted with the robot it names. Also the one rule
for a session-tagged message from a robot (observation, component query): it goes on when its
tag checks, or when the robot is not registered here at all.

The node turns requests into RobotRegistration (or a reason it could not), hands them here, and
writes the outcome into the service's response.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

from physai_ros.protocol.registration import RegistrationResult, RobotRegistration
from physai_ros.security.handshake import AuthError


@dataclass(frozen=True)
class RegistrationOutcome:
    result: RegistrationResult
    # The session grant for an accepted robot on a secure fleet, None otherwise.
    grant: Optional[bytes] = None
    # A line for the log (None: nothing to say); refusals for malformed requests are only counted.
    warning: Optional[str] = None


class RegistrationDesk:
    def __init__(self, core, auth: Any, refusals, streaming: Any = None):
        """core: the ServingCore; auth: ServerAuth or None (insecure fleet); refusals: the
        registrations' RefusalLog (monitoring.refusals); streaming: the node's streaming adapter
        (on_register(reg, result) -> result) or None."""
        self.core, self.auth, self.refusals, self.streaming = core, auth, refusals, streaming

    def register(self, reg: Optional[RobotRegistration], unreadable: Optional[str], sender: str,
                 request_digest: Callable[[], bytes], proof: bytes) -> RegistrationOutcome:
        """reg: the request as read, or None with `unreadable` saying why; sender: the robot id
        the request names (for counting); request_digest: the request's digest without its proof
        (computed only on a secure fleet)."""
        try:
            if reg is None:
                raise ValueError(unreadable or "unreadable request")
            session = None
            if self.auth is not None:
                try:
                    session = self.auth.register(reg.robot_id, request_digest(), proof)
                except AuthError as e:
                    return self._refused(str(reg.robot_id)[:64], e.refusal_reason, str(e))
            res = self.core.register(reg)
            if self.streaming is not None:
                res = self.streaming.on_register(reg, res)
        except Exception as e:  # a malformed request must not take the service down
            return self._refused(sender, "bad_registration", str(e), warn=False)
        if not res.accepted:
            reason, _, detail = res.reason.partition(": ")
            self.refusals.add(reg.robot_id, reason, detail, time.time())
            return RegistrationOutcome(res, warning=f"refused registration of {reg.robot_id!r}: {res.reason}")
        if session is not None:
            grant, key = session
            self.auth.start_session(reg.robot_id, key)
            return RegistrationOutcome(res, grant=grant)
        return RegistrationOutcome(res)

    def refusal_signature(self, proof: bytes, reason: str) -> Optional[list]:
        """A refusal carries the server's signature over the proof it answers: a robot acts only on
        its own fleet server's refusals (a second register_robot service's are nobody's)."""
        return list(self.auth.sign_refusal(proof, reason)) if self.auth is not None else None

    def session_problem(self, check: Callable[[], None], robot_id: str) -> Optional[tuple[str, str]]:
        """None when a session-tagged message from `robot_id` may go on: `check` (the tag's check,
        raising AuthError) passes, or the robot is not registered here at all (this server
        restarted: it is answered "not registered", which makes the client register again).
        Else (reason, detail) for the refusal."""
        if self.auth is None:
            return None
        try:
            check()
            return None
        except AuthError as e:
            if e.reason == "no_session" and self.core.registration(robot_id) is None:
                return None
            return e.refusal_reason, str(e)

    def _refused(self, robot_id: str, reason: str, detail: str, warn: bool = True) -> RegistrationOutcome:
        self.refusals.add(robot_id, reason, detail, time.time())
        return RegistrationOutcome(
            RegistrationResult(False, f"{reason}: {detail}", self.core.instance_id),
            warning=f"refused registration of {robot_id!r}: {reason}: {detail}" if warn else None)
