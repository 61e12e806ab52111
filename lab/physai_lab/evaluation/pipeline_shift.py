"""A robot's shift with its task pipeline against the same shift with System 1 alone,
in simulated time, in one process: what the planner, safety checker and monitor are worth.

A shift is `shift_s` simulated seconds of one sim robot working as it does live: the sim runs its
episodes back to back (its own reset after a success or the task's time limit), and with the
pipeline the monitor's "failed" resets the episode early (sim.runtime.request_reset), "unsafe"
holds the robot, System 2's subgoal is System 1's prompt. The robot side is lockstep's
(EpisodeSlot: sim, client, trajectory buffer); the pipeline side is the robot client's own
(client.pipeline.ClientPipeline) with its component queries answered by a real backend
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

from physai_ros.client.pipeline import ClientPipeline, OutgoingQuery, PipelineOutput
from physai_ros.config.robot import RobotConfig
from physai_ros.control.hold import apply_hold
from physai_ros.pipeline.backend import ComponentBackend, ComponentQuery
from physai_ros.protocol.observation import ImageData

from physai_lab.evaluation.lockstep import EpisodeSlot, LockstepConfig, Server, SimClock, run_episodes

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
    dones: int = 0  # the monitor's "done" verdicts ...
    false_dones: int = 0  # ... of which the sim's success test did not hold (the attempt's pipeline ends early)
    # The sim's episodes with at least one false "done": a monitor asked every period answers again
    # on a still state, so false_dones counts answers and this counts attempts.
    false_done_attempts: int = 0
    tip_offs: int = 0  # cubes let go beside the cube below them, which tipped off it (the sim's count)
    pipeline: dict = field(default_factory=dict)  # ClientPipeline.status()["pipeline"], components' counts
    # Why each of the pipeline's resets came, by the sim's ground truth (its failure reason: dropped, knocked,
    # wrong_order, timeout; "not failed" for a reset of a healthy episode): where a task is lost.
    reset_reasons: dict = field(default_factory=dict)
    # Drops by the sim's ground truth, (sim time, cause): "slip" (an injected drop: the cube fell
    # through closed fingers) or "released" (let go away from the pad: the policy's own drop) ...
    drops: tuple = ()
    grasp_lost_at: tuple = ()  # ... and the sim times the robot's grasp watch said "lost"
    # The sim's episode ends, (sim time, "success" | "timeout" | "asked": a reset the pipeline or
    # the operator asked for): a reset takes a held cube out of the fingers.
    sim_resets: tuple = ()


DONE_WINDOW_S = 1.0  # a "done" answered this long after the success test last held is still a true one


def system1_only(robot: RobotConfig) -> RobotConfig:
    """The same robot, its task without a pipeline (System 1 on the task's prompt)."""
    return dataclasses.replace(robot, task=dataclasses.replace(robot.task, pipeline=None))


def pipeline_robots(robots: Sequence[RobotConfig]) -> dict[str, RobotConfig]:
    """Fleet task name -> the first simulated robot whose task has a pipeline (its sim's events as
    fleet.yaml sets them): the robot a shift bench clones for that task."""
    out: dict[str, RobotConfig] = {}
    for r in robots:
        if r.simulated and r.task.pipeline is not None:
            out.setdefault(r.task.name, r)
    return out


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
        self.reset_reasons: dict[str, int] = {}
        self.intruder_s = self.moving_with_intruder_s = self.held_s = 0.0
        self.escalated_at: float | None = None
        self.escalations = 0
        self.dones = self.false_dones = self.false_done_attempts = 0
        self._false_done_episode = -1  # the sim episode (runtime.episodes_finished) last counted there
        self._last_success = -1e9  # sim time the success test last held
        self.drops: list[tuple[float, str]] = []
        self.grasp_lost_at: list[float] = []
        world = self.runtime.world
        self._slips_seen = world.events.failures.drops if world.events is not None else 0
        self._failure = world.failure
        self.sim_resets: list[tuple[float, str]] = []
        rt = self.runtime
        self._ends_seen = (rt.episodes_finished, rt.resets_requested, rt.timeouts)

    def _reset(self, reason: str) -> None:
        label, why = self.runtime.world.progress()
        if label != "failed":
            self.resets_not_failed += 1
        key = why if label == "failed" else "not failed"
        self.reset_reasons[key] = self.reset_reasons.get(key, 0) + 1
        self.runtime.request_reset()

    def over(self) -> bool:
        return self.runtime.world.time >= self.shift_s

    def control(self, now: float):
        out = super().control(now)
        self.observe(out, 1.0 / self.cfg.physics_rate_hz)
        return out

    def deliver(self, chunk, now: float) -> None:
        super().deliver(chunk, now)
        if self.pipeline is not None:
            self.pipeline.on_chunk_taken(now)

    def observe(self, out, dt: float) -> None:
        snap = out.snapshot
        if snap.success:
            self._last_success = snap.time
        if snap.intruder_present:
            self.intruder_s += dt
            if float(np.max(np.abs(snap.velocities))) > MOVING_RAD_S:
                self.moving_with_intruder_s += dt
        if self.pipeline is not None and self.pipeline.held:
            self.held_s += dt
        world = self.runtime.world
        slips = world.events.failures.drops if world.events is not None else 0
        if slips > self._slips_seen:
            self.drops.append((round(world.time, 3), "slip"))
        elif world.failure == "dropped" and self._failure != "dropped":
            self.drops.append((round(world.time, 3), "released"))
        self._slips_seen, self._failure = slips, world.failure
        rt = self.runtime
        ends = (rt.episodes_finished, rt.resets_requested, rt.timeouts)
        if ends[0] > self._ends_seen[0]:
            cause = "asked" if ends[1] > self._ends_seen[1] else "timeout" if ends[2] > self._ends_seen[2] else "success"
            self.sim_resets.append((round(world.time, 3), cause))
        self._ends_seen = ends

    def apply(self, out: PipelineOutput, now: float) -> list[OutgoingQuery]:
        for hold in out.holds:
            apply_hold(self.buffer, hold.round_id, now)
        for ev in out.events:
            if ev.kind == "end_task":  # true if the success test held when its frame was taken (the
                self.dones += 1         # answer comes component_latency_s later, the sim resets 0.5 s after)
                if self.runtime.world.time - self._last_success > DONE_WINDOW_S:
                    self.false_dones += 1
                    episode = self.runtime.episodes_finished
                    self.false_done_attempts += episode != self._false_done_episode
                    self._false_done_episode = episode
            if ev.kind == "grasp_lost":
                self.grasp_lost_at.append(round(self.runtime.world.time, 3))
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

    def finish(self) -> ShiftResult:
        rt = self.runtime
        self._round_base = self.client.round_id  # the next shift's client continues the round ids
        self.active = False
        status = self.pipeline.status()["pipeline"] if self.pipeline is not None else {}
        return ShiftResult(
            setting=self.setting, robot_id=self.robot.id, task=rt.world.task.name, seed=self.seed,
            shift_s=round(rt.world.time, 3), completed=int(rt.world.successes), episodes=int(rt.episodes_finished),
            timeouts=int(rt.timeouts), resets=int(rt.resets_requested), resets_not_failed=self.resets_not_failed,
            operator_resets=self.operator_resets,
            intruder_s=round(self.intruder_s, 3), moving_with_intruder_s=round(self.moving_with_intruder_s, 3),
            held_s=round(self.held_s, 3), escalations=self.escalations, dones=self.dones,
            false_dones=self.false_dones, false_done_attempts=self.false_done_attempts, pipeline=status,
            reset_reasons=dict(self.reset_reasons), drops=tuple(self.drops), grasp_lost_at=tuple(self.grasp_lost_at),
            sim_resets=tuple(self.sim_resets), tip_offs=int(rt.world.tip_offs))


class ComponentSide:
    """The pipeline components beside the robots (lockstep.TickSide): each tick, the answers
    whose latency has passed go to their robots' pipelines; each client tick, a robot's due
    questions (and its operator's acknowledgement) are collected; then all of them are asked of
    the backend in one batch, answered `component_latency_s` later."""

    def __init__(self, backend: ComponentBackend | None, cfg: ShiftConfig):
        self.backend, self.cfg = backend, cfg
        self._answers: list = []  # (due, seq, slot, episode, query_id, answer)
        self._asked: list[tuple[ShiftSlot, OutgoingQuery]] = []
        self._seq = itertools.count()

    def begin_tick(self, now: float) -> None:
        while self._answers and self._answers[0][0] <= now + 1e-12:
            _, _, s, ep, qid, answer = heapq.heappop(self._answers)
            if s.active and s.episode_id == ep:
                self._asked += [(s, q) for q in s.apply(s.pipeline.on_answer(qid, answer, now), now)]

    def client_tick(self, s: ShiftSlot, now: float) -> None:
        if s.pipeline is not None:
            self._asked += [(s, q) for q in s.apply(s.pipeline.step(now), now)]
            self._asked += [(s, q) for q in s.operator(now, self.cfg.operator_response_s)]

    def end_tick(self, now: float) -> None:
        if not self._asked:
            return
        asked, self._asked = self._asked, []
        replies = self.backend.answer([_query(q) for _, q in asked])
        for (s, q), a in zip(asked, replies):
            heapq.heappush(self._answers, (now + self.cfg.component_latency_s, next(self._seq), s, s.episode_id,
                                           q.query_id, a))


def run_shifts(server: Server, backend: ComponentBackend | None, robots: Sequence[RobotConfig],
               seeds: Sequence[int], cfg: ShiftConfig = ShiftConfig(), setting: str = "",
               clock: SimClock | None = None,
               slot_hook: Callable[[list[ShiftSlot]], None] | None = None) -> list[ShiftResult]:
    """One shift per seed, on as many robots at once as `robots` has (each a slot; a free slot
    takes the next seed), all sharing `server` (System 1) and `backend` (the components), in
    lockstep.run_episodes' loop. `clock` must be the clock the server reads; slot_hook sees the
    slots before the first tick (a scripted expert or oracle reads their worlds). Returns results
    in the order shifts ended."""
    if backend is None and any(r.task.pipeline is not None for r in robots):
        raise ValueError("robots with a pipeline need a component backend")
    return run_episodes(server, robots, seeds, cfg.lockstep, setting, clock=clock, slot_hook=slot_hook,
                        make_slot=lambda r, lc, st: ShiftSlot(r, lc, st, cfg.shift_s),
                        side=ComponentSide(backend, cfg))


# ShiftResult fields summed per (setting, task).
TOTALS = ("shift_s", "completed", "episodes", "timeouts", "resets", "resets_not_failed", "operator_resets",
          "intruder_s", "moving_with_intruder_s", "held_s", "escalations", "dones", "false_dones",
          "false_done_attempts", "tip_offs")


def summarise(results: Sequence[ShiftResult]) -> dict:
    """Totals per (setting, task): what a factory manager reads."""
    out: dict = {}
    for r in results:
        d = out.setdefault(r.setting, {}).setdefault(r.task, {"shifts": 0, **dict.fromkeys(TOTALS, 0)})
        d["shifts"] += 1
        for k in TOTALS:
            d[k] = round(d[k] + getattr(r, k), 3)
        reasons = d.setdefault("reset_reasons", {})
        for why, n in r.reset_reasons.items():
            reasons[why] = reasons.get(why, 0) + n
    for tasks in out.values():
        for d in tasks.values():
            d["completed_per_min"] = round(60.0 * d["completed"] / d["shift_s"], 3) if d["shift_s"] else 0.0
            d["moving_share_with_intruder"] = (round(d["moving_with_intruder_s"] / d["intruder_s"], 3)
                                               if d["intruder_s"] else None)
    return out
