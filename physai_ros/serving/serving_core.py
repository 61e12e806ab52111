"""The policy server's request path without ROS: observations in, scheduler, batches on engine
instances, chunks out.

Who owns what (vLLM v1's split: the scheduler returns plain data, a runner executes it):
- serving.registry.RobotRegistry: which robots may send work (registration, admission,
  release, validation, per-robot counters);
- the scheduler (physai_ros.scheduler): the only queue. Every queued request lives there,
  payload included; a request whose instance was lost goes back through `requeue`;
- serving.instances.InstancePool: which engine instances serve now (failures, hot standby);
- a model runner per component (serving.action_runner): engine inputs and finished chunks.

The node feeds the core plain data (register / submit) from its ROS callbacks; the
serving.serving_threads threads call dispatch (the scheduler's batches for idle instances) and
run_batch (one per instance thread, so instances compute concurrently), which returns the
chunks to publish. step() does both in one call. Public methods take the lock where they touch
shared state, so callbacks and threads may interleave freely; engines run outside it.
"""
from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections import deque
from dataclasses import replace
from typing import Any, Callable, Sequence

from physai_ros.engine.processor.normalizer import Normalizer
from physai_ros.engine.processor.prompt import PromptStyle
from physai_ros.engine.processor.tokenizer import PromptTokenizer
from physai_ros.protocol.chunk import ActionChunkData
from physai_ros.protocol.observation import ObservationData
from physai_ros.protocol.registration import RegistrationResult, RobotRegistration
from physai_ros.scheduler.types import ACTION, Request
from physai_ros.serving.action_runner import ActionModelRunner
from physai_ros.serving.instances import EngineSlot, InstancePool
from physai_ros.serving.language.stream import FrameRobot
from physai_ros.serving.redispatch import Redispatch
from physai_ros.serving.registry import RobotRegistry, TaskEnded
from physai_ros.serving.rtc_planner import RtcPlanner
from physai_ros.serving.validation import ModelLimits, Refusal
from physai_ros.serving.work import BatchRun, BatchWork, Dispatch, StepOutput, scheduler_task_key

