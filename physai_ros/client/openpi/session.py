"""One openpi client's connection as a robot of the fleet, without ROS: what it registers, the
observation each message becomes, and the answer each chunk becomes.

openpi's protocol is one request, one answer: the client sends an observation and waits. So a
round is simply the next message; its capture time is its arrival (openpi's observations carry
no timestamp), its state is what the client sent. The answer is the engine's whole chunk in the
robot's joint order, as openpi's servers return it ("actions" [chunk, action_dim]), with the
server's timings and physai's round details beside it; a client reads "actions" and ignores the
rest. When the engine is late past the task's SLO the session answers by the task's fallback
instead (`hold`: the sent state repeated over the chunk, for robots whose actions are joint
positions; otherwise a refusal the client sees as an error), and the late chunk is dropped.
"""
from __future__ import annotations

import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from physai_ros.client.openpi.layouts import LayoutError, image_from, prompt_from, state_from
from physai_ros.client.registration import robot_registration
from physai_ros.config.robot import RobotConfig
from physai_ros.protocol.chunk import STATUS_OK, ActionChunkData
from physai_ros.protocol.component import UNKNOWN_ROBOT
from physai_ros.protocol.observation import ObservationData
from physai_ros.protocol.openpi_layouts import OpenpiLayout
from physai_ros.protocol.registration import RegistrationResult, RobotRegistration


@dataclass(frozen=True)
class PendingRound:
    round_id: int
    sent_at: float
    state: np.ndarray


@dataclass
class SessionCounters:
    rounds: int = 0
    answered: int = 0
    fallbacks: int = 0
    refused: dict = field(default_factory=dict)  # reason -> count (input and server refusals)
    latencies_ms: deque = field(default_factory=lambda: deque(maxlen=2000))  # arrival -> answer, engine's

    def refuse(self, reason: str) -> None:
        self.refused[reason] = self.refused.get(reason, 0) + 1


# Optional keys a client may add (openpi's own clients send none): how much of the last chunk is
# still to execute, at what period, and which round that chunk answered, for the scheduler's wait
# ratio and real-time chunking, as a ROS robot's execution info gives them.
ACTIONS_REMAINING_KEY = "physai/actions_remaining"
CONTROL_PERIOD_KEY = "physai/control_period"
EXECUTING_ROUND_KEY = "physai/executing_round_id"


def execution_info(obs: Mapping[str, Any], default_period: float, last_round: int) -> tuple[int, float, int]:
    """(actions_remaining, control_period, executing_round_id) from the optional keys; without
    them, nothing left of a chunk at the task's period."""
    def number(key, lo, hi, default):
        if key not in obs:
            return default
        v = obs[key]
        try:
            x = float(np.asarray(v).reshape(()))
        except (TypeError, ValueError):
            raise LayoutError("bad_execution_info", f"{key}: expected a number, got {type(v).__name__}") from None
        if not (lo <= x <= hi):
            raise LayoutError("bad_execution_info", f"{key}: {x:g} not in [{lo:g}, {hi:g}]")
        return x
    remaining = int(number(ACTIONS_REMAINING_KEY, 0, 10_000, 0))
    period = number(CONTROL_PERIOD_KEY, 1e-4, 10.0, default_period)
    executing = int(number(EXECUTING_ROUND_KEY, 0, last_round, 0))
    return remaining, period, executing


class Unregistered(ValueError):
    """The server no longer knows the robot (it freed it after robot_timeout_s of silence, or it
    restarted): register again and send the round again, as the ROS robot client does."""


