"""The robot client's streaming mode, without ROS.

A robot whose task has `mode: streaming` registers with `streaming=True`. When the server gives
it a slot (the reply is accepted with a reason starting "streaming:"), the client stops
the chunked round trip (async trigger, SLO deadlines) and instead
- sends an Observation for every complete set of new camera frames (the VLM stream's input, at
  the camera rate; round ids keep rising by 2 as in chunked mode, so they survive a switch back),
- forwards every wrench sample as it arrives (the node republishes the WrenchStamped on
  `stream_wrench`, sensor-data QoS: the action-expert stream's force input at its native rate).
Segments go from the server straight to the trajectory controller. When the server serves the
robot chunked (no free slot), or refuses it as `not_streaming` (its slot timed out, the server
restarted), the client falls back to chunked operation and registers again.
"""
from __future__ import annotations

import dataclasses
import math

from physai_ros.client.robot_client import RobotClientCore
from physai_ros.client.types import ClientState
from physai_ros.config.robot import RobotConfig
from physai_ros.protocol.chunk import STATUS_REFUSED, ActionChunkData
from physai_ros.protocol.observation import ObservationData
from physai_ros.protocol.registration import RegistrationResult, RobotRegistration


class StreamingClient:
    def __init__(self, robot: RobotConfig, core: RobotClientCore):
        self.robot = robot
        self.core = core
        self.active = False  # the server streams to us now
        self.reason = ""  # why not (the last registration reply)
        self.observations_sent = 0
        self.wrench_forwarded = 0
        self.fallbacks = 0  # times the server served us chunked or dropped our slot
        self._stamps = [-math.inf] * robot.num_views
        self._last_sent = -math.inf

    @staticmethod
    def for_robot(robot: RobotConfig, core: RobotClientCore) -> "StreamingClient | None":
        return StreamingClient(robot, core) if robot.task.mode == "streaming" else None

    def registration(self) -> RobotRegistration:
        return dataclasses.replace(self.core.registration(), streaming=True)

    def on_registered(self, result: RegistrationResult) -> None:
        was = self.active
        # Only an explicit grant counts: a server that does not stream (no streaming task, or
        # an older server) accepts with an empty reason, and the robot must stay chunked.
        self.active = bool(result.accepted) and result.reason.startswith("streaming")
        self.reason = result.reason
        if was and not self.active:
            self.fallbacks += 1
        if self.active and not was:
            # Chunked requests in flight are moot: their answers would fight the stream.
            self.core.trigger.abandon()

    def on_chunk(self, chunk: ActionChunkData) -> None:
        """A refusal of a streamed observation: the server no longer streams to us."""
        if self.active and chunk.status == STATUS_REFUSED and chunk.error.startswith(("not_streaming", "unknown_robot")):
            self.active = False
            self.fallbacks += 1
            self.reason = chunk.error
            self.core.on_register_failed()  # ask again at the next tick

    def on_wrench(self) -> bool:
        """Whether to forward this sample to the server now."""
        if self.active:
            self.wrench_forwarded += 1
        return self.active

    def on_frame(self, view: int, stamp: float) -> ObservationData | None:
        """A camera frame arrived (after RobotClientCore.on_image). Returns the observation to
        send once every view has a frame newer than the last one sent."""
        if 0 <= view < len(self._stamps):
            self._stamps[view] = stamp
        core = self.core
        if not self.active or core.state != ClientState.RUNNING or not core.ready():
            return None
        complete = min(self._stamps)
        if complete <= self._last_sent:
            return None
        core.round_id = (core.round_id // core.ROUND_STRIDE + 1) * core.ROUND_STRIDE
        obs = core._build(core.round_id, 0, self.robot.task.action_period_s)
        self._last_sent = complete
        self.observations_sent += 1
        return obs

    def status(self) -> dict:
        return {"mode": "streaming" if self.active else "chunked", "streaming_reason": self.reason,
                "stream_observations": self.observations_sent, "wrench_forwarded": self.wrench_forwarded,
                "stream_fallbacks": self.fallbacks}


def summary_fields(client_status: dict | None) -> dict:
    """The streaming part of a robot's physai-fleet summary (from its client_status JSON):
    mode "streaming" while the server streams to it (its `rounds` then stay 0: segments, not
    chunk round trips), else "chunked"."""
    st = client_status or {}
    return {"mode": st.get("mode", "chunked"), "stream_observations": st.get("stream_observations", 0)}
