"""Which waiting component questions a backend answers next: Kairos multi-agent order
(scheduler.agents; docs/factory.md, "Language requests") or arrival order.

The agents are the pipeline components of each task class (`<task>/<component>`: a place_in_order
planner, a pick_place monitor, ...) sharing a vision-language backend. A component question is a
one-stage workflow here (its answer ends the pipeline step: a verdict, a subgoal), so an agent's
remaining-latency samples are its questions' received -> answered times. Kairos §5.1 ranks agents
by their distributions' 1-D MDS distance to the zero-latency anchor (shorter remaining work
first); §5.2 orders one agent's questions by application start (the robot's stamp on the query,
when its pipeline step began), so a question that already waited longer upstream goes first.
The priorities are recomputed every `refresh_every` answers, outside the service's lock.
"""
from __future__ import annotations

import threading
from typing import Any, Sequence

from physai_ros.scheduler.agents import AgentLatencyProfiler, AgentPriority, agent_priorities

ORDERS = ("kairos", "fifo")


def agent_name(task_id: str, component: str) -> str:
    return f"{task_id}/{component}"


class ComponentOrder:
    def __init__(self, policy: str = "kairos", refresh_every: int = 32):
        if policy not in ORDERS:
            raise ValueError(f"component order {policy!r}: expected one of {', '.join(ORDERS)}")
        self.policy = policy
        self.refresh_every = max(1, int(refresh_every))
        self.profiler = AgentLatencyProfiler()
        self.priority: AgentPriority | None = None
        self._since_refresh = 0
        self._lock = threading.Lock()  # the profiler: answers arrive on the worker thread only, reads elsewhere

    def ordered(self, waiting: Sequence[Any]) -> list[Any]:
        """`waiting` (the service's _Waiting entries, in arrival order) in service order."""
        if self.policy == "fifo":
            return list(waiting)
        prio = self.priority
        def key(w):
            agent = agent_name(w.req.task_id, w.req.component)
            return (prio.key(agent) if prio is not None else 0.0, w.req.stamp, w.received)
        return sorted(waiting, key=key)

    def on_answered(self, task_id: str, component: str, latency_s: float) -> bool:
        """Record one answer; True when the priorities are due for a refresh (call refresh())."""
        with self._lock:
            agent = agent_name(task_id, component)
            self.profiler.add_single(agent, latency_s)
            self.profiler.add_remaining(agent, latency_s)
            self._since_refresh += 1
            return self.policy == "kairos" and self._since_refresh >= self.refresh_every

    def refresh(self) -> AgentPriority:
        with self._lock:
            self._since_refresh = 0
            samples = self.profiler.remaining_samples()
            converged = self.profiler.remaining_converged()
        self.priority = agent_priorities(samples, converged)
        return self.priority

    def diagnostics(self) -> dict[str, Any]:
        p = self.priority
        return {"order": self.policy,
                "agent_order": ", ".join(p.order) if p is not None else "",
                "agent_keys_ms": {a: round(k * 1e3, 1) for a, k in p.keys.items()} if p is not None else {}}
