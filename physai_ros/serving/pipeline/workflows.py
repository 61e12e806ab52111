"""A robot's pipeline steps as Kairos workflows, seen from the server (Kairos §4.1-§4.3 over the
task pipelines' real chains; scheduler.agents.workflow reconstructs and measures them).

One workflow is one pipeline step of one robot: System 2's subgoal (the root, when the task has a
planner), then the safety checks and monitor questions asked while System 1 executes it, up to
the monitor's verdict that ends the step ("done" or "failed"). The server sees every one of those
questions, so it needs nothing from the robot to cut its stream into steps:
- a System 2 answer starts a new step (a replan or the next subgoal ends the previous one);
- a monitor answer "done" or "failed" ends the step it belongs to;
- a step open longer than `stale_s` (the robot left, or its task has no end the server sees) is
  dropped unmeasured.
A question's remaining latency is then from when the server received it to the end of its
step's last answer: a planner's question carries the whole step, a monitor question near the end
almost nothing. A task without System 2 has steps rooted at their first question.
"""
from __future__ import annotations

from dataclasses import dataclass

from physai_ros.pipeline.answers import MONITOR_LABELS, Parsed, parse_label
from physai_ros.scheduler.agents.workflow import ExecRecord, WorkflowAnalyzer

PLANNER = "system2"
ENDS_STEP = ("done", "failed")  # monitor labels (pipeline.answers.MONITOR_LABELS)


@dataclass
class _Step:
    msg_id: str
    opened: float
    root: str | None = None  # the planner agent, when the step has one
    root_end: float = 0.0


class StepLedger:
    def __init__(self, analyzer: WorkflowAnalyzer, stale_s: float = 300.0):
        self.analyzer = analyzer
        self.stale_s = stale_s
        self._open: dict[str, _Step] = {}  # robot id -> its open step
        self._count: dict[str, int] = {}
        self.steps_completed = 0
        self.steps_dropped = 0

    def answered(self, robot_id: str, agent: str, component: str, received: float, done: float, text: str) -> bool:
        """One answered question (`agent`: its task's agent name). True when it completed a step
        (the agents' remaining-latency samples grew)."""
        completed = False
        if component == PLANNER:
            completed = self._close(robot_id)
            step = self._new(robot_id, received)
            step.root, step.root_end = agent, done
            self.analyzer.add(ExecRecord(agent, step.msg_id, None, received, done))
            return completed
        step = self._open.get(robot_id)
        if step is None or received - step.opened > self.stale_s:
            if step is not None:
                self._drop(robot_id)
            step = self._new(robot_id, received)
        # A question asked before the planner's answer ran beside it, not after it: a root too.
        upstream = step.root if step.root is not None and received >= step.root_end else None
        self.analyzer.add(ExecRecord(agent, step.msg_id, upstream, received, done))
        if component == "monitor":
            verdict = parse_label(text, MONITOR_LABELS)
            if isinstance(verdict, Parsed) and verdict.value in ENDS_STEP:
                completed = self._close(robot_id)
        return completed

    def forget(self, robot_id: str) -> None:
        """The robot left: its open step is dropped unmeasured."""
        if robot_id in self._open:
            self._drop(robot_id)

    def open_steps(self) -> int:
        return len(self._open)

    def _new(self, robot_id: str, now: float) -> _Step:
        k = self._count.get(robot_id, 0) + 1
        self._count[robot_id] = k
        step = self._open[robot_id] = _Step(f"{robot_id}#{k}", now)
        return step

    def _close(self, robot_id: str) -> bool:
        step = self._open.pop(robot_id, None)
        if step is None:
            return False
        self.analyzer.complete(step.msg_id)
        self.steps_completed += 1
        return True

    def _drop(self, robot_id: str) -> None:
        step = self._open.pop(robot_id)
        self.analyzer.discard(step.msg_id)
        self.steps_dropped += 1
