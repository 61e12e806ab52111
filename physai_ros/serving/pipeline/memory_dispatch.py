"""Kairos's memory-aware time-slot dispatcher (§6) on the instances that answer component questions
(fleet.yaml `server.components.kv_budget_mb` and `placement`; docs/factory.md).

scheduler.agents.dispatcher.TimeSlotDispatcher holds the model: a question's KV memory grows
linearly from its prompt (the observation's prefix and the question) to its last answer token
over the time its agent is expected to take; an instance is a candidate only if none of its
0.5 s slots would overflow its budget, and the lowest expected peak wins. This module applies it
to the server's backends, which answer one batch at a time:

- a worker forming its instance's next batch takes a question only where the dispatcher admits it
  (on this instance, or, with `placement: memory`, on whichever free instance it chooses: the
  question is then left for that instance's worker, which the service wakes);
- a question that fits no free instance waits for memory (counted); one that would not fit even
  an empty instance is admitted alone on an empty one (counted `over_budget`), so no question
  waits forever;
- a question's expected time is its agent's measured batch time (a running mean; before the
  first, `default_expected_s`), as Kairos's dispatcher uses the agent's latency profile;
- between two equal peaks, the instance the robot's route names wins (its System 1 prefix is
  kept there, so the question skips its own prefill).

Plain data and no locks: the service calls it under its own lock.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Collection, Mapping

from physai_ros.pipeline.backend import KVDemand
from physai_ros.scheduler.agents.dispatcher import InstanceSpec, MemoryDemand, TimeSlotDispatcher

PLACEMENTS = ("route", "memory")


@dataclass(frozen=True)
class Admission:
    """Where a question goes: `instance`, or None (it waits for memory). ticket: pass it to
    `complete` when the batch ends (None when nothing was committed: the question was left for
    another instance, or waits)."""
    instance: str | None
    ticket: int | None = None
    over_budget: bool = False


def gated_instances(backends: Mapping[str, Any], shared_key: str) -> dict[str, str]:
    """Backend key -> instance name, for the backends that can say a question's K/V
    (`kv_demand`): one instance per backend object, named by one of its keys other than
    `shared_key` (a factory plan's first instance is served under `vla` and `vla@<instance>`)."""
    out: dict[str, str] = {}
    for b in {id(b): b for b in backends.values()}.values():
        if callable(getattr(b, "kv_demand", None)):
            keys = sorted(k for k, v in backends.items() if v is b)
            name = next((k for k in keys if k != shared_key), keys[0])
            out.update((k, name) for k in keys)
    return out


def demand_of(backend: Any, query: Any) -> KVDemand:
    """The backend's word on a query's K/V; one it cannot give (its kv_demand raised) counts as
    none, so the query is still served (its batch says what is wrong with it) and the worker
    thread never dies of it."""
    try:
        return backend.kv_demand(query)
    except Exception:
        return KVDemand(0, 0)


class ComponentMemoryDispatch:
    """instances: the names of the instances answering gated questions; capacity_bytes: each
    one's K/V budget for them (None: unbounded, so only the choice between instances is made)."""

    def __init__(self, instances: Collection[str], capacity_bytes: float | None, slot_s: float = 0.5,
                 default_expected_s: float = 0.5):
        if not instances:
            raise ValueError("no instances to dispatch to")
        if capacity_bytes is not None and not capacity_bytes > 0:
            raise ValueError(f"capacity_bytes: expected > 0, got {capacity_bytes!r}")
        self.capacity_bytes = float("inf") if capacity_bytes is None else float(capacity_bytes)
        self.instances = tuple(sorted(instances))
        self.slots = TimeSlotDispatcher([InstanceSpec(i, self.capacity_bytes) for i in self.instances], slot_s)
        self.default_expected_s = float(default_expected_s)
        self._expected: dict[str, tuple[float, int]] = {}  # agent -> (mean batch seconds, batches)
        self._ids = itertools.count(1)
        self._over: dict[int, str] = {}  # over-budget tickets -> instance (not in the slot model)
        self.admitted = 0
        self.waited = 0  # times a question was passed over for lack of memory
        self.over_budget = 0
        self.off_route = 0  # admitted on another instance than the robot's route names
        self.peak_bytes: dict[str, float] = {i: 0.0 for i in self.instances}

    def expected_s(self, agent: str) -> float:
        return self._expected.get(agent, (self.default_expected_s, 0))[0]

    def observed(self, agent: str, seconds: float) -> None:
        """An answer of `agent` took `seconds` in its batch: the running mean its next questions'
        memory is modelled with."""
        mean, n = self._expected.get(agent, (0.0, 0))
        n = min(n + 1, 64)  # a window of about 64 answers, so a drifting backend is followed
        self._expected[agent] = (mean + (max(seconds, 1e-3) - mean) / n, n)

    def demand(self, agent: str, kv: KVDemand) -> MemoryDemand:
        t = self.expected_s(agent)
        return MemoryDemand(float(kv.prompt_bytes), float(kv.answer_bytes) / t, t)

    def admit(self, agent: str, kv: KVDemand, me: str, free: Collection[str], now_s: float,
              route: str | None = None) -> Admission:
        """Where this question goes, `me` (the instance forming a batch) included in `free` (the
        instances running no batch; only `me` unless placement is memory). Commits only when
        the answer is `me`."""
        want = self.demand(agent, kv)
        peaks = self.slots.evaluate(want, now_s, eligible=set(free) | {me})
        peaks = {i: p for i, p in peaks.items() if p is not None and i not in self._over.values()}
        if not peaks:
            if self.slots.assigned_count(me) == 0 and me not in self._over.values() \
                    and want.at(want.expected_s) > self.capacity_bytes:
                ticket = next(self._ids)
                self._over[ticket] = me
                self.over_budget += 1
                self.admitted += 1
                self.peak_bytes[me] = max(self.peak_bytes[me], want.at(want.expected_s))
                return Admission(me, ticket, over_budget=True)
            self.waited += 1
            return Admission(None)
        best = min(peaks, key=lambda i: (peaks[i], i != route, i))
        if best != me:
            return Admission(best)
        ticket = next(self._ids)
        placed = self.slots.dispatch(ticket, want, now_s, eligible={me})
        assert placed is not None  # evaluate said it fits
        self.admitted += 1
        self.off_route += route is not None and route != me
        self.peak_bytes[me] = max(self.peak_bytes[me], placed.expected_peak_bytes)
        return Admission(me, ticket)

    def complete(self, ticket: int, now_s: float) -> None:
        if self._over.pop(ticket, None) is None:
            self.slots.complete(ticket, now_s)

    def diagnostics(self) -> dict:
        """Flat, for /diagnostics: memory.kv_budget_mb (None: unbounded), memory.admitted,
        memory.waited_for_memory, memory.over_budget, memory.off_route, memory.peak_mb.<instance>."""
        budget = self.capacity_bytes
        d = {"memory.kv_budget_mb": round(budget / (1 << 20), 3) if budget != float("inf") else None,
             "memory.admitted": self.admitted, "memory.waited_for_memory": self.waited,
             "memory.over_budget": self.over_budget, "memory.off_route": self.off_route}
        d.update((f"memory.peak_mb.{i}", round(b / (1 << 20), 3)) for i, b in self.peak_bytes.items())
        return d
