"""The policy server's logic without ROS: registration, validation, queue, scheduling, batching,
engine calls, horizon policy and post-processing.

The node feeds it plain data (ServingCore.register / submit) from its ROS callbacks; its
serving.runner threads call dispatch (the scheduler's batches for idle instances) and run_batch
(one per instance thread, so instances compute concurrently), which returns the chunks to
publish. step() does both in one call. All public methods take the lock where they touch shared
state, so callbacks and the threads may interleave freely; engines run outside it.
"""
from __future__ import annotations

import dataclasses
import itertools
import threading
import time
import uuid
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import torch

from physai_ros.scheduler.types import (Batch, EngineInstanceInfo, LatencyProfile, Request,
                                        SchedulerDecision)

from .fault_injection import FaultPlan
from .postprocess import decide_horizon
from .preprocess import Normalizer, image_to_rgb, to_model_image
from .tokenizer import PromptTokenizer
from .types import (STATUS_ERROR, STATUS_OK, STATUS_REFUSED, ChunkResult, ObservationData,
                    RegistrationResult, RobotRegistration)
from .validation import UNKNOWN_ROBOT, ModelLimits, ObservationValidator, Refusal, check_registration

# Registration refusal when the server is full (ROSA 3.4.4 admission control).
CAPACITY = "capacity"
# A request whose instance was lost (worker gone) is re-dispatched at most this many times.
MAX_DISPATCH_ATTEMPTS = 3


@dataclass
class EngineSlot:
    """One engine instance behind the scheduler.

    A remote engine (physai_ros.workers.remote.RemoteEngine) also has .alive, .profile, .tier,
    .max_batch and .network_rtt_s from its worker's advertisement; those override the slot's
    own values, and a slot whose engine is not alive gets no work.
    """

    instance_id: str
    engine: Any  # has .config (Pi0Config) and .infer(list[EngineInput]) -> list[EngineOutput]
    max_batch: int
    profile: LatencyProfile
    tier: str = "edge"
    busy_until: float = 0.0
    running: bool = False  # a batch is executing on it right now
    # Hot standby (ROSA 3.4.4): warm and loaded, but serves only while an active instance is
    # down, so the schedule of the healthy fleet never changes because of it.
    standby: bool = False
    failed: str = ""  # why this (local) instance is out of service for good; "" while usable
    batches: int = 0  # batches run_batch started on it
    fault: FaultPlan | None = None  # test hook (serving.fault_injection); None in production


@dataclass(frozen=True)
class BatchWork:
    """One dispatched batch: the requests the scheduler put on one instance at `dispatched`."""

    batch: Batch
    requests: list[Request]
    dispatched: float

    @property
    def instance_id(self) -> str:
        return self.batch.instance_id


@dataclass(frozen=True)
class Dispatch:
    work: list[BatchWork]
    refresh: list[tuple[str, int]]


@dataclass
class UnregisteredStats:
    """Everything refused from robots that hold no registration, in one bounded record."""

    refused: Counter = field(default_factory=Counter)  # reason -> count (observations)
    registrations_refused: Counter = field(default_factory=Counter)  # reason -> count
    recent_ids: deque = field(default_factory=lambda: deque(maxlen=8))  # newest claimed ids

    def note(self, robot_id: str) -> None:
        rid = robot_id if len(robot_id) <= 64 else robot_id[:64] + "..."
        if rid in self.recent_ids:
            self.recent_ids.remove(rid)
        self.recent_ids.append(rid)


@dataclass
class RobotStats:
    rounds: int = 0
    errors: int = 0
    queue_ms: list[float] = field(default_factory=list)
    inference_ms: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class StepOutput:
    chunks: list[ChunkResult]
    # (robot_id, round_id) the server asks to resend a fresh observation for.
    refresh: list[tuple[str, int]]


# While a batch runs its instance must look busy even past the scheduler's estimate, or a slow
# batch would get a second one stacked on the same engine.
RUNNING_MARGIN_S = 1e-3


