"""The robot client's logic without ROS: newest inputs, when to send (control.async_trigger),
round ids, registration, and SLO handling (control.deadline, ROSA section 3.3).

The node calls the on_* methods from its callbacks and `tick(now)` from a timer; tick returns
what to publish. Chunks travel from the server straight to the trajectory controller, so the
client acts on the controller through an ordinary ActionChunk: a *hold chunk* (the current joint
positions, one action). Its round id is chosen so the controller keeps or refuses the awaited
answer as the fallback requires: observations use every second round id (2, 4, 6, ...);
a hold that keeps waiting for round r uses r-1 (r stays newer and is executed when it comes), a
hold that gives round r up uses r+1 (the controller then refuses r as a stale round).
"""
from __future__ import annotations

import dataclasses
import math
import uuid

import numpy as np

from physai_ros.client.registration import robot_registration
from physai_ros.client.round_ledger import RoundLedger
from physai_ros.client.types import ClientCounters, ClientState, ExecutionReport, HoldCommand, TickOutput
from physai_ros.config.robot import RobotConfig
from physai_ros.control.async_trigger import AsyncTrigger
from physai_ros.control.deadline import (ActionKind, DeadlineConfig, DeadlineMonitor,
                                         DeadlineState)
from physai_ros.control.latency import LatencyEstimator
from physai_ros.protocol.chunk import STATUS_OK, STATUS_REFUSED, ActionChunkData
from physai_ros.protocol.observation import ImageData, ObservationData
from physai_ros.protocol.registration import RegistrationResult, RobotRegistration