class ServingCore:
    def __init__(self, engines: Sequence[EngineSlot], scheduler: Any, tokenizer: PromptTokenizer,
                 normalizer: Normalizer | None = None, max_observation_age_s: float = 2.0,
                 instance_id: str | None = None, clock: Callable[[], float] = time.time,
                 allowed_horizon_policies: Sequence[str] = (), max_robots: int | None = None,
                 robot_idle_release_s: float = 10.0, prompt_style: PromptStyle | None = None,
                 cameras: Sequence[str] = ()):
        """allowed_horizon_policies: the `package.module:Class` policies a robot may name (the
        ones fleet.yaml's tasks configure); any other class name is refused, never imported.
        max_robots / robot_idle_release_s: admission (serving.registry). cameras: a LeRobot
        checkpoint's image features in its order, each robot's views matched to them by name."""
        self.pool = InstancePool(engines)
        self.engines = self.pool.slots
        self.events, self.failover = self.pool.events, self.pool.failover
        cfg = engines[0].engine.config
        self.model_config = cfg
        self.action_runner = ActionModelRunner(cfg, tokenizer, normalizer, prompt_style, tuple(cameras))
        self.runners = {ACTION: self.action_runner}
        self.rtc = RtcPlanner({})  # real-time chunking per task (docs/rtc.md); the factory sets it
        self.language = None  # serving.language.stream.LanguageStream: enable_language sets it
        self.factory = None  # serving.factory_runtime.FactoryRuntime: apply_factory sets it
        self.limits = ModelLimits(cfg.max_views, cfg.max_state_dim, cfg.max_action_dim, tuple(cameras))
        self.instance_id = instance_id or uuid.uuid4().hex[:12]
        self.registry = RobotRegistry(self.limits, self.instance_id, max_observation_age_s,
                                      allowed_horizon_policies, max_robots, robot_idle_release_s)
        self.scheduler = scheduler
        self.clock = clock
        # Requests lost with their instance go back to the queue (serving.redispatch).
        self.redispatch = Redispatch(scheduler, self.failover)
        # Answers for accepted requests dropped outside submit (a restarted robot's queued round,
        # a lost request that cannot run again): every accepted round gets an answer. Drained by
        # take_notices() and submit().
        self._notices: deque[ActionChunkData] = deque(maxlen=1024)
        self._last_task: dict[str, str] = {}  # robot_id -> task_id of its newest observation
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)

    def enable_language(self, stream) -> None:
        """Text from every local instance's frames (serving.language.stream, docs/language.md)."""
        for iid, slot in self.engines.items():
            if not slot.remote:
                stream.attach(iid, slot.engine)
        self.language = stream

    def run_language(self, instance_id: str) -> list:
        """After run_batch's chunks are published: the frame's text (the instance stays busy
        until this returns, so the scheduler's idea of it holds). [] when nothing was held, and
        then the instance is left alone: it was freed with its chunks and may already run the
        next batch (marking it free here would stack batches on it)."""
        if self.language is None or not self.language.is_holding(instance_id):
            return []
        slot = self.engines[instance_id]
        try:
            return self.language.run_held(instance_id)
        except Exception as e:  # text failing must not take the actions down
            with self._lock:
                self.events.append(f"language frame on {instance_id} failed: {type(e).__name__}: {e}")
            return []
        finally:
            with self._lock:
                slot.running = False
                slot.busy_until = self.clock()
                self._work.notify_all()

    def take_text_notices(self) -> list:
        """Texts ended by robots leaving or switching task (cancelled), to publish."""
        return self.language.drain_ended() if self.language is not None else []

    def warm_up(self, views: int = 1) -> float:
        """One inference per local engine instance on a blank input, so the first robot's first
        round does not pay for lazy initialisation (and miss its SLO). Returns the slowest, s."""
        blank = self.action_runner.blank_input(views)
        worst = 0.0
        for slot in self.engines.values():
            if slot.remote:
                continue  # an engine_worker warms itself up while measuring its profile
            t0 = time.perf_counter()
            self.action_runner.execute(slot.engine, [blank])
            worst = max(worst, time.perf_counter() - t0)
        return worst

    def apply_factory(self, runtime) -> None:
        """Run a factory schedule (serving.factory_runtime): System 1 batches only on its System 1
        instances, capped at the planned batch sizes; robots admitted and rate-capped by it."""
        with self._lock:
            for iid, slot in self.engines.items():
                cap = runtime.batch_cap(iid)
                if cap is not None:
                    slot.max_batch = min(slot.max_batch, cap)
            self.factory = runtime
            self._work.notify_all()

    def _action_slots(self) -> list[EngineSlot]:
        """The serving instances that take System 1 batches (all of them without a factory plan)."""
        slots = self.pool.serving()
        if self.factory is None:
            return slots
        hosts = self.factory.action_instances(lambda iid: self.pool.usable(self.engines[iid]))
        return [e for e in slots if e.instance_id in hosts]

    # ---- robot-facing entry points -------------------------------------------------------

    def register(self, reg: RobotRegistration) -> RegistrationResult:
        plan = None
        if self.factory is not None:  # the plan admits (or refuses) before the registry does
            plan = self.factory.register(reg.robot_id, reg.task_id)
            if not plan.accepted:
                return RegistrationResult(False, plan.reason, self.instance_id)
        with self._lock:
            result, ended = self.registry.register(reg, self.clock(), self._queued_robots())
            for e in ended:
                self._end_task(e)
            if result.accepted:
                self.runners[ACTION].warm(reg)
                if plan is not None:
                    result = replace(result, max_request_rate_hz=plan.rate_hz, routes=plan.routes)
        if not result.accepted and plan is not None:
            self.factory.release(reg.robot_id)  # the plan made room the registry did not take
        return result

    def release(self, robot_id: str) -> bool:
        """Forget a robot: registration, history, counters. Returns whether it was registered."""
        with self._lock:
            ended = self.registry.release(robot_id)
            if ended is not None:
                self._end_task(ended)
        if self.factory is not None:
            self.factory.release(robot_id)
        return ended is not None

    def release_idle(self, timeout_s: float, now: float | None = None) -> list[str]:
        """Free every robot silent (no observation, no registration) for longer than timeout_s
        (server.robot_timeout_s: link cut, client dead) whether or not a new robot needs its
        place; the policy server calls this periodically. A robot that comes back registers
        again (its client does so by itself) and continues above its own round ids. A robot
        with a request queued (requeued ones included) is not silent. Returns the robots freed."""
        now = self.clock() if now is None else now
        with self._lock:
            ended = self.registry.release_silent(now, timeout_s, self._queued_robots())
            for e in ended:
                self._end_task(e)
        for e in ended if self.factory is not None else ():
            self.factory.release(e.robot_id)
        return [e.robot_id for e in ended]

    def submit(self, obs: ObservationData, now: float | None = None, notify: bool = True) -> list[ActionChunkData]:
        """Queue a valid observation. Returns the chunks to publish at once: a REFUSED chunk for
        a bad observation, and for requests this one superseded (an older queued round or the
        previous task's). notify=False: the caller dispatches itself right after (serving.serving_threads
        ServingThreads.submit), so the dispatcher thread is not woken for nothing."""
        now = self.clock() if now is None else now
        with self._lock:
            reg, refusal = self.registry.check(obs, now)
            notices: list[ActionChunkData] = []
            if refusal is None:
                refusal = self._enqueue(obs, reg, now, notices)
            if refusal is not None:
                return [self.action_runner.refused(obs, reg, refusal)]
            if notify:
                self._work.notify_all()
            return notices + self._drain_notices()

    def registration(self, robot_id: str) -> RobotRegistration | None:
        with self._lock:
            return self.registry.get(robot_id)

    def registered_robots(self) -> int:
        with self._lock:
            return len(self.registry)

    def take_notices(self) -> list[ActionChunkData]:
        """Answers for accepted requests that were dropped (see _end_task), to publish."""
        with self._lock:
            return self._drain_notices()

    def _drain_notices(self) -> list[ActionChunkData]:
        out = list(self._notices)  # under the lock
        self._notices.clear()
        return out

    def _queued_robots(self) -> set[str]:
        return {r.robot_id for r in self.scheduler.queued()}

    def _end_task(self, ended: TaskEnded) -> None:
        """Under the lock: the scheduler forgets the task and hands back its queued requests,
        which were accepted, so they are answered (refused) rather than left without one."""
        for comp in self.runners:
            key = scheduler_task_key(ended.robot_id, ended.task_id, comp)
            for req in self.scheduler.on_task_finished(key):
                self.redispatch.done(req.request_id)  # a requeued one ends here too
                self._notices.append(self.runners.get(req.component, self.action_runner).refused(
                    req.payload, ended.registration, Refusal("superseded", ended.why)))
        self._last_task.pop(ended.robot_id, None)
        if self.language is not None:
            self.language.robot_ended(ended.robot_id, ended.why)
        if ended.released:
            self.events.append(f"released robot {ended.robot_id!r}")

    def _enqueue(self, obs: ObservationData, reg: RobotRegistration, now: float,
                 notices: list[ActionChunkData]) -> Refusal | None:
        prev = self._last_task.get(obs.robot_id)
        if prev is not None and prev != obs.task_id:
            self._end_task(TaskEnded(obs.robot_id, prev, f"the robot switched to task {obs.task_id!r}",
                                     registration=reg))
        self._last_task[obs.robot_id] = obs.task_id
        req = Request(
            request_id=f"{obs.robot_id}#{obs.round_id}#{next(self._ids)}", robot_id=obs.robot_id,
            task_id=scheduler_task_key(obs.robot_id, obs.task_id), round_id=obs.round_id,
            arrival_time=now, obs_capture_time=obs.stamp,
            exec_phase_start=obs.exec_phase_start if obs.exec_phase_start > 0 else None,
            actions_remaining=obs.actions_remaining, control_period=obs.control_period,
            refresh=obs.refresh, component=ACTION, payload=obs)
        res = self.scheduler.submit(req, now)
        if not res.accepted:
            return self.registry.count_refusal(obs.robot_id, Refusal("scheduler", res.reason))
        for old in res.superseded:
            if old.round_id != obs.round_id:  # the same round is a refresh: nothing to answer
                notices.append(self.runners.get(old.component, self.action_runner).refused(
                    old.payload, reg, Refusal("superseded", f"round {obs.round_id} replaced it")))
        return None

    def pending(self) -> int:
        with self._lock:
            return self.scheduler.pending()

    def wait_for_work(self, timeout: float) -> bool:
        """Block until a request is queued and an instance is free to take it (or `timeout`)."""
        with self._lock:
            if not self._dispatchable():
                self._work.wait(timeout)
            return self._dispatchable()

    def wake(self) -> None:
        """Wake the dispatcher thread (a submit with notify=False that could not place its request)."""
        with self._lock:
            self._work.notify_all()

    def wait_for_change(self, timeout: float) -> None:
        """Block until a submit or a finished batch (or `timeout`): the next scheduling chance."""
        with self._lock:
            self._work.wait(timeout)

    def dispatchable(self) -> bool:
        """A request waits and an instance is free to take it."""
        with self._lock:
            return self._dispatchable()

    def _dispatchable(self) -> bool:
        return self.scheduler.pending() > 0 and any(not e.running for e in self._action_slots())

    # ---- engine instances ----------------------------------------------------------------

    def instance_failed(self, instance_id: str, why: str) -> None:
        """A local instance is out of service for good (its thread died): no more work for it."""
        with self._lock:
            self.pool.fail(self.engines[instance_id], why)
            self._work.notify_all()

    def requeue(self, work: BatchWork) -> list[ActionChunkData]:
        """Work handed to an instance that never ran it (lost with the instance): back to the
        scheduler's queue, to run on another instance. It never ran, so this does not count as
        a dispatch attempt. Returns the answers to publish now (a request whose task ended
        meanwhile gets an ERROR chunk instead)."""
        with self._lock:
            out: list[ActionChunkData] = []
            now = self.clock()
            again = self._retry_lost(work.requests, self.engines[work.instance_id],
                                     "its instance was lost before it ran", out, limit=False, now=now,
                                     count=False)
            for req in work.requests:
                if req.request_id not in again:  # answered with an error: no longer in flight
                    self.redispatch.done(req.request_id)
                    self.scheduler.on_completed(req.request_id, now, 0.0)
            self._work.notify_all()
            return out

    def _retry_lost(self, lost: list[Request], slot: EngineSlot, why: str, out: list[ActionChunkData],
                    limit: bool, now: float, count: bool = True) -> set[str]:
        """Under the lock: `lost` back to the queue (serving.redispatch); the requests it gives up
        on get ERROR chunks in `out`. Returns the ids queued again."""
        again, given_up = self.redispatch.retry(lost, now, limit=limit, count=count)
        out.extend(self._error(req, f"{why} ({reason})", slot) for req, reason in given_up)
        return again

    # ---- dispatching and running batches -------------------------------------------------

    def dispatch(self, now: float | None = None) -> Dispatch:
        """One scheduling cycle: take the batches the scheduler places on idle instances now.

        Each instance is marked running until run_batch finishes it, so several instances can
        execute at once (each from its own thread) and none ever gets two batches at a time."""
        now = self.clock() if now is None else now
        with self._lock:
            infos = [self.pool.info(e, now) for e in self._action_slots()]
            decision = self.scheduler.schedule(now, infos)
            work = []
            for batch in decision.batches:
                reqs = [r for r in map(self.scheduler.request, batch.request_ids) if r is not None]
                if reqs:
                    self.scheduler.on_dispatched(batch, now)
                    slot = self.engines[batch.instance_id]
                    slot.running = True
                    slot.busy_until = now + batch.est_latency_s
                    work.append(BatchWork(batch, reqs, now))
            refresh = [(r.robot_id, r.round_id) for r in map(self.scheduler.request, decision.refresh_request_ids)
                       if r is not None]
        return Dispatch(work, refresh)

    def step(self, now: float | None = None) -> StepOutput:
        """One scheduling cycle run to completion: every dispatched batch, each on its own
        instance concurrently, chunks in dispatch order. (The policy server instead hands
        dispatch()'s batches to one long-lived thread per instance: serving.serving_threads.)"""
        d = self.dispatch(now)
        results: list[list[ActionChunkData]] = [[] for _ in d.work]

        def run(k: int) -> None:
            results[k] = self.run_batch(d.work[k])
            self.run_language(d.work[k].instance_id)  # step() has no text consumer: decoded, dropped

        threads = [threading.Thread(target=run, args=(k,), daemon=True) for k in range(1, len(d.work))]
        for t in threads:
            t.start()
        if d.work:
            run(0)
        for t in threads:
            t.join()
        return StepOutput([c for r in results for c in r], d.refresh)

    def run_batch(self, work: BatchWork) -> list[ActionChunkData]:
        """Execute one dispatched batch on its instance: prepare (engine inputs, per request),
        execute (the engine call, outside the lock), complete (chunks, the scheduler told, the
        instance freed, under the lock). With the language stream on, the instance stays busy
        until run_language(instance) has decoded the frame's text. A failing engine never makes
        this raise: the batch's requests get ERROR chunks and the instance serves on. Two cases
        are the instance's fault, not the batch's, and the requests run again elsewhere: an
        engine error marked `instance_lost` (a remote worker that is gone), and a fatal
        BaseException (the instance is dead; it is re-raised so its thread ends with it)."""
        slot = self.engines[work.batch.instance_id]
        # One model per batch: the scheduler batches requests of one component per instance.
        run = BatchRun(work, slot, self.runners.get(work.requests[0].component))
        run.t0 = run.t1 = self.clock()
        try:
            self._prepare(run)
            self._execute(run)
        finally:
            # Whatever happened, the instance is free again and the scheduler hears about it.
            self._complete(run)
        return run.out

    def _prepare(self, run: BatchRun) -> None:
        """Each request's engine input; a request that cannot be converted gets an ERROR chunk."""
        reqs, slot, runner = run.work.requests, run.slot, run.runner
        with self._lock:
            slot.batches += 1
            run.batch_no = slot.batches
            regs = {r.robot_id: self.registry.get(r.robot_id) for r in reqs}
        for req in reqs:
            try:
                if runner is None or req.component != runner.component:
                    raise ValueError(f"no model runner for a {req.component!r} request in this batch")
                reg = regs[req.robot_id]
                if reg is None:
                    raise KeyError(req.robot_id)
                p0 = self.clock()
                run.inputs.append(self.rtc.attach(runner.prepare(req.payload, reg), req.payload, reg))
                run.prepare_s[req.request_id] = self.clock() - p0
                run.ok.append(req)
            except (ValueError, KeyError) as e:
                run.out.append(self._error(req, f"preprocessing failed: {e}", slot, locked=False))

    def _execute(self, run: BatchRun) -> None:
        """The engine call, outside the lock; its outputs on the host, and the frame's prefix kept
        when the language stream wants it. Sorts failures into the batch's (ERROR chunks) and
        the instance's (lost requests, run again elsewhere; a fatal one re-raised)."""
        slot, runner = run.slot, run.runner
        speaks = self.language is not None and self.language.speaks_on(slot.instance_id, slot.engine)
        frame = (None, None)
        run.t0 = self.clock()
        if run.inputs:
            try:
                if slot.before_batch is not None:
                    slot.before_batch(slot.instance_id, run.batch_no)
                # On the host once: the chunks and RTC's memory read the same arrays.
                run.outputs = [runner.to_host(o) for o in runner.execute(slot.engine, run.inputs)]
                if speaks:  # the same prefill feeds the text (OxyGen): its cache, kept by infer
                    frame = slot.engine.take_prefix() or (None, None)
            except Exception as e:  # one bad batch must not take the server down
                msg = f"engine failed: {type(e).__name__}: {e}"
                if getattr(e, "instance_lost", False):
                    run.lost, run.lost_why = run.ok, msg
                else:
                    run.out.extend(self._error(r, msg, slot, locked=False) for r in run.ok)
                run.ok = []
            except BaseException as e:  # the instance itself is gone
                run.fatal, run.lost, run.lost_why, run.ok = e, run.ok, f"{type(e).__name__}: {e}", []
                raise
        run.t1 = self.clock()
        run.rows = [FrameRobot(r.robot_id, r.payload.task_id, r.round_id) for r in run.ok]
        # Kept only for a frame with text work; otherwise (or if asking raises) the instance is
        # free with the chunks rather than held for a run_language that may never come.
        if frame[0] is not None and self.language.wants_frame(slot.instance_id, run.rows):
            run.frame = frame

    def _complete(self, run: BatchRun) -> None:
        """Under the lock: the chunks, lost requests back to the queue, the scheduler told, the
        instance free (or held for the frame's text)."""
        slot, work = run.slot, run.work
        inference_ms = (run.t1 - run.t0) * 1e3
        with self._lock:
            held = run.frame is not None and bool(run.ok) and run.fatal is None
            if held:  # run_language decodes this frame's text next and frees the instance
                self.language.hold(slot.instance_id, run.frame[0], run.frame[1], run.rows, run.t1 - run.t0)
            slot.running = held
            slot.busy_until = run.t1
            if run.fatal is not None:
                self.pool.fail(slot, run.lost_why)
            again = self._retry_lost(run.lost, slot, run.lost_why, run.out, limit=run.fatal is None, now=run.t1)
            for req, eo in zip(run.ok, run.outputs):
                run.out.append(self._finish(run.runner, req, eo, slot, (work.dispatched - req.arrival_time) * 1e3,
                                            inference_ms, run.prepare_s.get(req.request_id, 0.0)))
            for req in work.requests:
                if req.request_id not in again:
                    self.redispatch.done(req.request_id)
                    self.scheduler.on_completed(req.request_id, run.t1, (run.t1 - run.t0))
            self._work.notify_all()

    def _finish(self, runner: Any, req: Request, output: Any, slot: EngineSlot, queue_ms: float,
                inference_ms: float, prepare_s: float = 0.0) -> ActionChunkData:
        # Under the lock: the registration may have gone while the batch ran.
        reg = self.registry.get(req.robot_id)
        if reg is None:
            return self._error(req, "robot unregistered while its request ran", slot)
        f0 = self.clock()
        chunk = runner.finish(req.payload, reg, output, slot.instance_id, queue_ms, inference_ms)
        chunk = replace(chunk, prepare_ms=(prepare_s + self.clock() - f0) * 1e3)
        self.rtc.record(req.payload, output.actions, chunk)
        if chunk.error:
            self.registry.record_error(req.robot_id)
        else:
            self.registry.record_round(req.robot_id, queue_ms, inference_ms)
        return chunk

    def _error(self, req: Request, msg: str, slot: EngineSlot, locked: bool = True) -> ActionChunkData:
        if not locked:
            with self._lock:
                return self._error(req, msg, slot)
        self.registry.record_error(req.robot_id)
        # An unknown component still gets an answer (through the action runner's chunk type).
        runner = self.runners.get(req.component, self.action_runner)
        return runner.error(req.payload, self.registry.get(req.robot_id), msg, slot.instance_id)

    # ---- reporting -----------------------------------------------------------------------

    def engine_diagnostics(self) -> dict[str, dict[str, Any]]:
        """Per engine instance: liveness and what its worker advertises (remote ones)."""
        with self._lock:
            serving = {s.instance_id for s in self.pool.serving()}
        out = self.pool.diagnostics(self.clock(), serving)
        if self.factory is not None:
            for iid, d in out.items():
                d["factory_role"] = self.factory.role(iid)
        return out

    def failover_diagnostics(self) -> dict[str, Any]:
        """Admission, failover and unregistered-sender counters (server-wide, bounded)."""
        with self._lock:
            return {
                **self.registry.admission_diagnostics(),
                **{f"failover.{k}": v for k, v in sorted(self.failover.items())},
                "standby_serving": ",".join(sorted(self.pool.promoted)),
                "failed_instances": ",".join(sorted(i for i, e in self.engines.items() if e.failed)),
                "orphaned_requests": int(self.scheduler.stats().get("requeued_waiting", 0)),
                "last_event": self.events[-1] if self.events else "",
                **({f"factory.{k}": v for k, v in self.factory.diagnostics().items()}
                   if self.factory is not None else {}),
            }

    def diagnostics(self) -> dict[str, dict[str, Any]]:
        """Per-robot counters for /diagnostics."""
        with self._lock:
            return self.registry.diagnostics()