def default_profile(max_batch: int) -> LatencyProfile:
    # Before measuring, assume batching is free up to the engine's limit so the scheduler fills
    # batches (profiles from bench measurements replace this).
    sizes = tuple(range(1, max_batch + 1)) if max_batch > 1 else (1,)
    return LatencyProfile(sizes, tuple(0.05 for _ in sizes))


class ServingCore:
    def __init__(self, engines: Sequence[EngineSlot], scheduler: Any, tokenizer: PromptTokenizer,
                 normalizer: Normalizer | None = None, max_observation_age_s: float = 2.0,
                 instance_id: str | None = None, clock: Callable[[], float] = time.time,
                 allowed_horizon_policies: Sequence[str] = (), max_robots: int | None = None,
                 robot_idle_release_s: float = 10.0):
        """allowed_horizon_policies: the `package.module:Class` policies a robot may name (the
        ones fleet.yaml's tasks configure); any other class name is refused, never imported.
        max_robots: robots registered at once (None: no limit); a new robot beyond it is
        refused with reason `capacity` unless a registered robot has been silent (no
        observation, no registration) for robot_idle_release_s, which then gives its place up."""
        if not engines:
            raise ValueError("ServingCore needs at least one engine instance")
        if all(e.standby for e in engines):
            raise ValueError("ServingCore needs at least one engine instance that is not a standby")
        if max_robots is not None and max_robots < 1:
            raise ValueError(f"max_robots must be >= 1 or None, got {max_robots}")
        self.engines = {e.instance_id: e for e in engines}
        self._n_active = sum(not e.standby for e in engines)
        self._promoted: set[str] = set()  # standby instances serving right now
        self._orphans: list[Request] = []  # dispatched to an instance that was lost: run again
        self._attempts: dict[str, int] = {}  # request_id -> dispatches so far (re-dispatched only)
        self.events: deque[str] = deque(maxlen=32)  # instance failures and takeovers, newest last
        self.failover = Counter()  # takeovers, instance_failures, redispatched, redispatch_exhausted
        self.max_robots = max_robots
        self.robot_idle_release_s = robot_idle_release_s
        self.admission = Counter()  # admitted, refused_capacity, released_idle
        self._last_seen: dict[str, float] = {}  # registered robot -> last registration/observation
        # Refusals for accepted requests dropped outside submit (a restarted robot's queued round):
        # every accepted round gets an answer. Drained by take_notices() and submit().
        self._notices: deque[ChunkResult] = deque(maxlen=1024)
        self.unregistered = UnregisteredStats()
        cfg = engines[0].engine.config
        self.model_config = cfg
        self.limits = ModelLimits(cfg.max_views, cfg.max_state_dim, cfg.max_action_dim)
        self.image_size = cfg.vision.image_size
        self.scheduler = scheduler
        self.tokenizer = tokenizer
        if tokenizer.max_len > cfg.max_tokens or tokenizer.vocab_size > cfg.vocab_size:
            raise ValueError(
                f"tokenizer ({tokenizer.vocab_size} ids, {tokenizer.max_len} tokens) does not fit the "
                f"model (vocab {cfg.vocab_size}, max_tokens {cfg.max_tokens})")
        self.normalizer = normalizer or Normalizer()
        self.validator = ObservationValidator(max_observation_age_s,
                                              allowed_policies=frozenset(allowed_horizon_policies))
        self.instance_id = instance_id or uuid.uuid4().hex[:12]
        self.clock = clock
        self.registrations: dict[str, RobotRegistration] = {}
        self.stats: dict[str, RobotStats] = {}
        # Registration refusals by reason (not by robot id: ids are whatever senders claim).
        self.registration_refusals: Counter[str] = Counter()
        self._pending: dict[str, Request] = {}
        self._last_task: dict[str, str] = {}  # robot_id -> task_id of its newest observation
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)

    def warm_up(self, views: int = 1) -> float:
        """One inference per engine instance on a blank input, so the first robot's first round
        does not pay for lazy initialisation (and miss its SLO). Returns the slowest, seconds."""
        from physai_ros.engine.types import EngineInput

        cfg, s = self.model_config, self.image_size
        blank = EngineInput(
            images=torch.zeros(views, 3, s, s), image_masks=torch.ones(views, dtype=torch.bool),
            tokens=torch.zeros(self.tokenizer.max_len, dtype=torch.int64),
            token_mask=torch.ones(self.tokenizer.max_len, dtype=torch.bool),
            state=torch.zeros(cfg.max_state_dim))
        worst = 0.0
        for slot in self.engines.values():
            if hasattr(slot.engine, "alive"):
                continue  # an engine_worker warms itself up while measuring its profile
            t0 = time.perf_counter()
            with torch.inference_mode():
                slot.engine.infer([blank])
            worst = max(worst, time.perf_counter() - t0)
        return worst

    # ---- robot-facing entry points -------------------------------------------------------

    def register(self, reg: RobotRegistration) -> RegistrationResult:
        with self._lock:
            now = self.clock()
            bad = check_registration(reg, self.limits)
            if bad is None and reg.robot_id not in self.registrations:
                bad = self._admit(now)
            if bad is not None:
                self.registration_refusals[bad.reason] += 1
                if reg.robot_id not in self.registrations:
                    self.unregistered.registrations_refused[bad.reason] += 1
                    self.unregistered.note(reg.robot_id)
                return RegistrationResult(False, str(bad), self.instance_id)
            self._last_seen[reg.robot_id] = now
            old = self.registrations.get(reg.robot_id)
            if old is not None and self._starts_over(old, reg):
                # Its previous task's round history no longer describes what it will do next.
                self._finish_task(reg.robot_id, old.task_id, "the robot registered anew (restart or new setup)")
            self.registrations[reg.robot_id] = reg
            self.stats.setdefault(reg.robot_id, RobotStats())
            # Continue above the robot's own history: its round ids survive server restarts.
            # last_round_id may be the round the robot has just sent and that is still on its
            # way here (the keep-alive overtook it): that one round is still accepted, once.
            prev = self.validator.last_round.get(reg.robot_id, 0)
            self.validator.reset_robot(reg.robot_id, max(prev, reg.last_round_id - 1))
            self.tokenizer.encode(reg.prompt)  # warm the cache off the hot path
            return RegistrationResult(True, "", self.instance_id, self.validator.last_round[reg.robot_id])

    def _starts_over(self, old: RobotRegistration, reg: RobotRegistration) -> bool:
        """Whether a registered robot's new registration begins a new task history: a restarted
        client (another session) or another task or setup. A live client re-registers every few
        seconds as a keep-alive, and under load that call can arrive after observations it sent
        later (its last_round_id is then behind ours): that must not drop its queued request
        (seen in a 16-robot soak as a round never answered)."""
        if dataclasses.replace(old, last_round_id=0) != dataclasses.replace(reg, last_round_id=0):
            return True
        # A client that does not name its session: only its round ids going back tell a restart.
        return not reg.client_session and reg.last_round_id < self.validator.last_round.get(reg.robot_id, 0)

    def take_notices(self) -> list[ChunkResult]:
        """Refusals for accepted requests that were dropped (see _finish_task), to publish."""
        with self._lock:
            return self._drain_notices()

    def _drain_notices(self) -> list[ChunkResult]:
        out = list(self._notices)  # under the lock
        self._notices.clear()
        return out

    def _admit(self, now: float) -> Refusal | None:
        """Room for one more robot? (ROSA 3.4.4: refuse a robot rather than degrade everyone.)
        The capacity is the configured server.max_robots; robots silent for longer than
        robot_idle_release_s (dead clients: a live one re-registers every few seconds) give
        their places up first."""
        if self.max_robots is None:
            self.admission["admitted"] += 1
            return None
        if len(self.registrations) >= self.max_robots:
            self._release_idle(now)
        if len(self.registrations) >= self.max_robots:
            self.admission["refused_capacity"] += 1
            return Refusal(CAPACITY, f"{len(self.registrations)} robots registered, server.max_robots="
                                     f"{self.max_robots}; retry later")
        self.admission["admitted"] += 1
        return None

    def _release_idle(self, now: float) -> None:
        busy = {r.robot_id for r in self._pending.values()} | {r.robot_id for r in self._orphans}
        for rid in [r for r, t in self._last_seen.items()
                    if now - t > self.robot_idle_release_s and r not in busy]:
            self.release(rid, _locked=True)
            self.admission["released_idle"] += 1

    def release_idle(self, timeout_s: float, now: float | None = None) -> list[str]:
        """Free every robot silent (no observation, no registration) for longer than timeout_s
        (server.robot_timeout_s: link cut, client dead) whether or not a new robot needs its
        place; the policy server calls this periodically. A robot that comes back registers
        again (its client does so by itself) and continues above its own round ids. A robot
        with a request queued or being re-dispatched is not silent. Returns the robots freed."""
        now = self.clock() if now is None else now
        with self._lock:
            busy = {r.robot_id for r in self._pending.values()} | {r.robot_id for r in self._orphans}
            gone = sorted(r for r, t in self._last_seen.items() if now - t > timeout_s and r not in busy)
            for rid in gone:
                self.release(rid, _locked=True)
                self.admission["released_timeout"] += 1
            return gone

    def release(self, robot_id: str, _locked: bool = False) -> bool:
        """Forget a robot: registration, history, counters. Returns whether it was registered."""
        if not _locked:
            with self._lock:
                return self.release(robot_id, _locked=True)
        reg = self.registrations.pop(robot_id, None)
        if reg is None:
            return False
        self._finish_task(robot_id, reg.task_id, "the robot was released")
        for table in (self.stats, self._last_seen, self.validator.last_round, self.validator.refused,
                      self.validator.accepted):
            table.pop(robot_id, None)
        self.events.append(f"released robot {robot_id!r}")
        return True

    def submit(self, obs: ObservationData, now: float | None = None) -> list[ChunkResult]:
        """Queue a valid observation. Returns the chunks to publish at once: a REFUSED chunk for
        a bad observation, and for requests this one superseded (an older queued round or the
        previous task's)."""
        now = self.clock() if now is None else now
        with self._lock:
            reg = self.registrations.get(obs.robot_id)
            if reg is None:
                # Counted in one aggregate: the validator would keep a table per claimed id.
                self.unregistered.refused[UNKNOWN_ROBOT] += 1
                self.unregistered.note(obs.robot_id)
                return [self._refused(obs, None, Refusal(
                    UNKNOWN_ROBOT, f"robot {obs.robot_id[:64]!r} is not registered"))]
            self._last_seen[obs.robot_id] = now
            refusal = self.validator.check(obs, reg, now)
            notices: list[ChunkResult] = []
            if refusal is None:
                refusal = self._enqueue(obs, now, notices)
            if refusal is not None:
                return [self._refused(obs, reg, refusal)]
            self._work.notify_all()
            return notices + self._drain_notices()

    def _finish_task(self, robot_id: str, task_id: str, why: str) -> None:
        key = f"{robot_id}/{task_id}"
        self.scheduler.on_task_finished(key)
        # The scheduler dropped the task's queued request; kept here it would never be
        # dispatched, and keep the dispatcher awake and the robot "busy" (never released).
        # It was accepted, so it is answered (refused) rather than left without an answer.
        for rid in [r for r, q in self._pending.items() if q.task_id == key]:
            req = self._pending.pop(rid)
            self._notices.append(self._refused(req.payload, self.registrations.get(robot_id),
                                               Refusal("superseded", why)))
        self._last_task.pop(robot_id, None)

    def _enqueue(self, obs: ObservationData, now: float, notices: list[ChunkResult]) -> Refusal | None:
        prev = self._last_task.get(obs.robot_id)
        if prev is not None and prev != obs.task_id:
            self._finish_task(obs.robot_id, prev, f"the robot switched to task {obs.task_id!r}")
        self._last_task[obs.robot_id] = obs.task_id
        req = Request(
            request_id=f"{obs.robot_id}#{obs.round_id}#{next(self._ids)}",
            # The scheduler's "task" is one robot's task (its rounds and history), so the key
            # must be per robot: two robots running the same fleet.yaml task are two tasks.
            robot_id=obs.robot_id, task_id=f"{obs.robot_id}/{obs.task_id}", round_id=obs.round_id,
            arrival_time=now, obs_capture_time=obs.stamp,
            exec_phase_start=obs.exec_phase_start if obs.exec_phase_start > 0 else None,
            actions_remaining=obs.actions_remaining, control_period=obs.control_period,
            refresh=obs.refresh, payload=obs)
        res = self.scheduler.submit(req, now)
        if not res.accepted:
            return self.validator.count(obs.robot_id, Refusal("scheduler", res.reason))
        for rid in res.superseded:
            old = self._pending.pop(rid, None)
            if old is not None and old.round_id != obs.round_id:
                notices.append(self._refused(old.payload, self.registrations.get(obs.robot_id),
                                             Refusal("superseded", f"round {obs.round_id} replaced it")))
        self._pending[req.request_id] = req
        return None

    def _refused(self, obs: ObservationData, reg: RobotRegistration | None, r: Refusal) -> ChunkResult:
        return ChunkResult(robot_id=obs.robot_id, task_id=obs.task_id, round_id=obs.round_id,
                           stamp=obs.stamp, status=STATUS_REFUSED, error=str(r),
                           joint_names=reg.joint_names if reg else ())

    def pending(self) -> int:
        with self._lock:
            return len(self._pending)

    def wait_for_work(self, timeout: float) -> bool:
        """Block until a request is queued and an instance is free to take it (or `timeout`)."""
        with self._lock:
            if not self._dispatchable():
                self._work.wait(timeout)
            return self._dispatchable()

    def wait_for_change(self, timeout: float) -> None:
        """Block until a submit or a finished batch (or `timeout`): the next scheduling chance."""
        with self._lock:
            self._work.wait(timeout)

    def _dispatchable(self) -> bool:
        return bool(self._pending or self._orphans) and any(
            not e.running for e in self._serving_slots())

    # ---- engine instances: failures and hot standby ------------------------------------

    @staticmethod
    def _usable(e: EngineSlot) -> bool:
        return not e.failed and bool(getattr(e.engine, "alive", True))

    def _serving_slots(self) -> list[EngineSlot]:
        """The instances that take work now: every usable active one, plus as many usable
        standbys as active ones are down. A standby steps back when the instance it replaced
        returns (a remote worker that came back); a failed local instance never returns."""
        live = [e for e in self.engines.values() if self._usable(e)]
        active = [e for e in live if not e.standby]
        spare = [e for e in live if e.standby][:max(0, self._n_active - len(active))]
        ids = {e.instance_id for e in spare}
        for iid in sorted(ids - self._promoted):
            down = [f"{e.instance_id} ({e.failed or getattr(e.engine, 'why_not_alive', lambda: '')()})"
                    for e in self.engines.values() if not e.standby and not self._usable(e)]
            self.failover["takeovers"] += 1
            self.events.append(f"standby {iid} takes over for {', '.join(down) or 'a lost instance'}")
        for iid in sorted(self._promoted - ids):
            self.events.append(f"standby {iid} steps back")
        self._promoted = ids
        return active + spare

    def instance_failed(self, instance_id: str, why: str) -> None:
        """A local instance is out of service for good (its thread died): no more work for it."""
        with self._lock:
            slot = self.engines[instance_id]
            if not slot.failed:
                slot.failed = why or "failed"
                slot.running = False
                self.failover["instance_failures"] += 1
                self.events.append(f"instance {instance_id} failed: {slot.failed}")
            self._work.notify_all()

    def requeue(self, work: BatchWork) -> None:
        """Work handed to an instance that never ran it (lost with the instance): run it again
        on another one. The scheduler still counts it in flight until it completes there."""
        with self._lock:
            self._orphans.extend(work.requests)
            self.failover["redispatched"] += len(work.requests)
            self._work.notify_all()

    def _redispatch(self, serving: list[EngineSlot], now: float) -> list[BatchWork]:
        # Under the lock. Lost work goes first: it has waited longest.
        work = []
        for slot in serving:
            if not self._orphans:
                break
            if slot.running:
                continue
            info = self._instance_info(slot, now)
            n = max(1, info.max_batch or len(self._orphans))
            reqs, self._orphans = self._orphans[:n], self._orphans[n:]
            batch = Batch(slot.instance_id, tuple(r.request_id for r in reqs), info.service_time(len(reqs)))
            slot.running = True
            slot.busy_until = now + batch.est_latency_s
            work.append(BatchWork(batch, reqs, now))
        return work

    # ---- worker --------------------------------------------------------------------------

    def dispatch(self, now: float | None = None) -> Dispatch:
        """One scheduling cycle: take the batches the scheduler places on idle instances now.

        Each instance is marked running until run_batch finishes it, so several instances can
        execute at once (each from its own thread) and none ever gets two batches at a time."""
        now = self.clock() if now is None else now
        with self._lock:
            serving = self._serving_slots()
            work = self._redispatch(serving, now)
            infos = [self._instance_info(e, now) for e in serving]
            decision: SchedulerDecision = self.scheduler.schedule(now, infos)
            for batch in decision.batches:
                reqs = [self._pending.pop(r) for r in batch.request_ids if r in self._pending]
                if reqs:
                    self.scheduler.on_dispatched(batch, now)
                    slot = self.engines[batch.instance_id]
                    slot.running = True
                    slot.busy_until = now + batch.est_latency_s
                    work.append(BatchWork(batch, reqs, now))
            refresh = [(self._pending[r].robot_id, self._pending[r].round_id)
                       for r in decision.refresh_request_ids if r in self._pending]
        return Dispatch(work, refresh)

    def step(self, now: float | None = None) -> StepOutput:
        """One scheduling cycle run to completion: every dispatched batch, each on its own
        instance concurrently, chunks in dispatch order. (The policy server instead hands
        dispatch()'s batches to one long-lived thread per instance: serving.runner.)"""
        d = self.dispatch(now)
        results: list[list[ChunkResult]] = [[] for _ in d.work]

        def run(k: int) -> None:
            results[k] = self.run_batch(d.work[k])

        threads = [threading.Thread(target=run, args=(k,), daemon=True) for k in range(1, len(d.work))]
        for t in threads:
            t.start()
        if d.work:
            run(0)
        for t in threads:
            t.join()
        return StepOutput([c for r in results for c in r], d.refresh)

    def _instance_info(self, e: EngineSlot, now: float) -> EngineInstanceInfo:
        eng = e.engine
        advertised = getattr(eng, "max_batch", None)
        busy = max(e.busy_until, now + RUNNING_MARGIN_S) if e.running else e.busy_until
        return EngineInstanceInfo(
            e.instance_id, getattr(eng, "tier", None) or e.tier,
            getattr(eng, "profile", None) or e.profile, float(getattr(eng, "network_rtt_s", 0.0)),
            busy, min(e.max_batch, advertised) if advertised else e.max_batch)

    def run_batch(self, work: BatchWork) -> list[ChunkResult]:
        """Execute one dispatched batch on its instance. A failing engine never makes this
        raise: the batch's requests get ERROR chunks and the instance serves on. Two cases
        are the instance's fault, not the batch's, and the requests run again elsewhere: an
        engine error marked `instance_lost` (a remote worker that is gone), and a fatal
        BaseException (the instance is dead; it is re-raised so its thread ends with it)."""
        batch, reqs, dispatched = work.batch, work.requests, work.dispatched
        slot = self.engines[batch.instance_id]
        from physai_ros.engine.types import EngineInput  # engine import is heavy; keep it lazy

        inputs, ok_reqs, out, outputs, lost = [], [], [], [], []
        fatal: BaseException | None = None
        lost_why = ""
        t0 = t1 = self.clock()
        with self._lock:
            slot.batches += 1
            batch_no = slot.batches
        try:
            for req in reqs:
                try:
                    inputs.append(self._engine_input(req.payload, EngineInput))
                    ok_reqs.append(req)
                except (ValueError, KeyError) as e:
                    out.append(self._error(req, f"preprocessing failed: {e}", slot))
            t0 = self.clock()
            if inputs:
                try:
                    if slot.fault is not None:
                        slot.fault.before_batch(slot.instance_id, batch_no)
                    with torch.inference_mode():
                        outputs = slot.engine.infer(inputs)
                except Exception as e:  # one bad batch must not take the server down
                    msg = f"engine failed: {type(e).__name__}: {e}"
                    if getattr(e, "instance_lost", False):
                        lost, lost_why = ok_reqs, msg
                    else:
                        out.extend(self._error(r, msg, slot) for r in ok_reqs)
                    ok_reqs = []
                except BaseException as e:  # the instance itself is gone
                    fatal, lost, lost_why, ok_reqs = e, ok_reqs, f"{type(e).__name__}: {e}", []
                    raise
            t1 = self.clock()
        finally:
            # Whatever happened, the instance is free again and the scheduler hears about it.
            inference_ms = (t1 - t0) * 1e3
            with self._lock:
                slot.running = False
                slot.busy_until = t1
                if fatal is not None and not slot.failed:
                    slot.failed = lost_why
                    self.failover["instance_failures"] += 1
                    self.events.append(f"instance {slot.instance_id} failed: {lost_why}")
                again = self._retry_lost(lost, slot, lost_why, out, limit=fatal is None)
                for req, eo in zip(ok_reqs, outputs):
                    out.append(self._postprocess(req, eo, slot, (dispatched - req.arrival_time) * 1e3,
                                                 inference_ms))
                for req in reqs:
                    if req.request_id not in again:
                        self._attempts.pop(req.request_id, None)
                        self.scheduler.on_completed(req.request_id, t1, (t1 - t0))
                self._work.notify_all()
        return out

    def _retry_lost(self, lost: list[Request], slot: EngineSlot, why: str, out: list[ChunkResult],
                    limit: bool) -> set[str]:
        """Queue requests lost with their instance for another one (under the lock). With
        `limit`, a request that was lost MAX_DISPATCH_ATTEMPTS times gets an ERROR chunk instead
        (a worker that keeps vanishing must not bounce a request forever). Returns the ids
        queued again."""
        again = set()
        for req in lost:
            n = self._attempts.get(req.request_id, 1)
            if limit and n >= MAX_DISPATCH_ATTEMPTS:
                self.failover["redispatch_exhausted"] += 1
                out.append(self._error(req, f"{why} (after {n} instances)", slot))
                continue
            self._attempts[req.request_id] = n + 1
            self._orphans.append(req)
            again.add(req.request_id)
        self.failover["redispatched"] += len(again)
        return again

    def _engine_input(self, obs: ObservationData, engine_input_cls) -> Any:
        reg = self.registrations[obs.robot_id]
        s = self.image_size
        imgs = np.empty((len(obs.images), 3, s, s), dtype=np.float32)
        for i, im in enumerate(obs.images):
            to_model_image(image_to_rgb(im.array(), im.encoding), s, out=imgs[i])
        enc = self.tokenizer.encode(obs.prompt or reg.prompt)
        state = self.normalizer.normalize_state(obs.state, self.limits.max_state_dim)
        return engine_input_cls(
            images=torch.from_numpy(imgs), image_masks=torch.ones(len(obs.images), dtype=torch.bool),
            tokens=torch.from_numpy(enc.tokens), token_mask=torch.from_numpy(enc.mask),
            state=torch.from_numpy(state))

    def _postprocess(self, req: Request, eo: Any, slot: EngineSlot, queue_ms: float,
                     inference_ms: float) -> ChunkResult:
        obs: ObservationData = req.payload
        reg = self.registrations.get(obs.robot_id)
        if reg is None:
            return self._error(req, "robot unregistered while its request ran", slot)
        actions = self.normalizer.unnormalize_actions(eo.actions.detach().float().cpu().numpy(), reg.action_dim)
        updates = eo.updates.detach().float().cpu().numpy()
        name = obs.horizon_policy or "static"
        params = tuple(obs.horizon_params) if obs.horizon_policy else (actions.shape[0],)
        try:
            decision = decide_horizon(name, params, updates, reg.action_dim)
        except Exception as e:  # a user-supplied policy failing is that robot's problem only
            return self._error(req, f"horizon policy {name!r} failed: {e}", slot)
        st = self.stats.setdefault(obs.robot_id, RobotStats())
        st.rounds += 1
        st.queue_ms.append(queue_ms)
        st.inference_ms.append(inference_ms)
        del st.queue_ms[:-1000], st.inference_ms[:-1000]
        return ChunkResult(
            robot_id=obs.robot_id, task_id=obs.task_id, round_id=obs.round_id, stamp=obs.stamp,
            status=STATUS_OK, joint_names=reg.joint_names, dt=reg.control_period,
            actions=actions, horizon=int(decision.horizon),
            confidence=np.asarray(decision.confidence, dtype=np.float32),
            queue_ms=queue_ms, inference_ms=inference_ms, engine_instance=slot.instance_id)

    def _error(self, req: Request, msg: str, slot: EngineSlot) -> ChunkResult:
        obs: ObservationData = req.payload
        self.stats.setdefault(obs.robot_id, RobotStats()).errors += 1
        reg = self.registrations.get(obs.robot_id)
        return ChunkResult(robot_id=obs.robot_id, task_id=obs.task_id, round_id=obs.round_id,
                           stamp=obs.stamp, status=STATUS_ERROR, error=msg,
                           joint_names=reg.joint_names if reg else (), engine_instance=slot.instance_id)

    # ---- reporting -----------------------------------------------------------------------

    def engine_diagnostics(self) -> dict[str, dict[str, Any]]:
        """Per engine instance: liveness and what its worker advertises (remote ones)."""
        with self._lock:
            slots = list(self.engines.values())
        out = {}
        for e in slots:
            diag = getattr(e.engine, "diagnostics", None)
            d = dict(diag()) if callable(diag) else {"alive": True}
            info = self._instance_info(e, self.clock())
            d.update(tier=info.tier, max_batch=info.max_batch,
                     profile=info.profile.to_pairs(), remote=callable(diag))
            if e.failed:
                d.update(alive=False, why_not_alive=e.failed)
            with self._lock:
                serving = e.instance_id in {s.instance_id for s in self._serving_slots()}
            d.update(standby=e.standby, serving=serving, failed=e.failed, batches=e.batches)
            out[e.instance_id] = d
        return out

    def failover_diagnostics(self) -> dict[str, Any]:
        """Admission, failover and unregistered-sender counters (server-wide, bounded)."""
        with self._lock:
            u = self.unregistered
            return {
                "max_robots": self.max_robots if self.max_robots is not None else "unlimited",
                "registered_robots": len(self.registrations),
                **{f"admission.{k}": v for k, v in sorted(self.admission.items())},
                **{f"failover.{k}": v for k, v in sorted(self.failover.items())},
                "standby_serving": ",".join(sorted(self._promoted)),
                "failed_instances": ",".join(sorted(i for i, e in self.engines.items() if e.failed)),
                "orphaned_requests": len(self._orphans),
                "last_event": self.events[-1] if self.events else "",
                **{f"unregistered.refused.{k}": v for k, v in sorted(u.refused.items())},
                **{f"unregistered.registration.{k}": v for k, v in sorted(u.registrations_refused.items())},
                "unregistered.recent_ids": ",".join(u.recent_ids),
            }

    def diagnostics(self) -> dict[str, dict[str, Any]]:
        """Per-robot counters for /diagnostics."""
        with self._lock:
            out = {}
            # Registered robots only: what unregistered senders caused is one aggregate
            # (failover_diagnostics), never a table per claimed id.
            for rid in sorted(self.registrations):
                st = self.stats.get(rid, RobotStats())
                refused = self.validator.refused.get(rid, Counter())
                q = np.array(st.queue_ms or [0.0])
                out[rid] = {
                    "registered": rid in self.registrations,
                    "rounds": st.rounds, "errors": st.errors,
                    "accepted": self.validator.accepted.get(rid, 0),
                    "refused": dict(refused), "refused_total": sum(refused.values()),
                    "queue_ms_p50": float(np.percentile(q, 50)),
                    "inference_ms_p50": float(np.percentile(np.array(st.inference_ms or [0.0]), 50)),
                }
            return out