class RobotClientCore:
    ROUND_STRIDE = 2  # leaves room for a hold chunk on either side of every observation

    def __init__(self, robot: RobotConfig, reregister_period_s: float = 2.0):
        self.robot = robot
        self.task = robot.task
        self.state = ClientState.UNREGISTERED
        self.server_instance = ""
        self.round_id = 0  # highest round id used (observations and hold chunks)
        self.session = uuid.uuid4().hex[:16]  # tells the server a restart from a keep-alive
        slo_s = self.task.slo_ms / 1e3
        self.latency = LatencyEstimator(prior_s=min(0.2, slo_s))
        # The deadline monitor decides about late answers; the trigger's timeout is only a
        # backstop so a lost reply can never block sending for good.
        self.trigger = AsyncTrigger(margin_s=self.task.trigger_margin_s,
                                    request_timeout_s=max(4 * slo_s, 1.0))
        self.deadline = DeadlineMonitor(DeadlineConfig.from_task(self.task))
        self.counters = ClientCounters()
        # Generous: a late answer is still counted (as late); "lost" means never answered.
        self.ledger = RoundLedger(lost_after_s=max(30.0, 10 * slo_s))
        self.reregister_period_s = reregister_period_s
        self._images: list[ImageData | None] = [None] * robot.num_views
        self._image_stamps = [0.0] * robot.num_views
        self._joint_index = {n: i for i, n in enumerate(robot.joints)}
        self._positions: np.ndarray | None = None
        self._wrench = np.zeros(6, dtype=np.float32)
        self._wrench_stamp = 0.0
        self._exec: ExecutionReport | None = None
        # (round, receive time, end of its horizon) of the newest chunk taken for execution; the
        # controller gets it at the same time (both subscribe), before its next report reaches us.
        self._taken: tuple[int, float, float] | None = None
        self._holding = False  # a hold chunk of ours stopped the controller (SLO fallback)
        self._held_round: int | None = None
        self._last_sent_stamp = -math.inf
        self._sent_stamps: dict[int, float] = {}
        self._last_register_at = -math.inf
        self._want_register = True
        self.escalations: list[str] = []
        self._refused: str | None = None  # the last registration's refusal, until one is accepted
        # A task pipeline (client.pipeline) sets these; without one they stay as they are.
        self.prompt: str | None = None  # System 1's prompt for the next observations; None: the task's
        self.pipeline_hold = ""  # while set (the reason), no System 1 round starts
        self.routes: dict[str, str] = {}  # component -> engine instance, from a factory schedule

    # ---- inputs (keep only the newest sample; images are held as the message's buffer) ----

    def on_image(self, view: int, image: ImageData, stamp: float) -> None:
        if 0 <= view < len(self._images):
            self._images[view] = image
            self._image_stamps[view] = stamp

    def on_joint_state(self, names: list[str], positions: list[float]) -> None:
        pos = np.full(len(self.robot.joints), np.nan, dtype=np.float32)
        for n, p in zip(names, positions):
            i = self._joint_index.get(n)
            if i is not None:
                pos[i] = p
        if np.all(np.isfinite(pos)):
            self._positions = pos

    def on_wrench(self, wrench6: np.ndarray, stamp: float) -> None:
        self._wrench = np.asarray(wrench6, dtype=np.float32)
        self._wrench_stamp = stamp

    def on_exec_info(self, now: float, actions_remaining: int, control_period: float,
                     exec_phase_start: float, executing_round_id: int = 0) -> None:
        self._exec = ExecutionReport(now, int(actions_remaining), float(control_period), float(exec_phase_start),
                           int(executing_round_id))

    def ready(self) -> bool:
        return self._positions is not None and all(im is not None for im in self._images)

    @property
    def stopped(self) -> bool:
        return self.state == ClientState.STOPPED

    # ---- registration -----------------------------------------------------------------------

    def registration(self) -> RobotRegistration:
        return robot_registration(self.robot, self.round_id, self.session)

    def on_registered(self, result: RegistrationResult) -> None:
        self._want_register = False
        if not result.accepted:
            if self.state != ClientState.STOPPED:
                self.state = ClientState.UNREGISTERED
            self.counters.refused += 1
            msg = f"registration refused: {result.reason}"
            # A refused robot retries every few seconds (a full server frees places): report a
            # refusal once, not once per retry.
            if not self.escalations or self.escalations[-1] != msg:
                self.escalations.append(msg)
            self._refused = msg
            return
        self._refused = None
        self.counters.registrations += 1
        # A restarted client continues above the rounds the server (and so the controller) has
        # seen from this robot; a live one is at or above them already.
        self.round_id = max(self.round_id, int(result.last_round_id))
        if self.server_instance and result.server_instance != self.server_instance:
            # A new server never saw our request: stop waiting for it and ask again.
            self.counters.server_restarts += 1
            self.trigger.abandon()
            self.ledger.on_server_replaced()
        self.server_instance = result.server_instance
        # The factory schedule's request rate for this robot (ROSA §3.4: a robot asking faster
        # than planned would push its server past the load its SLO was checked at).
        self.trigger.set_rate(float(result.max_request_rate_hz or 0.0))
        self.routes = dict(result.routes)
        if self.state != ClientState.STOPPED:
            self.state = ClientState.RUNNING

    def on_register_failed(self) -> None:
        self._want_register = True

    def on_register_unanswered(self) -> None:
        """An answer that was nobody's (a refusal our server did not sign): the state stays as it
        is and the next registration goes at the regular period, not at once (a rogue service
        answering first would otherwise draw a registration per tick)."""
        self._want_register = False

    # ---- replies ----------------------------------------------------------------------------

    def on_chunk(self, chunk: ActionChunkData, now: float) -> str:
        """A chunk on our action_chunk topic (the controller got it too). Returns the match:
        "answered", "late", "unmatched" or "foreign"."""
        if chunk.robot_id != self.robot.id:
            return "foreign"
        self.ledger.on_answer(chunk.round_id, chunk.status, chunk.error, now)
        match = self.trigger.on_reply(chunk.round_id, now)
        if match == "unmatched":
            return match
        if chunk.status == STATUS_REFUSED:
            self.counters.refused += 1
            self.deadline.on_chunk(chunk.round_id, now)
            if chunk.error.startswith("unknown_robot"):
                self._want_register = True
                if self.state != ClientState.STOPPED:
                    self.state = ClientState.UNREGISTERED
            return match
        if chunk.status != STATUS_OK:
            self.counters.errors += 1
            self.deadline.on_chunk(chunk.round_id, now)
            return match
        verdict = self.deadline.on_chunk(chunk.round_id, now)
        self._apply(verdict.actions, now)
        if verdict.execute:
            self._taken = (int(chunk.round_id), now, chunk.stamp + chunk.horizon * chunk.dt)
            self._holding = False
        lat = now - chunk.stamp
        self.latency.add(lat)
        self.counters.chunks_ok += 1
        self.counters.latencies_s.append(lat)
        del self.counters.latencies_s[:-5000]
        return match

    def fault(self) -> str | None:
        """What an operator must act on, or None; the client's diagnostic is an ERROR with it.
        A robot stopped by its SLO escalation holds and sends nothing until an operator resumes it, and
        one whose registration was refused (capacity, a refused identity) is not served: rate
        warnings alone hid both."""
        if self.state == ClientState.STOPPED:
            last = self.escalations[-1] if self.escalations else "escalated"
            return f"stopped ({last}); operator resume required (physai-fleet operator resume {self.robot.id})"
        if self.state == ClientState.UNREGISTERED and self._refused:
            return self._refused
        return None

    def resume(self) -> None:
        """Operator acknowledgement after an escalation."""
        self.deadline.operator_reset()
        self.trigger.abandon()
        if self.state == ClientState.STOPPED:
            self.state = ClientState.RUNNING if self.server_instance else ClientState.UNREGISTERED

    # ---- the periodic decision --------------------------------------------------------------

    def _actions_remaining(self, now: float) -> tuple[int, float]:
        if self._exec is None:
            return 0, self.task.action_period_s
        period = self._exec.control_period if self._exec.control_period > 0 else self.task.action_period_s
        elapsed = max(0.0, now - self._exec.received)
        left = self._exec.actions_remaining - int(elapsed / period)
        return max(0, left), period

    def tick(self, now: float, link_up: bool = True) -> TickOutput:
        out = TickOutput()
        if self._want_register or now - self._last_register_at >= self.reregister_period_s:
            self._last_register_at = now
            out.register = True
        if not self.ready():
            return out
        resend = self._apply(self.deadline.check(now), now, out)
        if self.state != ClientState.RUNNING or not link_up or self.pipeline_hold:
            return out
        if max(self._image_stamps) <= self._last_sent_stamp:
            return out  # no frame since the last observation: resending it would be stale
        remaining, period = self._actions_remaining(now)
        decision = self.trigger.decide(now, remaining, period, self.latency.estimate())
        if resend or decision.send:
            out.observation = self._observation(now, remaining, period)
        return out

    def _apply(self, actions, now: float, out: TickOutput | None = None) -> bool:
        """Carry out the deadline monitor's actions; returns whether to resend now."""
        resend = False
        for a in actions:
            if a.kind is ActionKind.HOLD:
                give_up = (self.task.fallback == "stop_and_resend"
                           or self.deadline.state is DeadlineState.STOPPED)
                hold = self._hold(a.round_id, give_up, a.detail, now)
                if hold is not None and out is not None:
                    out.hold = hold
                    self._holding = True  # the controller stops: no chunk executes until the next
            elif a.kind is ActionKind.RESEND:
                self.trigger.abandon()
                resend = True
            elif a.kind is ActionKind.ESCALATE:
                self.state = ClientState.STOPPED
                self.trigger.abandon()
                self.escalations.append(a.detail)
            self.counters.fallbacks[a.kind.value] = self.counters.fallbacks.get(a.kind.value, 0) + 1
        self.counters.slo_misses = self.deadline.total_misses
        self.counters.slo_startup_misses = self.deadline.startup_misses
        if self.deadline.state is DeadlineState.STOPPED:
            self.state = ClientState.STOPPED
        return resend and self.state == ClientState.RUNNING

    def _hold(self, awaited: int, give_up: bool, reason: str, now: float) -> HoldCommand | None:
        if give_up:
            rid = awaited + 1
            self.round_id = max(self.round_id, rid)
            # The resend uses a frame at least this new, so its chunk is never "older".
            capture = max(self._image_stamps)
        else:
            rid = awaited - 1
            if self._held_round == awaited:
                return None  # already holding for this request
            self._held_round = awaited
            capture = self._sent_stamps.get(awaited, max(self._image_stamps))
        if self._positions is None:
            return None
        dt = self.task.action_period_s
        span = max(0.0, now - capture) + self.task.slo_ms / 1e3
        n = int(min(max(1, math.ceil(span / dt) + 1), max(1, 20.0 / dt)))
        return HoldCommand(rid, self._positions.copy(), reason, capture, dt, n)

    # ---- a task pipeline's holds (client.pipeline) ---------------------------------

    def hold_for_pipeline(self, reason: str, now: float) -> HoldCommand | None:
        """Stop the robot for a pipeline hold source: no System 1 round starts until
        `release_pipeline_hold`, the awaited one is given up without counting an SLO miss, and a
        give-up hold chunk (the stop path of stop_and_resend) stops the controller, dropping its
        buffered plan and refusing every round up to the hold's."""
        self.pipeline_hold = reason or "pipeline hold"
        self.trigger.abandon()
        self.deadline.abandon()
        hold = self._hold(self.round_id, True, reason, now)
        if hold is not None:
            self._holding = True
        return hold

    def release_pipeline_hold(self) -> None:
        self.pipeline_hold = ""

    @property
    def taken_round(self) -> int:
        """The round of the newest chunk taken for execution (0 before any)."""
        return self._taken[0] if self._taken is not None else 0

    def latest_inputs(self) -> tuple[tuple[ImageData, ...], np.ndarray] | None:
        """The newest frame of every view and joint positions (None until every one arrived)."""
        if not self.ready():
            return None
        return tuple(self._images), self._positions.copy()

    def refresh(self, round_id: int, now: float) -> ObservationData | None:
        """The server asks for a fresher observation of a queued round (Kairos stale refetch)."""
        out = self.trigger.outstanding
        if out is None or out.round_id != round_id or not self.ready() or self.stopped or self.pipeline_hold:
            return None
        remaining, period = self._actions_remaining(now)
        obs = self._build(round_id, remaining, period)
        self._last_sent_stamp = obs.stamp
        self.deadline.on_request(round_id, obs.stamp)
        return dataclasses.replace(obs, refresh=True)

    def _executing(self, remaining: int, period: float) -> tuple[int, float, int]:
        """(executing round, its phase start, actions remaining) for an observation. The
        controller's report lags: a chunk taken since its last report is what it executes (its
        first node is committed when it arrives, and its horizon is what remains), which
        real-time chunking needs to know (docs/rtc.md); while our hold stopped
        the controller, nothing executes (round 0), whatever its last committed round was. Tasks
        without rtc send the controller's report as it is."""
        ex = self._exec
        if self.task.chunk_merge.rtc and self._holding:
            return 0, 0.0, remaining
        rid, start = (ex.executing_round_id, ex.exec_phase_start) if ex else (0, 0.0)
        taken = self._taken
        # The report names the newest *committed* node's round, so it lags the chunk by up to a
        # buffer grid tick plus a report period; a taken chunk still inside its horizon is not
        # refused (the controller refuses only past-due, stale or malformed ones).
        if (self.task.chunk_merge.rtc and taken is not None and taken[0] > rid and taken[2] > taken[1]):
            left = math.ceil((taken[2] - taken[1]) / period - 1e-9) if period > 0 else remaining
            return taken[0], taken[1], max(remaining, left)
        return rid, start, remaining

    def _build(self, round_id: int, remaining: int, period: float) -> ObservationData:
        executing, phase_start, remaining = self._executing(remaining, period)
        return ObservationData(
            robot_id=self.robot.id, task_id=self.task.name, round_id=round_id,
            stamp=max(self._image_stamps), images=tuple(self._images), state=self._positions.copy(),
            wrench=self._wrench.copy(), wrench_stamp=self._wrench_stamp,
            prompt=self.prompt if self.prompt is not None else self.task.prompt,
            exec_phase_start=phase_start, actions_remaining=remaining,
            control_period=period if period > 0 else self.task.action_period_s,
            horizon_policy=self.task.horizon_policy, horizon_params=self.task.horizon_params,
            executing_round_id=executing)

    def _observation(self, now: float, remaining: int, period: float) -> ObservationData:
        # Next even id above everything used, so r-1 and r+1 stay free for hold chunks.
        self.round_id = (self.round_id // self.ROUND_STRIDE + 1) * self.ROUND_STRIDE
        obs = self._build(self.round_id, remaining, period)
        self._last_sent_stamp = obs.stamp
        self._sent_stamps[self.round_id] = obs.stamp
        if len(self._sent_stamps) > 64:
            del self._sent_stamps[min(self._sent_stamps)]
        self.trigger.on_sent(self.round_id, now)
        self.deadline.on_request(self.round_id, obs.stamp)
        self.ledger.on_sent(self.round_id, now)  # counts the rounds sent
        return obs
