"""The policy server's request path without ROS: observations in, batches on instances, chunks out.

Who owns what (vLLM v1's split: the scheduler returns plain data, a runner executes it):
- serving.intake.RobotIntake: robots in (register, release, submit) up to the queue, and the
  answers owed to accepted rounds dropped before they ran;
- serving.registry.RobotRegistry: which robots may send work (registration, admission,
  release, validation, per-robot counters);
- the scheduler (physai_ros.scheduler, one queue per instance under a factory plan): the only
  queue, payloads included; a request whose instance was lost goes back through `requeue`;
- serving.instances.InstancePool: which engine instances serve now (failures, hot standby);
  serving.plan_binding: a factory plan's queues, routes and batch caps on them;
- a model runner per component (serving.action_runner): engine inputs and finished chunks;
- serving.language.frame_hold.FrameHold: a batch's frame handed to the language stream.

The node feeds the core plain data (register / submit) from its ROS callbacks; the
serving.serving_threads threads call dispatch (the scheduler's batches for idle instances) and
run_batch (one per instance thread, so instances compute concurrently), which returns the
chunks to publish. step() does both in one call. Public methods take the lock where they touch
shared state, so callbacks and threads may interleave freely; engines run outside it.
"""
from __future__ import annotations

import threading
import time
import uuid
from dataclasses import replace
from typing import Any, Callable, Sequence

