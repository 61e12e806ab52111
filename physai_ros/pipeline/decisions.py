"""What a PipelineController returns (docs/pipelines.md): queries to send, decisions to carry out
and counters to show, all plain data. The caller (ROS adapter, runner, test) does the work; the
controller only decides, as vLLM's scheduler returns plain outputs its engine executes."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence, Union

import numpy as np

from physai_ros.pipeline.backend import ComponentQuery


@dataclass(frozen=True)
class DueQuery:
    """A component query to send now; answer it with on_answer(query_id, ...)."""

    query_id: int
    component: str  # system2 | safety | monitor
    question: str  # the component's prompt, {task} replaced
    task_prompt: str
    asked_at: float
    deadline: float  # asked_at + the component's SLO

    def to_query(self, robot_id: str, images: Sequence[np.ndarray], state: np.ndarray | None = None,
                 max_tokens: int = 16) -> ComponentQuery:
        return ComponentQuery(robot_id=robot_id, component=self.component, question=self.question,
                              task_prompt=self.task_prompt, images=tuple(images), state=state,
                              max_tokens=max_tokens)


@dataclass(frozen=True)
class Hold:
    """Stop at the current position; no System 1 request, no chunk executed. Returned every time a
    hold is asked, even when the robot already holds (carrying it out twice is harmless)."""

    source: str  # system2 | safety | monitor | escalation
    reason: str
    kind = "hold"


@dataclass(frozen=True)
class Resume:
    """No hold source is left: System 1 may act again."""

    kind = "resume"


@dataclass(frozen=True)
class DropPlan:
    """Drop the buffered actions; the next System 1 request uses a fresh observation."""

    reason: str
    kind = "drop_plan"


@dataclass(frozen=True)
class Replan:
    """A new plan is being made (System 2 re-asked at once when the task has one)."""

    reason: str
    kind = "replan"


@dataclass(frozen=True)
class SetPrompt:
    """System 2's subgoal: System 1's prompt until the next one."""

    text: str
    query_id: int
    kind = "set_prompt"


@dataclass(frozen=True)
class EndTask:
    """The monitor said done: the task ends, the sim starts the next episode."""

    reason: str
    kind = "end_task"


@dataclass(frozen=True)
class ResetEpisode:
    """The monitor said failed: reset the robot and the scene and try again (retry-th retry)."""

    retry: int
    reason: str
    kind = "reset_episode"


@dataclass(frozen=True)
class Escalate:
    """Latched until acknowledge(): the robot holds and a human is called (policy)."""

    source: str  # the component whose violations escalated, or escalate()'s source
    reason: str
    policy: str  # stop_and_call_human
    kind = "escalate"


@dataclass(frozen=True)
class Acknowledged:
    """An operator cleared the latched escalation `reason`."""

    reason: str
    kind = "acknowledged"


@dataclass(frozen=True)
class GraspLost:
    """The robot's grasp watch saw the held object slip out (pipeline.grasp_watch). Always
    reported; what follows (nothing, a DropPlan, or a reset as for a failed task) is its `on_lost`."""

    action: str  # ignore | replan | reset
    reason: str = "grasp watch: the held object slipped out"
    kind = "grasp_lost"


Decision = Union[Hold, Resume, DropPlan, Replan, SetPrompt, EndTask, ResetEpisode, Escalate, Acknowledged, GraspLost]


def kinds(decisions: Sequence[Decision]) -> list[str]:
    """Compact names for logs and tests: "hold:safety", "drop_plan", ..."""
    return [f"hold:{d.source}" if isinstance(d, Hold) else d.kind for d in decisions]


@dataclass(frozen=True)
class Step:
    """One step(now): the fallback decisions of SLO misses, then the queries due."""

    decisions: tuple[Decision, ...]
    queries: tuple[DueQuery, ...]


@dataclass
class ComponentCounters:
    asked: int = 0
    answered: int = 0  # valid answers acted on (on time or late)
    on_time: int = 0  # answers (valid or not) within the SLO
    late: int = 0  # answers (valid or not) after the SLO to a query still awaited
    slo_misses: int = 0  # miss events: one per SLO waited without an answer
    stale: int = 0  # answers to given-up queries, ignored
    skipped: int = 0  # periodic asks skipped: the previous query was still in flight
    errors: dict[str, int] = field(default_factory=dict)  # AnswerError value -> count
    consecutive_violations: int = 0  # SLO misses and errors since the last on-time valid answer

    @property
    def slo_attainment(self) -> float:
        n = self.on_time + self.slo_misses
        return self.on_time / n if n else 1.0


@dataclass
class PipelineCounters:
    components: dict[str, ComponentCounters] = field(default_factory=dict)
    system1_predictions: int = 0
    safety_stops: int = 0  # "unsafe" answers
    consecutive_unsafe: int = 0
    replans: int = 0
    retries: int = 0  # in the current task (reset by done and acknowledge)
    total_retries: int = 0
    task_failures: int = 0  # "failed" answers
    grasp_losses: int = 0  # the grasp watch's "lost" (GraspLost)
    tasks_done: int = 0
    episodes: int = 0
    escalations: int = 0
    unknown_answers: int = 0  # answers to ids this controller never issued (or forgot)
    escalated: str = ""  # the latched reason; "" when none
