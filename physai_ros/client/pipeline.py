"""A task pipeline on the robot client (docs/pipelines.md "Robot side"), without ROS.

`ClientPipeline` sits between one robot's `pipeline.controller.PipelineController` and its
`RobotClientCore`: it turns the controller's due queries into `OutgoingQuery` data carrying the
newest images and joint positions the client already keeps, and carries out the controller's
decisions on the client:

  SetPrompt     the prompt the next Observations carry (core.prompt)
  Hold          no System 1 round starts (core.pipeline_hold) and the robot stops: a give-up hold
                chunk, today's stop path (stop_and_resend), which stops the trajectory
                controller, drops its buffered plan and refuses the round that was awaited
  DropPlan      the same give-up hold chunk (one per batch of decisions, whatever asked for it)
  Resume        rounds start again (the next observation is fresh: the plan was dropped)
  Replan        nothing more on the robot (the controller re-asks System 2 itself)
  ResetEpisode  `request_reset(reason)`, an injected callable (the sim's reset_episode service)
  EndTask       counted only: the sim ends a successful episode itself (sim.runtime: its success
                test, then a new episode after reset_delay_s)
  Escalate      latched in the controller (held, reason kept) until `acknowledge`
  GraspLost     counted only (the grasp watch, fed the joint positions at every step, saw the held
                object slip out; the DropPlan or ResetEpisode its on_lost asks for follows it)
  Acknowledged  the client's own System 1 stop (core.resume) is cleared with it

Every decision becomes a `PipelineEventData` (the node publishes them as PipelineEvent). System 1's
own escalation (the client's deadline monitor stopping it) is latched in the controller too, so
one latch and one acknowledgement cover the robot. `on_chunk_taken` counts System 1 predictions
(System 2's call ratio) for chunks taken for execution that answer a round started after the
last pipeline hold.

The controller starts at the first `step` where the client is registered and has every input,
so a fleet whose server is still loading does not miss its first component SLOs.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Callable

import numpy as np

from physai_ros.client.robot_client import RobotClientCore
from physai_ros.client.types import ClientState, HoldCommand
from physai_ros.pipeline.backend import ComponentAnswer
from physai_ros.pipeline.controller import PipelineController
from physai_ros.pipeline.decisions import (Acknowledged, Decision, DropPlan, EndTask, Escalate, GraspLost, Hold,
                                           Replan, ResetEpisode, SetPrompt)
from physai_ros.pipeline.grasp_watch import GraspWatch
from physai_ros.protocol.observation import ImageData

SOURCES = ("system1", "system2", "safety", "monitor")


@dataclass(frozen=True)
class OutgoingQuery:
    """A ComponentQuery to publish (the node adds the header and the auth tag)."""

    robot_id: str
    task_id: str
    query_id: int
    component: str
    question: str
    task_prompt: str
    images: tuple[ImageData, ...]
    state: np.ndarray
    max_tokens: int
    stamp: float  # when it was asked (the controller's asked_at)
    deadline: float


@dataclass(frozen=True)
class PipelineEventData:
    """One decision, as the PipelineEvent message carries it."""

    robot_id: str
    task_id: str
    kind: str
    source: str
    reason: str
    text: str
    retry: int
    escalated: bool
    stamp: float


@dataclass
class PipelineOutput:
    """What the node publishes after a call: queries, hold chunks and events, in this order."""

    queries: list[OutgoingQuery] = field(default_factory=list)
    holds: list[HoldCommand] = field(default_factory=list)
    events: list[PipelineEventData] = field(default_factory=list)

    def extend(self, other: "PipelineOutput") -> None:
        self.queries += other.queries
        self.holds += other.holds
        self.events += other.events


@dataclass(frozen=True)
class AckResult:
    accepted: bool
    reason: str  # why not: "not_escalated"
    cleared: str  # the escalation cleared
    output: PipelineOutput


def _source(d: Decision) -> str:
    if isinstance(d, (Hold, Escalate)):
        return d.source
    if isinstance(d, SetPrompt):
        return "system2"
    if isinstance(d, (EndTask, ResetEpisode, GraspLost)):
        return "monitor"
    if isinstance(d, Acknowledged):
        return "operator"
    if isinstance(d, (DropPlan, Replan)):
        head = d.reason.split(":", 1)[0]
        return head if head in SOURCES else ("operator" if head == "acknowledged" else "")
    return ""


class ClientPipeline:
    def __init__(self, core: RobotClientCore, request_reset: Callable[[str], None] | None = None,
                 max_tokens: int = 16):
        cfg = core.task.pipeline
        if cfg is None:
            raise ValueError(f"task {core.task.name} has no pipeline")
        self.core = core
        self.controller = PipelineController(core.robot.id, cfg, core.task.prompt)
        self.request_reset = request_reset
        self.max_tokens = max_tokens
        self.started = False
        self.event_counts: Counter[str] = Counter()
        self.resets_requested = 0
        self.resets_unavailable = 0  # ResetEpisode with no reset callable (not a simulated robot)
        self.queries_sent = 0
        self._hold_round = 0  # rounds up to this were stopped by a pipeline hold
        self._last_taken = 0
        self._system1_stopped = False
        # The gripper's own view of a drop (pipeline.grasp_watch), fed the newest joint positions
        # at every step: the monitor component judges single frames and cannot see one.
        self.grasp_watch = GraspWatch(cfg.grasp_watch) if cfg.grasp_watch is not None else None

    @classmethod
    def for_robot(cls, core: RobotClientCore, request_reset: Callable[[str], None] | None = None,
                  max_tokens: int = 16) -> "ClientPipeline | None":
        """None for a task without a pipeline: the client then runs exactly as before."""
        return None if core.task.pipeline is None else cls(core, request_reset, max_tokens)

    # ---- what the node reads -----------------------------------------------------------------

    @property
    def escalated(self) -> str:
        return self.controller.escalated

    @property
    def held(self) -> bool:
        return self.controller.held

    @property
    def counters(self):
        return self.controller.counters

    def status(self) -> dict:
        c = self.controller.counters
        comps = {name: {**asdict(cc), "slo_attainment": round(cc.slo_attainment, 4)}
                 for name, cc in c.components.items()}
        return {"pipeline": {
            "started": self.started, "escalated": c.escalated, "holds": self.controller.holds,
            "subgoal": self.controller.subgoal, "prompt": self.controller.system1_prompt,
            "components": comps, "system1_predictions": c.system1_predictions, "safety_stops": c.safety_stops,
            "replans": c.replans, "retries": c.retries, "total_retries": c.total_retries,
            "task_failures": c.task_failures, "tasks_done": c.tasks_done, "episodes": c.episodes,
            "grasp_losses": c.grasp_losses,
            "grasp_watch": dict(self.grasp_watch.counts) if self.grasp_watch is not None else None,
            "escalations": c.escalations, "unknown_answers": c.unknown_answers,
            "resets_requested": self.resets_requested, "resets_unavailable": self.resets_unavailable,
            "queries_sent": self.queries_sent, "events": dict(self.event_counts)}}

    # ---- driving -----------------------------------------------------------------------------

    def step(self, now: float) -> PipelineOutput:
        """From the node's pipeline timer: start once the client can ask, then SLO checks and
        the due queries; System 1's own escalation is latched here too."""
        out = PipelineOutput()
        if not self.started:
            if self.core.state != ClientState.RUNNING or self.core.latest_inputs() is None:
                return out
            self.started = True
            self._apply(self.controller.start(now), now, out)
        stopped = self.core.stopped
        if stopped and not self._system1_stopped and not self.escalated:
            reason = self.core.escalations[-1] if self.core.escalations else "System 1 stopped"
            self._apply(self.controller.escalate("system1", reason, now), now, out)
        self._system1_stopped = stopped
        step = self.controller.step(now)
        self._apply(list(step.decisions), now, out)
        inputs = self.core.latest_inputs()
        if self.grasp_watch is not None and inputs is not None:
            positions = inputs[1]
            idx = self.grasp_watch.cfg.gripper_index
            if -len(positions) <= idx < len(positions):
                gripper = idx % len(positions)
                if self.grasp_watch.update(now, float(positions[gripper]), np.delete(positions, gripper)) == "lost":
                    self._apply(self.controller.on_grasp_lost(now), now, out)
        for q in step.queries:
            images, state = inputs
            out.queries.append(OutgoingQuery(
                self.core.robot.id, self.core.task.name, q.query_id, q.component, q.question, q.task_prompt,
                images, state, self.max_tokens, q.asked_at, q.deadline))
            self.queries_sent += 1
        return out

    def on_answer(self, query_id: int, answer: ComponentAnswer, now: float) -> PipelineOutput:
        out = PipelineOutput()
        if self.started:
            self._apply(self.controller.on_answer(int(query_id), answer, now), now, out)
        return out

    def on_chunk_taken(self, now: float) -> None:
        """After core.on_chunk: a chunk newly taken for a round started since the last hold is one
        System 1 prediction (System 2's call ratio counts them)."""
        taken = self.core.taken_round
        if taken > self._last_taken:
            self._last_taken = taken
            if self.started and taken > self._hold_round:
                self.controller.on_system1_prediction(now)

    def acknowledge(self, now: float) -> AckResult:
        """The operator's acknowledgement: clears the pipeline's latch and the client's own System 1
        stop together."""
        out = PipelineOutput()
        cleared = self.escalated or (self.core.escalations[-1] if self.core.stopped and self.core.escalations
                                     else "")
        if not self.escalated and not self.core.stopped:
            return AckResult(False, "not_escalated", "", out)
        if self.core.stopped:
            self.core.resume()
        self._system1_stopped = False
        self._apply(self.controller.acknowledge(now), now, out)
        return AckResult(True, "", cleared, out)

    # ---- carrying decisions out ----------------------------------------------------------------

    def _apply(self, decisions: list[Decision], now: float, out: PipelineOutput) -> None:
        if not decisions:
            return
        stop = False
        for d in decisions:
            if isinstance(d, (Hold, DropPlan)):
                stop = True
            if isinstance(d, (ResetEpisode, Acknowledged)) and self.grasp_watch is not None:
                # The reset (or the operator's) takes the cube out of the fingers: the
                # fingers closing after it are no lost grasp.
                self.grasp_watch.reset()
            if isinstance(d, ResetEpisode):
                if self.request_reset is not None:
                    self.resets_requested += 1
                    self.request_reset(d.reason)
                else:
                    self.resets_unavailable += 1
        if stop:
            reason = "; ".join(f"{s}: {r}" for s, r in self.controller.holds.items()) or next(
                d.reason for d in decisions if isinstance(d, (Hold, DropPlan)))
            hold = self.core.hold_for_pipeline(reason, now)
            self._hold_round = self.core.round_id
            if hold is not None:
                out.holds.append(hold)
        if self.controller.held:
            self.core.pipeline_hold = "; ".join(f"{s}: {r}" for s, r in self.controller.holds.items())
        else:
            self.core.release_pipeline_hold()
        self.core.prompt = self.controller.subgoal  # None: the task's prompt
        escalated = bool(self.escalated)
        for d in decisions:
            out.events.append(PipelineEventData(
                self.core.robot.id, self.core.task.name, d.kind, _source(d), getattr(d, "reason", ""),
                getattr(d, "text", ""), getattr(d, "retry", 0), escalated, now))
            self.event_counts[d.kind] += 1
