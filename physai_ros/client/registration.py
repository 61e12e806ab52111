"""The robot side of registering with the policy server, without ROS: when to (re)send the request,
and what the server's answer changes.

- One request in flight at most. A request in flight when the server died is never answered, so
  it is given up after `timeout_s` and sent again; otherwise the robot would never register with
  the restarted server.
- With authentication on, a refusal counts only when the server signed it over this request's
  proof (a second register_robot service's refusals are nobody's), and an acceptance only with a
  session grant the fleet's server issued; anything else leaves the client as it was.
The node sends the request and hands back the answer; the client core keeps the state.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from physai_ros.config.robot import RobotConfig
from physai_ros.protocol.registration import RegistrationResult, RobotRegistration
from physai_ros.security.handshake import AuthError


def robot_registration(robot: RobotConfig, last_round_id: int, session: str) -> RobotRegistration:
    """What a robot tells the server about itself (its fleet.yaml entry and task), whether its
    client is the ROS robot client or the openpi gateway."""
    r, task = robot, robot.task
    return RobotRegistration(
        robot_id=r.id, task_id=task.name, robot_namespace="/" + r.namespace,
        prompt=task.prompt, camera_topics=r.camera_topics, num_views=r.num_views,
        image_height=r.image_height, image_width=r.image_width, joint_names=r.joints,
        state_dim=len(r.joints), action_dim=len(r.joints),
        control_period=task.action_period_s, last_round_id=last_round_id,
        client_session=session, view_sizes=r.camera_sizes, camera_features=r.camera_features)

# Longest wait for a RegisterRobot reply before the request is dropped and sent again.
REGISTER_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class SendDecision:
    abandon: bool  # give up on the request in flight (cancel it)
    send: bool  # send a new request now


class RegistrationExchange:
    def __init__(self, core, auth: Any = None, auth_refusals: Any = None, streaming: Any = None,
                 timeout_s: float = REGISTER_TIMEOUT_S):
        """core: RobotClientCore; auth: RobotAuth or None (insecure fleet); auth_refusals: where
        refused server answers are counted (security.message_auth.RefusalLog); streaming:
        StreamingClient or None."""
        self.core, self.auth, self.auth_refusals, self.streaming = core, auth, auth_refusals, streaming
        self.timeout_s = float(timeout_s)
        self._sent_at: Optional[float] = None

    def decide(self, now: float, in_flight: bool, service_ready: bool) -> SendDecision:
        """Called when the core asks to register: whether to give up the request in flight and
        whether to send one now."""
        abandon = False
        if in_flight:
            if self._sent_at is not None and now - self._sent_at < self.timeout_s:
                return SendDecision(False, False)
            abandon = True
            self.core.on_register_failed()
        if not service_ready:
            self.core.on_register_failed()
            return SendDecision(abandon, False)
        return SendDecision(abandon, True)

    def registration(self) -> RobotRegistration:
        """What to send: the streaming client's registration in streaming mode, else the core's."""
        return self.streaming.registration() if self.streaming is not None else self.core.registration()

    def sent(self, now: float) -> None:
        self._sent_at = now

    def on_answer(self, result: Optional[RegistrationResult], proof: bytes, reason: str,
                  grant: bytes) -> list[tuple[str, str]]:
        """Apply the server's answer (None: none came, or it could not be read). Returns the lines
        to log, as (level, text) with level "info" or "error"."""
        if result is None:
            self.core.on_register_failed()
            return []
        before = self.core.server_instance
        if self.auth is not None and not result.accepted:
            try:
                self.auth.check_refusal(proof, reason, grant)
            except AuthError as e:  # not our server's word: nothing changes here, ask again later
                self._refused("registration refusal", e)
                self.core.on_register_unanswered()
                return []
        if self.auth is not None and result.accepted:
            try:
                self.auth.on_grant(grant)
            except AuthError as e:  # not our fleet's server (or it runs insecure): not registered
                self._refused("session grant", e)
                self.core.on_register_failed()
                return [("error", f"registration answer refused: {e}")]
        self.core.on_registered(result)
        lines = []
        if self.streaming is not None:
            was = self.streaming.active
            self.streaming.on_registered(result)
            if was != self.streaming.active:
                lines.append(("info", f"streaming mode {'on' if self.streaming.active else 'off'}"
                              + (f": {result.reason}" if result.reason else "")))
        if before != self.core.server_instance:
            lines.append(("info", f"registered with policy server {self.core.server_instance}"))
        return lines

    def _refused(self, what: str, e: AuthError) -> None:
        if self.auth_refusals is not None:
            self.auth_refusals.refused(what, e)