class OpenpiSession:
    ROUND_STRIDE = 2  # as the ROS client: even round ids, the odd ones free for hold chunks

    def __init__(self, robot: RobotConfig, layout: OpenpiLayout, hold_fallback: bool):
        self.robot = robot
        self.task = robot.task
        self.layout = layout
        self.views = layout.views(robot.num_views)
        self.hold_fallback = hold_fallback
        self.session = uuid.uuid4().hex[:16]
        self.round_id = 0
        self.pending: PendingRound | None = None
        self.counters = SessionCounters()
        # Registration (client.registration.RegistrationExchange drives these, as for a ROS robot).
        self.registered = False
        self.refused = ""  # the server's reason when it refused the registration
        self.server_instance = ""

    def registration(self) -> RobotRegistration:
        return robot_registration(self.robot, self.round_id, self.session)

    def on_registered(self, result: RegistrationResult) -> None:
        if not result.accepted:
            self.registered, self.refused = False, result.reason or "refused"
            return
        self.registered, self.refused, self.server_instance = True, "", result.server_instance
        # Continue above every round the server has seen from this robot (a reconnect).
        self.round_id = max(self.round_id, int(result.last_round_id))

    def on_register_failed(self) -> None:
        """No answer (or one not from our server): asked again on the next attempt."""

    def on_register_unanswered(self) -> None:
        """A refusal not signed by our server: ignored, asked again."""

    def observation(self, obs: Mapping[str, Any], now: float) -> ObservationData:
        """The next round from a decoded message; LayoutError for a message that is not one."""
        images = tuple(image_from(obs, path) for path in self.views)
        state = state_from(obs, self.layout.state, len(self.robot.joints))
        prompt = prompt_from(obs, self.layout.prompt, self.task.prompt)
        remaining, period, executing = execution_info(obs, self.task.action_period_s, self.round_id)
        self.round_id = (self.round_id // self.ROUND_STRIDE + 1) * self.ROUND_STRIDE
        self.pending = PendingRound(self.round_id, now, state)
        self.counters.rounds += 1
        return ObservationData(
            robot_id=self.robot.id, task_id=self.task.name, round_id=self.round_id, stamp=now,
            images=images, state=state, wrench=np.zeros(6, np.float32), wrench_stamp=0.0, prompt=prompt,
            exec_phase_start=0.0, actions_remaining=remaining, control_period=period,
            horizon_policy=self.task.horizon_policy, horizon_params=self.task.horizon_params,
            executing_round_id=executing)

    def status(self, connected: bool) -> dict:
        """The robot's status in the robot client's client_status shape (client.status), so the
        fleet summary reports a gateway robot as it does a ROS one."""
        c = self.counters
        lat = np.asarray(c.latencies_ms, dtype=float)
        return {"robot_id": self.robot.id, "state": "openpi connected" if connected else "openpi disconnected",
                "server_instance": self.server_instance, "round_id": self.round_id, "sent": c.rounds,
                "chunks_ok": c.answered, "refused": sum(c.refused.values()), "errors": 0,
                "slo_misses": c.fallbacks, "fallbacks": {"late": c.fallbacks} if c.fallbacks else {},
                "latency_ms_p50": float(np.percentile(lat, 50)) if lat.size else None,
                "latency_ms_p99": float(np.percentile(lat, 99)) if lat.size else None,
                "openpi_refused": dict(c.refused)}

    def deadline(self) -> float:
        """When the pending round's answer is late (the task's SLO after it arrived)."""
        return self.pending.sent_at + self.task.slo_ms / 1e3

    def answer(self, chunk: ActionChunkData) -> dict:
        """The pending round's chunk as openpi's answer; ValueError (the server's reason) for a
        refused or failed round."""
        self.pending = None
        if chunk.status != STATUS_OK:
            reason = chunk.error.split(":", 1)[0] or "error"
            if reason == UNKNOWN_ROBOT:
                self.registered = False
                raise Unregistered(chunk.error)
            self.counters.refuse("server_" + reason[:40])
            raise ValueError(chunk.error or f"status {chunk.status}")
        self.counters.answered += 1
        return {
            "actions": np.asarray(chunk.actions, dtype=np.float32),
            "server_timing": {"infer_ms": float(chunk.inference_ms), "queue_ms": float(chunk.queue_ms),
                              "prepare_ms": float(chunk.prepare_ms)},
            "physai": {"robot_id": chunk.robot_id, "round_id": int(chunk.round_id), "horizon": int(chunk.horizon),
                       "dt": float(chunk.dt), "engine_instance": chunk.engine_instance},
        }

    def fallback(self, chunk_len: int) -> dict:
        """The answer when the engine missed the SLO: the state held (or ValueError when the
        robot's actions are not positions to hold)."""
        pending, self.pending = self.pending, None
        self.counters.fallbacks += 1
        if not self.hold_fallback or pending is None:
            self.counters.refuse("late")
            raise ValueError(f"late: no chunk within the task's SLO of {self.task.slo_ms:g} ms")
        actions = np.repeat(pending.state[None, :].astype(np.float32), max(1, chunk_len), axis=0)
        return {"actions": actions, "physai": {"robot_id": self.robot.id, "round_id": pending.round_id,
                                               "fallback": "hold"}}
