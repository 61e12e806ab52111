"""Memory-aware time-slot dispatcher (Kairos §6) and the round-robin baseline.

Each request's KV-cache memory is modelled as linear in time (eq. 1-2):
    m(t) = prompt_bytes + decode_bytes_per_s * (t - start)   for start <= t <= start + expected_s
where prompt_bytes is known at dispatch (prompt tokens x KV bytes per token), decode_bytes_per_s
comes from hardware profiling and expected_s is the mode of the agent's single-request latency
(latency_dist). An instance's memory is the sum over its assigned requests (eq. 3).

The future is cut into fixed slots (0.5 s, the paper's trade-off). A request's usage in a slot is
m at the slot's end (or at its expected end, if earlier): the slot's maximum, since m grows. An
instance is a candidate only if no slot of the request's span would exceed its capacity; among
candidates the one with the lowest expected peak over all its future slots wins; with none the
request stays queued (dispatch returns None). A request that completes early has its remaining
slot usage removed. An instance that reports an OOM/preemption gets no new request until it
drains: by default until every request assigned to it has completed; with the engine's status
(Kairos's Status Monitor tracks preempted requests per instance) the caller may lift the
suspension earlier with `resume` once the instance has no preempted request left.

Plain Python over dicts of slot index -> bytes: with ~tens of future slots and 2-4 instances one
decision is tens of microseconds.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Collection, Dict, List, Optional, Sequence, Set, Tuple


@dataclass(frozen=True)
class InstanceSpec:
    name: str
    capacity_bytes: float


@dataclass(frozen=True)
class MemoryDemand:
    """Eq. 1-2 inputs for one request."""
    prompt_bytes: float
    decode_bytes_per_s: float
    expected_s: float

    def at(self, elapsed_s: float) -> float:
        return self.prompt_bytes + self.decode_bytes_per_s * min(max(elapsed_s, 0.0), self.expected_s)


@dataclass(frozen=True)
class Placement:
    request_id: int
    instance: str
    start_s: float
    expected_end_s: float
    expected_peak_bytes: float   # the chosen instance's expected peak with this request


class TimeSlotDispatcher:
    """Kairos §6 dispatcher. Times are seconds on one clock (the caller's)."""

    def __init__(self, instances: Sequence[InstanceSpec], slot_s: float = 0.5) -> None:
        if slot_s <= 0:
            raise ValueError("slot_s must be > 0")
        if len({i.name for i in instances}) != len(instances) or not instances:
            raise ValueError("instances must be non-empty with unique names")
        self.slot_s = slot_s
        self.instances = {i.name: i for i in instances}
        self._usage: Dict[str, Dict[int, float]] = {i.name: {} for i in instances}
        self._assigned: Dict[int, Tuple[str, Dict[int, float]]] = {}
        self._count: Dict[str, int] = {i.name: 0 for i in instances}
        self._suspended: Set[str] = set()

    # ---- model ---------------------------------------------------------------------------
    def request_slots(self, demand: MemoryDemand, now_s: float) -> Dict[int, float]:
        """Slot index -> the request's memory in that slot (its maximum there)."""
        end = now_s + max(demand.expected_s, 0.0)
        first = math.floor(now_s / self.slot_s)
        last = max(first, math.ceil(end / self.slot_s) - 1)
        return {k: demand.at(min((k + 1) * self.slot_s, end) - now_s) for k in range(first, last + 1)}

    def _purge(self, name: str, now_s: float) -> None:
        cur = math.floor(now_s / self.slot_s)
        usage = self._usage[name]
        for k in [k for k in usage if k < cur]:
            del usage[k]

    def evaluate(self, demand: MemoryDemand, now_s: float,
                 eligible: Optional[Collection[str]] = None) -> Dict[str, Optional[float]]:
        """Per instance: expected peak over its future slots with this request added, or None
        where it is not a candidate (a slot overflows, suspended, or not eligible)."""
        slots = self.request_slots(demand, now_s)
        out: Dict[str, Optional[float]] = {}
        for name, spec in self.instances.items():
            if name in self._suspended or (eligible is not None and name not in eligible):
                out[name] = None
                continue
            self._purge(name, now_s)
            usage = self._usage[name]
            peak = 0.0
            ok = True
            for k, m in slots.items():
                total = usage.get(k, 0.0) + m
                if total > spec.capacity_bytes:
                    ok = False
                    break
                peak = max(peak, total)
            if not ok:
                out[name] = None
                continue
            rest = [v for k, v in usage.items() if k not in slots]
            out[name] = max([peak] + rest)
        return out

    # ---- decisions -----------------------------------------------------------------------
    def dispatch(self, request_id: int, demand: MemoryDemand, now_s: float,
                 eligible: Optional[Collection[str]] = None) -> Optional[Placement]:
        """Choose and commit an instance, or None (the request stays queued)."""
        if request_id in self._assigned:
            raise ValueError(f"request {request_id} already assigned")
        peaks = self.evaluate(demand, now_s, eligible)
        cands = [(p, n) for n, p in peaks.items() if p is not None]
        if not cands:
            return None
        peak, name = min(cands)      # ties: by instance name, deterministic
        slots = self.request_slots(demand, now_s)
        usage = self._usage[name]
        for k, m in slots.items():
            usage[k] = usage.get(k, 0.0) + m
        self._assigned[request_id] = (name, slots)
        self._count[name] += 1
        return Placement(request_id, name, now_s, now_s + demand.expected_s, peak)

    def complete(self, request_id: int, now_s: float) -> None:
        """The request finished (early, on time or late): drop its usage from now on."""
        name, slots = self._assigned.pop(request_id)
        cur = math.floor(now_s / self.slot_s)
        usage = self._usage[name]
        for k, m in slots.items():
            if k >= cur and k in usage:
                left = usage[k] - m
                if left <= 1e-6 * max(1.0, m):
                    del usage[k]
                else:
                    usage[k] = left
        self._count[name] -= 1
        if self._count[name] == 0:
            self._suspended.discard(name)      # drained: resume dispatching to it

    def report_oom(self, instance: str, now_s: float) -> None:
        """The instance preempted a request (or ran out of KV memory): no new dispatches to it
        until its assigned requests drain. An idle instance cannot be suspended."""
        if instance not in self.instances:
            raise KeyError(instance)
        if self._count[instance] > 0:
            self._suspended.add(instance)

    def resume(self, instance: str) -> None:
        """The instance's OOM backlog drained (status monitor: no preempted request left)."""
        if instance not in self.instances:
            raise KeyError(instance)
        self._suspended.discard(instance)

    # ---- inspection ----------------------------------------------------------------------
    def suspended(self) -> Set[str]:
        return set(self._suspended)

    def assigned_count(self, instance: str) -> int:
        return self._count[instance]

    def usage(self, instance: str) -> Dict[int, float]:
        return dict(self._usage[instance])

    def instance_of(self, request_id: int) -> Optional[str]:
        entry = self._assigned.get(request_id)
        return entry[0] if entry else None


class RoundRobinDispatcher:
    """Baseline (Parrot / Ayo): the next eligible instance in turn, memory ignored."""

    def __init__(self, instances: Sequence[InstanceSpec]) -> None:
        if not instances:
            raise ValueError("no instances")
        self.names: List[str] = [i.name for i in instances]
        self._next = 0
        self._assigned: Dict[int, str] = {}

    def dispatch(self, request_id: int, demand: MemoryDemand, now_s: float,
                 eligible: Optional[Collection[str]] = None) -> Optional[Placement]:
        n = len(self.names)
        for step in range(n):
            name = self.names[(self._next + step) % n]
            if eligible is None or name in eligible:
                self._next = (self._next + step + 1) % n
                self._assigned[request_id] = name
                return Placement(request_id, name, now_s, now_s + demand.expected_s, float("nan"))
        return None

    def complete(self, request_id: int, now_s: float) -> None:
        self._assigned.pop(request_id)

    def report_oom(self, instance: str, now_s: float) -> None:
        """Round-robin does not react to memory."""

    def resume(self, instance: str) -> None:
        """Nothing to resume."""

    def suspended(self) -> Set[str]:
        return set()
