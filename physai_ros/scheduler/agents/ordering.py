"""Request queues: Kairos workflow-aware priority order and the FIFO / shortest-predicted baselines.

Kairos (§5): requests are ordered first by their agent's priority key (priority.AgentPriority,
lower first), then within an agent by application-level start time (§5.2: the msg_id's start,
here when the robot's observation for the pipeline step was captured), so requests that already
accumulated more latency in earlier stages go first. Baselines: FIFO by arrival at the queue
(Parrot's FCFS) and shortest-predicted-first by the agent's expected execution time.

One heap keyed by a policy's key function, with lazy deletion so a dispatcher can take requests
out of the middle (a request that fits no instance stays queued while the next one is tried).
`reprioritize` re-keys everything after the agent priorities change: O(n) heapify.
"""
from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass
from typing import Callable, Dict, Iterator, List, Optional, Tuple

from physai_ros.scheduler.agents.priority import UNKNOWN_KEY, AgentPriority


@dataclass(frozen=True)
class LanguageRequest:
    """One language-model request of a pipeline component (agent).

    app_start_s: application-level start of its workflow (msg_id); arrival_s: when this request
    entered the queue. prompt_tokens: known at dispatch (drives the prefill memory of eq. 1)."""
    request_id: int
    agent: str
    msg_id: str
    app_start_s: float
    arrival_s: float
    prompt_tokens: int
    upstream: Optional[str] = None


Key = Tuple
KeyFn = Callable[[LanguageRequest], Key]


def fifo_key(req: LanguageRequest) -> Key:
    return (req.arrival_s, req.request_id)


def make_spf_key(expected_time: Callable[[str], float]) -> KeyFn:
    """Shortest-predicted-first: agent's expected execution time, then FIFO."""
    def key(req: LanguageRequest) -> Key:
        return (expected_time(req.agent), req.arrival_s, req.request_id)
    return key


def make_kairos_key(priority: Callable[[], Optional[AgentPriority]]) -> KeyFn:
    """(agent priority key, application start, arrival, id). `priority` is read at keying time,
    so a queue re-keyed after a priority update sees the new order."""
    def key(req: LanguageRequest) -> Key:
        p = priority()
        k = p.key(req.agent) if p is not None else UNKNOWN_KEY
        return (k, req.app_start_s, req.arrival_s, req.request_id)
    return key


class RequestQueue:
    """Priority queue of LanguageRequests under one key function."""

    def __init__(self, key_fn: KeyFn) -> None:
        self._key_fn = key_fn
        self._heap: List[Tuple[Key, int, LanguageRequest]] = []
        self._live: Dict[int, LanguageRequest] = {}
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, request_id: int) -> bool:
        return request_id in self._live

    def push(self, req: LanguageRequest) -> None:
        if req.request_id in self._live:
            raise ValueError(f"request {req.request_id} already queued")
        self._live[req.request_id] = req
        heapq.heappush(self._heap, (self._key_fn(req), next(self._seq), req))

    def remove(self, request_id: int) -> LanguageRequest:
        req = self._live.pop(request_id)
        # Lazy deletion; compact when dead entries dominate so scans stay O(live).
        if len(self._heap) > 2 * len(self._live) + 32:
            self._rebuild()
        return req

    def pop(self) -> Optional[LanguageRequest]:
        while self._heap:
            _, _, req = heapq.heappop(self._heap)
            if self._live.get(req.request_id) is req:
                del self._live[req.request_id]
                return req
        return None

    def ordered(self, limit: Optional[int] = None) -> List[LanguageRequest]:
        """Live requests in service order (the first `limit` of them)."""
        live = [e for e in self._heap if self._live.get(e[2].request_id) is e[2]]
        top = heapq.nsmallest(limit, live) if limit is not None else sorted(live)
        return [e[2] for e in top]

    def __iter__(self) -> Iterator[LanguageRequest]:
        return iter(self.ordered())

    def reprioritize(self) -> None:
        self._rebuild()

    def _rebuild(self) -> None:
        self._heap = [(self._key_fn(r), next(self._seq), r) for r in self._live.values()]
        heapq.heapify(self._heap)


def make_queue(policy: str, priority: Callable[[], Optional[AgentPriority]] = lambda: None,
               expected_time: Optional[Callable[[str], float]] = None) -> RequestQueue:
    """policy: "kairos", "fifo" or "spf"."""
    if policy == "kairos":
        return RequestQueue(make_kairos_key(priority))
    if policy == "fifo":
        return RequestQueue(fifo_key)
    if policy == "spf":
        if expected_time is None:
            raise ValueError("spf needs expected_time")
        return RequestQueue(make_spf_key(expected_time))
    raise ValueError(f"unknown queue policy {policy!r}")

