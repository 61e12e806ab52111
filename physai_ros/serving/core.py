"""The policy server's logic without ROS: registration, validation, queue, scheduling, batching,
engine calls, horizon policy and post-processing.

The node feeds it plain data (ServingCore.register / submit) from its ROS callbacks; its
serving.runner threads call dispatch (the scheduler's batches for idle instances) and run_batch
(one per instance thread, so instances compute concurrently), which returns the chunks to
publish. step() does both in one call. All public methods take the lock where they touch shared
state, so callbacks and the threads may interleave freely; engines run outside it.
"""
from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import torch

from physai_ros.scheduler.types import (Batch, EngineInstanceInfo, LatencyProfile, Request,
                                        SchedulerDecision)

from .postprocess import decide_horizon
from .preprocess import Normalizer, image_to_rgb, to_model_image
from .tokenizer import PromptTokenizer
from .types import (STATUS_ERROR, STATUS_OK, STATUS_REFUSED, ChunkResult, ObservationData,
                    RegistrationResult, RobotRegistration)
from .validation import ModelLimits, ObservationValidator, Refusal, check_registration


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
                 allowed_horizon_policies: Sequence[str] = ()):
        """allowed_horizon_policies: the `package.module:Class` policies a robot may name (the
        ones fleet.yaml's tasks configure); any other class name is refused, never imported."""
        if not engines:
            raise ValueError("ServingCore needs at least one engine instance")
        self.engines = {e.instance_id: e for e in engines}
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
            bad = check_registration(reg, self.limits)
            if bad is not None:
                self.registration_refusals[reg.robot_id] += 1
                return RegistrationResult(False, str(bad), self.instance_id)
            old = self.registrations.get(reg.robot_id)
            if old is not None:
                # A robot registers again when it restarted or switched task: either way its
                # previous task's round history no longer describes what it will do next.
                self._finish_task(reg.robot_id, old.task_id)
            self.registrations[reg.robot_id] = reg
            self.stats.setdefault(reg.robot_id, RobotStats())
            # Continue above the robot's own history: its round ids survive server restarts.
            prev = self.validator.last_round.get(reg.robot_id, 0)
            self.validator.reset_robot(reg.robot_id, max(prev, reg.last_round_id))
            self.tokenizer.encode(reg.prompt)  # warm the cache off the hot path
            return RegistrationResult(True, "", self.instance_id)

    def submit(self, obs: ObservationData, now: float | None = None) -> list[ChunkResult]:
        """Queue a valid observation. Returns the chunks to publish at once: a REFUSED chunk for
        a bad observation, and for requests this one superseded (an older queued round)."""
        now = self.clock() if now is None else now
        with self._lock:
            reg = self.registrations.get(obs.robot_id)
            refusal = self.validator.check(obs, reg, now)
            notices: list[ChunkResult] = []
            if refusal is None:
                refusal = self._enqueue(obs, now, notices)
            if refusal is not None:
                return [self._refused(obs, reg, refusal)]
            self._work.notify_all()
            return notices

    def _finish_task(self, robot_id: str, task_id: str) -> None:
        self.scheduler.on_task_finished(f"{robot_id}/{task_id}")
        self._last_task.pop(robot_id, None)

    def _enqueue(self, obs: ObservationData, now: float, notices: list[ChunkResult]) -> Refusal | None:
        prev = self._last_task.get(obs.robot_id)
        if prev is not None and prev != obs.task_id:
            self._finish_task(obs.robot_id, prev)
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
        return bool(self._pending) and any(
            not e.running and getattr(e.engine, "alive", True) for e in self.engines.values())

    # ---- worker --------------------------------------------------------------------------

    def dispatch(self, now: float | None = None) -> Dispatch:
        """One scheduling cycle: take the batches the scheduler places on idle instances now.

        Each instance is marked running until run_batch finishes it, so several instances can
        execute at once (each from its own thread) and none ever gets two batches at a time."""
        now = self.clock() if now is None else now
        with self._lock:
            infos = [self._instance_info(e, now) for e in self.engines.values()
                     if getattr(e.engine, "alive", True)]
            decision: SchedulerDecision = self.scheduler.schedule(now, infos)
            work = []
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
        """Execute one dispatched batch on its instance; never raises for a failing engine."""
        batch, reqs, dispatched = work.batch, work.requests, work.dispatched
        slot = self.engines[batch.instance_id]
        from physai_ros.engine.types import EngineInput  # engine import is heavy; keep it lazy

        inputs, ok_reqs, out, outputs = [], [], [], []
        t0 = t1 = self.clock()
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
                    with torch.inference_mode():
                        outputs = slot.engine.infer(inputs)
                except Exception as e:  # one bad batch must not take the server down
                    out.extend(self._error(r, f"engine failed: {type(e).__name__}: {e}", slot)
                               for r in ok_reqs)
                    ok_reqs = []
            t1 = self.clock()
        finally:
            # Whatever happened, the instance is free again and the scheduler hears about it.
            inference_ms = (t1 - t0) * 1e3
            with self._lock:
                slot.running = False
                slot.busy_until = t1
                for req, eo in zip(ok_reqs, outputs):
                    out.append(self._postprocess(req, eo, slot, (dispatched - req.arrival_time) * 1e3,
                                                 inference_ms))
                for req in reqs:
                    self.scheduler.on_completed(req.request_id, t1, (t1 - t0))
                self._work.notify_all()
        return out

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
        st = self.stats[obs.robot_id]
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
            out[e.instance_id] = d
        return out

    def diagnostics(self) -> dict[str, dict[str, Any]]:
        """Per-robot counters for /diagnostics."""
        with self._lock:
            out = {}
            for rid in sorted(set(self.registrations) | set(self.validator.refused)):
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
