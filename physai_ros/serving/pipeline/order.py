"""Which waiting component questions a backend answers next: Kairos multi-agent order
(scheduler.agents; docs/factory.md, "Language requests"), shortest predicted first, or arrival
order.

The agents are the pipeline components of each task class (`<task>/<component>`: a place_in_order
planner, a pick_place monitor, ...) sharing a vision-language backend. Their workflows are the
pipelines' real chains (serving.pipeline.workflows: a robot's step from System 2's subgoal through
the safety and monitor questions to the monitor's verdict), so an agent's remaining-latency samples
are from each question's arrival to the end of its step. Kairos §5.1 ranks agents by their
distributions' 1-D MDS distance to the zero-latency anchor (shorter remaining work first); §5.2
orders one agent's questions by application start (the robot's stamp on the query), so a question
that already waited longer goes first. `shortest` ranks agents by their mean answer time instead
(the shortest-predicted-first baseline). Priorities are recomputed every `refresh_every`
answers, outside the service's lock.
"""
from __future__ import annotations

import threading
from typing import Any, Sequence

from physai_ros.scheduler.agents import AgentLatencyProfiler, AgentPriority, agent_priorities
from physai_ros.scheduler.agents.workflow import WorkflowAnalyzer
from physai_ros.serving.pipeline.workflows import StepLedger

ORDERS = ("kairos", "shortest", "fifo")


def agent_name(task_id: str, component: str) -> str:
    return f"{task_id}/{component}"


class ComponentOrder:
    def __init__(self, policy: str = "kairos", refresh_every: int = 32):
        if policy not in ORDERS:
            raise ValueError(f"component order {policy!r}: expected one of {', '.join(ORDERS)}")
        self.policy = policy
        self.refresh_every = max(1, int(refresh_every))
        self.profiler = AgentLatencyProfiler()
        self.steps = StepLedger(WorkflowAnalyzer(self.profiler, record_single=False))
        self.priority: AgentPriority | None = None
        self._shortest: dict[str, float] = {}
        self._since_refresh = 0
        self._lock = threading.Lock()  # the profiler: answers arrive on the worker thread only, reads elsewhere

    def ordered(self, waiting: Sequence[Any]) -> list[Any]:
        """`waiting` (the service's _Waiting entries, in arrival order) in service order."""
        if self.policy == "fifo":
            return list(waiting)
        prio, shortest = self.priority, self._shortest

        def key(w):
            agent = agent_name(w.req.task_id, w.req.component)
            rank = shortest.get(agent, 0.0) if self.policy == "shortest" else \
                (prio.key(agent) if prio is not None else 0.0)
            return (rank, w.req.stamp, w.received)
        return sorted(waiting, key=key)

    def on_answered(self, robot_id: str, task_id: str, component: str, received: float, done: float,
                    text: str = "") -> bool:
        """Record one answer (server clock: received, answered); True when the priorities are due
        for a refresh (call refresh())."""
        with self._lock:
            agent = agent_name(task_id, component)
            self.profiler.add_single(agent, done - received)
            self.steps.answered(robot_id, agent, component, received, done, text)
            self._since_refresh += 1
            return self.policy != "fifo" and self._since_refresh >= self.refresh_every

    def forget(self, robot_id: str) -> None:
        with self._lock:
            self.steps.forget(robot_id)

    def refresh(self) -> AgentPriority | None:
        with self._lock:
            self._since_refresh = 0
            samples = self.profiler.remaining_samples()
            converged = self.profiler.remaining_converged()
            means = {a: d.mean() for a, d in self.profiler.single.items() if len(d)}
        if self.policy == "shortest":
            self._shortest = means
            return None
        if samples:  # before the first step completes there is nothing to rank by
            self.priority = agent_priorities(samples, converged)
        return self.priority

    def diagnostics(self) -> dict[str, Any]:
        p = self.priority
        s = self.steps
        return {"order": self.policy,
                "agent_order": ", ".join(p.order) if p is not None else
                ", ".join(sorted(self._shortest, key=self._shortest.get)),
                "steps_measured": s.steps_completed, "steps_open": s.open_steps(), "steps_dropped": s.steps_dropped,
                "agent_keys_ms": {a: round(k * 1e3, 1) for a, k in p.keys.items()} if p is not None else {}}
