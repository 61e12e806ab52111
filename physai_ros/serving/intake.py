"""Robots in: registration, release and observations, up to the scheduler's queue.

What a robot sends becomes a queued request or a refusal here; nothing here runs a model. Every
accepted round gets an answer: a round dropped before it ran (superseded by a newer one, its
task ended, its robot released or restarted) is answered with a REFUSED chunk, kept as a notice
until the node publishes it.

RobotIntake shares ServingCore's lock (the queue is one piece of state with the batches that
drain it); its public methods take the lock, `end_task` expects it held.
"""
from __future__ import annotations

import itertools
import threading
from collections import deque
from dataclasses import replace
from typing import Any, Callable

from physai_ros.protocol.chunk import ActionChunkData
from physai_ros.protocol.observation import ObservationData
from physai_ros.protocol.registration import RegistrationResult, RobotRegistration
from physai_ros.scheduler.types import ACTION, Request
from physai_ros.serving.redispatch import Redispatch
from physai_ros.serving.registry import RobotRegistry, TaskEnded
from physai_ros.serving.validation import Refusal
from physai_ros.serving.work import scheduler_task_key


class RobotIntake:
    def __init__(self, registry: RobotRegistry, scheduler: Any, runners: dict, redispatch: Redispatch,
                 lock: threading.Condition, clock: Callable[[], float], events: list):
        """lock: the core's condition (its lock guards the queue; submit notifies it)."""
        self.registry = registry
        self.scheduler = scheduler
        self.runners = runners
        self.action_runner = runners[ACTION]
        self.redispatch = redispatch
        self.clock = clock
        self.events = events
        self.factory = None  # serving.factory_runtime.FactoryRuntime: admits robots when set
        self.language = None  # serving.language.stream.LanguageStream: told when a robot's task ends
        self._work = lock
        self._notices: deque[ActionChunkData] = deque(maxlen=1024)
        self._last_task: dict[str, str] = {}  # robot_id -> task_id of its newest observation
        self._ids = itertools.count(1)

    def register(self, reg: RobotRegistration) -> RegistrationResult:
        plan = None
        if self.factory is not None:  # the plan admits (or refuses) before the registry does
            plan = self.factory.register(reg.robot_id, reg.task_id)
            if not plan.accepted:
                return RegistrationResult(False, plan.reason, self.registry.instance_id)
        with self._work:
            result, ended = self.registry.register(reg, self.clock(), self.queued_robots())
            for e in ended:
                self.end_task(e)
            if result.accepted:
                self.action_runner.warm(reg)
                if plan is not None:
                    result = replace(result, max_request_rate_hz=plan.rate_hz, routes=plan.routes)
        if not result.accepted and plan is not None:
            self.factory.release(reg.robot_id)  # the plan made room the registry did not take
        return result

    def release(self, robot_id: str) -> bool:
        """Forget a robot: registration, history, counters. Returns whether it was registered."""
        with self._work:
            ended = self.registry.release(robot_id)
            if ended is not None:
                self.end_task(ended)
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
        with self._work:
            ended = self.registry.release_silent(now, timeout_s, self.queued_robots())
            for e in ended:
                self.end_task(e)
        for e in ended if self.factory is not None else ():
            self.factory.release(e.robot_id)
        return [e.robot_id for e in ended]

    def submit(self, obs: ObservationData, now: float | None = None, notify: bool = True) -> list[ActionChunkData]:
        """Queue a valid observation. Returns the chunks to publish at once: a REFUSED chunk for
        a bad observation, and for requests this one superseded (an older queued round or the
        previous task's). notify=False: the caller dispatches itself right after
        (ServingThreads.submit), so the dispatcher thread is not woken for nothing."""
        now = self.clock() if now is None else now
        with self._work:
            reg, refusal = self.registry.check(obs, now)
            notices: list[ActionChunkData] = []
            if refusal is None:
                refusal = self._enqueue(obs, reg, now, notices)
            if refusal is not None:
                return [self.action_runner.refused(obs, reg, refusal)]
            if notify:
                self._work.notify_all()
            return notices + self._drain_notices()

    def take_notices(self) -> list[ActionChunkData]:
        """Answers for accepted requests that were dropped (see end_task), to publish."""
        with self._work:
            return self._drain_notices()

    def queued_robots(self) -> set[str]:
        """Under the lock: the robots with a request in the queue."""
        return {r.robot_id for r in self.scheduler.queued()}

    def end_task(self, ended: TaskEnded) -> None:
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

    def _drain_notices(self) -> list[ActionChunkData]:
        out = list(self._notices)  # under the lock
        self._notices.clear()
        return out

    def _enqueue(self, obs: ObservationData, reg: RobotRegistration, now: float,
                 notices: list[ActionChunkData]) -> Refusal | None:
        prev = self._last_task.get(obs.robot_id)
        if prev is not None and prev != obs.task_id:
            self.end_task(TaskEnded(obs.robot_id, prev, f"the robot switched to task {obs.task_id!r}",
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
