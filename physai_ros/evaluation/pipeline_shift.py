"""A robot's shift with its task pipeline (issue 23) against the same shift with System 1 alone,
in simulated time, in one process: what the planner, safety checker and monitor are worth.

A shift is `shift_s` simulated seconds of one sim robot working as it does live: the sim runs its
episodes back to back (its own reset after a success or the task's time limit), and with the
pipeline the monitor's "failed" resets the episode early (sim.runtime.request_reset), "unsafe"
holds the robot, System 2's subgoal is System 1's prompt. The robot side is lockstep's
(EpisodeSlot: sim, client, trajectory buffer); the pipeline side is the robot client's own
(serving.client_pipeline.ClientPipeline) with its component queries answered by a real backend
(pipeline.vla_backend on the served checkpoint) `component_latency_s` of simulated time later.
Model time takes no simulated time, so results do not depend on the machine's load.

An escalation (stop_and_call_human) is acknowledged by a simulated operator `operator_response_s`
later, who also resets the cell (a knocked cube put back). Counted per shift: tasks completed,
episodes, early resets (and how many came while the task was not failed), time-outs, seconds an
intruder was in the workcell, seconds the arm moved while one was, escalations.
"""
from __future__ import annotations

import dataclasses
import heapq
import itertools
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from physai_ros.control.hold import apply_hold
from physai_ros.pipeline.backend import ComponentBackend, ComponentQuery
from physai_ros.protocol.observation import ImageData
from physai_ros.serving.client_pipeline import ClientPipeline, OutgoingQuery, PipelineOutput
from physai_ros.serving.config import RobotConfig

from .lockstep import EpisodeSlot, LockstepConfig, Server, SimClock

MOVING_RAD_S = 0.05  # a joint faster than this: the arm is moving (a held arm settles below it)