from physai_ros.engine.processor.normalizer import Normalizer
from physai_ros.engine.processor.prompt import PromptStyle
from physai_ros.engine.processor.tokenizer import PromptTokenizer
from physai_ros.protocol.chunk import ActionChunkData
from physai_ros.protocol.observation import ObservationData
from physai_ros.protocol.registration import RegistrationResult, RobotRegistration
from physai_ros.scheduler.routed import RoutedScheduler
from physai_ros.scheduler.types import ACTION, Request
from physai_ros.serving.action_runner import ActionModelRunner
from physai_ros.serving.instances import EngineSlot, InstancePool
from physai_ros.serving.intake import RobotIntake
from physai_ros.serving.language.frame_hold import FrameHold
from physai_ros.serving.plan_binding import PlanBinding
from physai_ros.serving.redispatch import Redispatch
from physai_ros.serving.registry import RobotRegistry
from physai_ros.serving.rtc_planner import RtcPlanner
from physai_ros.serving.validation import ModelLimits
from physai_ros.serving.work import BatchRun, BatchWork, Dispatch, StepOutput


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
        self.frames = None  # serving.language.frame_hold.FrameHold, the batches' link to it
        self.factory, self.plan = None, None  # serving.factory_runtime, serving.plan_binding: apply_factory
        self.limits = ModelLimits(cfg.max_views, cfg.max_state_dim, cfg.max_action_dim, tuple(cameras))
        self.instance_id = instance_id or uuid.uuid4().hex[:12]
        self.registry = RobotRegistry(self.limits, self.instance_id, max_observation_age_s,
                                      allowed_horizon_policies, max_robots, robot_idle_release_s)
        # One queue per System 1 instance once a factory plan routes robots; one shared until then.
        self.scheduler = scheduler = scheduler if isinstance(scheduler, RoutedScheduler) else RoutedScheduler(scheduler)
        self.clock = clock
        # Requests lost with their instance go back to the queue (serving.redispatch).
        self.redispatch = Redispatch(scheduler, self.failover)
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)
        self.intake = RobotIntake(self.registry, scheduler, self.runners, self.redispatch, self._work,
                                  lambda: self.clock(), self.events)  # callers may set core.clock

    def enable_language(self, stream) -> None:
        """Text from every local instance's frames (serving.language.stream, docs/language.md)."""
        for iid, slot in self.engines.items():
            if not slot.remote:
                stream.attach(iid, slot.engine)
        self.language = self.intake.language = stream
        self.frames = FrameHold(stream)

    def run_language(self, instance_id: str) -> list:
        """After run_batch's chunks are published: the frame's text (the instance stays busy
        until this returns, so the scheduler's idea of it holds). [] when nothing was held, and
        then the instance is left alone: it was freed with its chunks and may already run the
        next batch (marking it free here would stack batches on it)."""
        if self.frames is None or not self.frames.holding(instance_id):
            return []
        texts, failure = self.frames.decode(instance_id)
        with self._lock:
            if failure:
                self.events.append(failure)
            slot = self.engines[instance_id]
            slot.running, slot.busy_until = False, self.clock()
            self._work.notify_all()
        return texts

    def take_text_notices(self) -> list:
        """Texts ended by robots leaving or switching task (cancelled), to publish."""
        return self.language.drain_ended() if self.language is not None else []

    def warm_up(self, views: int = 1) -> float:
        """Each local engine instance's first inference, before any robot's (ActionModelRunner.warm_up);
        an engine_worker warms itself up while measuring its profile. Returns the slowest, s."""
        return self.action_runner.warm_up([s.engine for s in self.engines.values() if not s.remote], views)

    def apply_factory(self, runtime) -> None:
        """Run a factory schedule (serving.factory_runtime): System 1 batches only on its System 1
        instances, each with its own robots' queue, capped at the planned batch sizes; robots
        admitted and rate-capped by it; the plan followed whenever it changes."""
        with self._lock:
            self.factory = self.intake.factory = runtime
            self.plan = PlanBinding(runtime, self.scheduler, self.pool, self.events)
            runtime.on_change = self.wake
            self.plan.sync(self.clock())
            self._work.notify_all()

    def _action_slots(self) -> list[EngineSlot]:
        """The serving instances that take System 1 batches (all of them without a factory plan)."""
        return self.pool.serving() if self.plan is None else self.plan.action_slots(self.clock())

    # ---- robot-facing entry points (serving.intake) -------------------------------------

    def register(self, reg: RobotRegistration) -> RegistrationResult:
        return self.intake.register(reg)

    def release(self, robot_id: str) -> bool:
        return self.intake.release(robot_id)

    def release_idle(self, timeout_s: float, now: float | None = None) -> list[str]:
        return self.intake.release_idle(timeout_s, now)

    def submit(self, obs: ObservationData, now: float | None = None, notify: bool = True) -> list[ActionChunkData]:
        return self.intake.submit(obs, now, notify)

    def take_notices(self) -> list[ActionChunkData]:
        return self.intake.take_notices()

    def registration(self, robot_id: str) -> RobotRegistration | None:
        with self._lock:
            return self.registry.get(robot_id)

    def registered_robots(self) -> int:
        with self._lock:
            return len(self.registry)

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
                                     "its instance was lost before it ran", out, limit=False, now=now, count=False)
            self.redispatch.settle(work.requests, again, now, 0.0)  # the others got an error
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
        """One scheduling cycle run to completion, the batches concurrently, chunks in dispatch
        order (the policy server runs them on long-lived threads: serving.serving_threads)."""
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
        """One dispatched batch on its instance: prepare (engine inputs), execute (the engine
        call, outside the lock), complete (chunks, the scheduler told, the instance freed or held
        for run_language, under the lock). A failing engine never makes this raise: the requests
        get ERROR chunks and the instance serves on. The instance's own faults send the requests
        elsewhere: an engine error marked `instance_lost` (a remote worker gone), and a fatal
        BaseException (the instance is dead; re-raised so its thread ends with it)."""
        # One model per batch: the scheduler batches requests of one component per instance.
        run = BatchRun(work, self.engines[work.batch.instance_id], self.runners.get(work.requests[0].component))
        run.t0 = run.t1 = self.clock()
        try:
            self._prepare(run)
            self._execute(run)
        finally:  # whatever happened, the instance is free again and the scheduler hears of it
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
        run.t0 = self.clock()
        if run.inputs:
            try:
                if slot.before_batch is not None:
                    slot.before_batch(slot.instance_id, run.batch_no)
                # On the host once: the chunks and RTC's memory read the same arrays.
                run.outputs = [runner.to_host(o) for o in runner.execute(slot.engine, run.inputs)]
                if self.frames is not None:
                    self.frames.capture(run)
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
        if self.frames is not None:
            self.frames.keep(run)

    def _complete(self, run: BatchRun) -> None:
        """Under the lock: the chunks, lost requests back to the queue, the scheduler told, the
        instance free (or held for the frame's text)."""
        slot, work = run.slot, run.work
        inference_ms = (run.t1 - run.t0) * 1e3
        with self._lock:
            # Held: run_language decodes this frame's text next and frees the instance.
            slot.running = self.frames is not None and self.frames.hold(run)
            slot.busy_until = run.t1
            if run.fatal is not None:
                self.pool.fail(slot, run.lost_why)
            again = self._retry_lost(run.lost, slot, run.lost_why, run.out, limit=run.fatal is None, now=run.t1)
            for req, eo in zip(run.ok, run.outputs):
                run.out.append(self._finish(run.runner, req, eo, slot, (work.dispatched - req.arrival_time) * 1e3,
                                            inference_ms, run.prepare_s.get(req.request_id, 0.0)))
            self.redispatch.settle(work.requests, again, run.t1, run.t1 - run.t0)
            if self.plan is not None and run.ok and run.fatal is None:
                self.plan.observe(slot.instance_id, len(run.ok), run.t1 - run.t0)
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
        chunk = self.rtc.answer(req.payload, output.actions, chunk)
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