@dataclass(frozen=True)
class ShiftConfig:
    shift_s: float = 60.0
    component_latency_s: float = 0.25  # query -> answer, simulated (the demo measured hundreds of ms)
    operator_response_s: float = 20.0  # an escalation -> the operator's acknowledgement and reset
    lockstep: LockstepConfig = LockstepConfig()

    def __post_init__(self) -> None:
        for name in ("shift_s", "operator_response_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if not self.component_latency_s >= 0:
            raise ValueError(f"component_latency_s must be >= 0, got {self.component_latency_s}")


@dataclass(frozen=True)
class ShiftResult:
    setting: str  # "pipeline" | "system1"
    robot_id: str
    task: str
    seed: int
    shift_s: float
    completed: int  # episodes that reached the task's success test
    episodes: int  # episodes ended (success, time-out or reset)
    timeouts: int
    resets: int  # early resets: the monitor's and the operator's
    resets_not_failed: int  # the monitor's, asked while the ground truth was not "failed"
    operator_resets: int
    intruder_s: float
    moving_with_intruder_s: float
    held_s: float  # the pipeline held the robot
    escalations: int
    pipeline: dict = field(default_factory=dict)  # ClientPipeline.status()["pipeline"], components' counts


def system1_only(robot: RobotConfig) -> RobotConfig:
    """The same robot, its task without a pipeline (System 1 on the task's prompt)."""
    return dataclasses.replace(robot, task=dataclasses.replace(robot.task, pipeline=None))


def _array(im: ImageData) -> np.ndarray:
    return np.frombuffer(im.data, np.uint8).reshape(im.height, im.width, 3)


def _query(q: OutgoingQuery) -> ComponentQuery:
    return ComponentQuery(q.robot_id, q.component, q.question, q.task_prompt, tuple(_array(i) for i in q.images),
                          np.asarray(q.state, np.float32), q.max_tokens)


class ShiftSlot(EpisodeSlot):
    """One robot for one shift: the sim's own episodes, and the pipeline when its task has one."""

    def __init__(self, robot: RobotConfig, cfg: LockstepConfig, setting: str, shift_s: float):
        super().__init__(robot, cfg, setting)
        self.shift_s = shift_s

    def start(self, seed: int, now: float) -> None:
        super().start(seed, now)
        self.pipeline = ClientPipeline.for_robot(self.client, request_reset=self._reset)
        self.resets_not_failed = self.operator_resets = 0
        self.intruder_s = self.moving_with_intruder_s = self.held_s = 0.0
        self.escalated_at: float | None = None
        self.escalations = 0

    def _reset(self, reason: str) -> None:
        if self.runtime.world.progress()[0] != "failed":
            self.resets_not_failed += 1
        self.runtime.request_reset()

    def over(self) -> bool:
        return self.runtime.world.time >= self.shift_s

    def observe(self, out, dt: float) -> None:
        snap = out.snapshot
        if snap.intruder_present:
            self.intruder_s += dt
            if float(np.max(np.abs(snap.velocities))) > MOVING_RAD_S:
                self.moving_with_intruder_s += dt
        if self.pipeline is not None and self.pipeline.held:
            self.held_s += dt

    def apply(self, out: PipelineOutput, now: float) -> list[OutgoingQuery]:
        for hold in out.holds:
            apply_hold(self.buffer, hold.round_id, now)
        for ev in out.events:
            if ev.kind == "escalate" and self.escalated_at is None:
                self.escalated_at = now
                self.escalations += 1
        return out.queries

    def operator(self, now: float, response_s: float) -> list[OutgoingQuery]:
        """The simulated operator: acknowledges a latched escalation after response_s and resets."""
        if self.pipeline is None or self.escalated_at is None or now - self.escalated_at < response_s:
            return []
        self.escalated_at = None
        ack = self.pipeline.acknowledge(now)
        if ack.accepted:
            self.operator_resets += 1
            self.runtime.request_reset()
        return self.apply(ack.output, now)

    def finish_shift(self) -> ShiftResult:
        rt = self.runtime
        self.active = False
        status = self.pipeline.status()["pipeline"] if self.pipeline is not None else {}
        return ShiftResult(
            setting=self.setting, robot_id=self.robot.id, task=rt.world.task.name, seed=self.seed,
            shift_s=round(rt.world.time, 3), completed=int(rt.world.successes), episodes=int(rt.episodes_finished),
            timeouts=int(rt.timeouts), resets=int(rt.resets_requested), resets_not_failed=self.resets_not_failed,
            operator_resets=self.operator_resets,
            intruder_s=round(self.intruder_s, 3), moving_with_intruder_s=round(self.moving_with_intruder_s, 3),
            held_s=round(self.held_s, 3), escalations=self.escalations, pipeline=status)


def run_shifts(server: Server, backend: ComponentBackend | None, robots: Sequence[RobotConfig],
               seeds: Sequence[int], cfg: ShiftConfig = ShiftConfig(), setting: str = "",
               clock: SimClock | None = None,
               slot_hook: Callable[[list[ShiftSlot]], None] | None = None) -> list[ShiftResult]:
    """One shift per seed, on as many robots at once as `robots` has (each a slot; a free slot
    takes the next seed), all sharing `server` (System 1) and `backend` (the components).
    `clock` must be the clock the server reads; slot_hook sees the slots before the first tick
    (a scripted expert or oracle reads their worlds). Returns results in the order shifts ended."""
    if backend is None and any(r.task.pipeline is not None for r in robots):
        raise ValueError("robots with a pipeline need a component backend")
    clock = clock or SimClock()
    lc = cfg.lockstep
    queue = list(int(s) for s in seeds)[::-1]
    slots = [ShiftSlot(r, lc, setting, cfg.shift_s) for r in robots]
    if slot_hook is not None:
        slot_hook(slots)
    by_id = {s.robot.id: s for s in slots}
    if len(by_id) != len(slots):
        raise ValueError("robot ids must be unique")
    dt = 1.0 / lc.physics_rate_hz
    client_every = max(1, round(lc.physics_rate_hz / lc.client_rate_hz))
    info_every = max(1, round(lc.physics_rate_hz / lc.exec_info_rate_hz))
    chunks: list = []  # (due, seq, robot, episode, chunk)
    answers: list = []  # (due, seq, robot, episode, query_id, answer)
    seq = itertools.count()
    results: list[ShiftResult] = []
    t0 = clock.now

    for s in slots:
        if queue:
            s.start(queue.pop(), t0)

    def post(chunk, due: float) -> None:
        s = by_id.get(chunk.robot_id)
        if s is not None and s.active:
            heapq.heappush(chunks, (due, next(seq), chunk.robot_id, s.episode_id, chunk))

    for tick in itertools.count(1):
        if not any(s.active for s in slots):
            break
        now = t0 + tick * dt
        clock.now = now
        while chunks and chunks[0][0] <= now + 1e-12:
            _, _, rid, ep, chunk = heapq.heappop(chunks)
            s = by_id[rid]
            if s.active and s.episode_id == ep:
                s.deliver(chunk, now)
                if s.pipeline is not None:
                    s.pipeline.on_chunk_taken(now)
        asked: list[tuple[ShiftSlot, OutgoingQuery]] = []
        while answers and answers[0][0] <= now + 1e-12:
            _, _, rid, ep, qid, answer = heapq.heappop(answers)
            s = by_id[rid]
            if s.active and s.episode_id == ep:
                asked += [(s, q) for q in s.apply(s.pipeline.on_answer(qid, answer, now), now)]
        submitted = False
        for s in slots:
            if not s.active:
                continue
            s.observe(s.control(now), dt)
            if tick % info_every == 0:
                s.exec_info(now)
            if s.over():
                results.append(s.finish_shift())
                if queue:
                    s.start(queue.pop(), now)
                continue
            if tick % client_every:
                continue
            out = s.client.tick(now)
            if out.register:
                s.client.on_registered(server.register(s.client.registration()))
            if out.hold is not None:
                apply_hold(s.buffer, out.hold.round_id, now)
            if out.observation is not None:
                for notice in server.submit(out.observation, now):
                    post(notice, now)
                submitted = True
            if s.pipeline is not None:
                asked += [(s, q) for q in s.apply(s.pipeline.step(now), now)]
                asked += [(s, q) for q in s.operator(now, cfg.operator_response_s)]
        if asked:
            replies = backend.answer([_query(q) for _, q in asked])
            for (s, q), a in zip(asked, replies):
                heapq.heappush(answers, (now + cfg.component_latency_s, next(seq), s.robot.id, s.episode_id,
                                         q.query_id, a))
        pending = getattr(server, "pending", None)
        if submitted or (callable(pending) and pending()):
            step = server.step(now)
            for chunk in step.chunks:
                post(chunk, now + lc.latency_s)
            for rid, round_id in step.refresh:
                s = by_id.get(rid)
                obs = s.client.refresh(round_id, now) if s is not None and s.active else None
                if obs is not None:
                    for notice in server.submit(obs, now):
                        post(notice, now)
    return results


def summarise(results: Sequence[ShiftResult]) -> dict:
    """Totals per (setting, task): what a factory manager reads."""
    out: dict = {}
    for r in results:
        d = out.setdefault(r.setting, {}).setdefault(r.task, {
            "shifts": 0, "shift_s": 0.0, "completed": 0, "episodes": 0, "timeouts": 0, "resets": 0,
            "resets_not_failed": 0, "operator_resets": 0, "intruder_s": 0.0, "moving_with_intruder_s": 0.0, "held_s": 0.0,
            "escalations": 0})
        d["shifts"] += 1
        for k in ("shift_s", "completed", "episodes", "timeouts", "resets", "resets_not_failed", "operator_resets",
                  "intruder_s",
                  "moving_with_intruder_s", "held_s", "escalations"):
            d[k] = round(d[k] + getattr(r, k), 3)
    for tasks in out.values():
        for d in tasks.values():
            d["completed_per_min"] = round(60.0 * d["completed"] / d["shift_s"], 3) if d["shift_s"] else 0.0
            d["moving_share_with_intruder"] = (round(d["moving_with_intruder_s"] / d["intruder_s"], 3)
                                               if d["intruder_s"] else None)
    return out
