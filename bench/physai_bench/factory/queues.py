"""The queueing machinery of bench/physai_bench/factory/sim.py (ROSA §3.4 / §4 trace simulator): a heapq event
clock with the request table, and the three kinds of GPU server it replays.

  StaticServer     System 1 with static batching: when idle it takes up to `batch` waiting
                   requests (FIFO) and serves the k it took in s(k) (no waiting for a full batch).
  ContinuousServer a VLM with continuous batching: an iteration admits waiting requests up to
                   max_num_seqs and the prefill budget (prefills_per_iteration), costs
                   decode_step(B running) + prefill of the admitted, and gives every running request
                   one token; a request completes after output_tokens iterations.
  SharedServer     several models time-sharing one GPU (Baseline 1): FIFO, one request at a time,
                   each at its isolated batch-1 time.
run_arrivals / run_open_loop feed one server open-loop (ROSA §3.4.2 Step 1's profiling runs).
"""
from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np


@dataclass(frozen=True)
class RequestTrace:
    """Per request (index = request id): component index (COMPONENTS), robot index (-1: open-loop
    driver), send and completion times, and how many times it completed."""

    comp: np.ndarray
    robot: np.ndarray
    send: np.ndarray
    done: np.ndarray
    completions: np.ndarray



class _Clock:
    """heapq event loop plus the request table every server and robot writes into."""

    def __init__(self) -> None:
        self.heap: list = []
        self.seq = 0
        self.comp: list[int] = []
        self.robot: list[int] = []
        self.send: list[float] = []
        self.done: list[float] = []
        self.count: list[int] = []
        self.on_done: list[Callable[[float, int], None] | None] = []

    def at(self, t: float, fn: Callable, arg=None) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, fn, arg))

    def new_request(self, comp: int, robot: int, now: float, on_done) -> int:
        rid = len(self.comp)
        self.comp.append(comp)
        self.robot.append(robot)
        self.send.append(now)
        self.done.append(math.nan)
        self.count.append(0)
        self.on_done.append(on_done)
        return rid

    def complete(self, rid: int, now: float) -> None:
        self.done[rid] = now
        self.count[rid] += 1
        cb = self.on_done[rid]
        if cb is not None:
            cb(now, rid)

    def run(self) -> None:
        heap = self.heap
        while heap:
            t, _, fn, arg = heapq.heappop(heap)
            fn(t, arg)

    def trace(self) -> RequestTrace:
        return RequestTrace(np.asarray(self.comp, dtype=np.int8), np.asarray(self.robot, dtype=np.int32),
                            np.asarray(self.send), np.asarray(self.done), np.asarray(self.count, dtype=np.int32))


class StaticServer:
    """System 1 with static batching: take up to `batch` waiting requests when idle."""

    def __init__(self, clock: _Clock, service, batch: int) -> None:
        self.clock, self.service, self.batch = clock, service, max(1, int(batch))
        self.queue: deque[int] = deque()
        self.busy = False

    def arrive(self, now: float, rid: int) -> None:
        self.queue.append(rid)
        if not self.busy:
            self._start(now)

    def _start(self, now: float) -> None:
        k = min(self.batch, len(self.queue))
        batch = [self.queue.popleft() for _ in range(k)]
        self.busy = True
        self.clock.at(now + self.service.service_s(k), self._finish, batch)

    def _finish(self, now: float, batch: list[int]) -> None:
        for rid in batch:
            self.clock.complete(rid, now)
        self.busy = False
        if self.queue:
            self._start(now)


class ContinuousServer:
    """A VLM engine with continuous batching (iteration-level scheduling, vLLM-style)."""

    def __init__(self, clock: _Clock, service) -> None:
        self.clock, self.service = clock, service
        self.waiting: deque[int] = deque()
        self.running: list[tuple[int, int]] = []  # heap of (iteration it finishes in, rid)
        self.iteration = 0
        self.busy = False

    def arrive(self, now: float, rid: int) -> None:
        self.waiting.append(rid)
        if not self.busy:
            self._start(now)

    def _start(self, now: float) -> None:
        svc = self.service
        admitted = 0
        while self.waiting and len(self.running) < svc.max_num_seqs and admitted < svc.prefills_per_iteration:
            # prefill yields the first token in this iteration, so it finishes out_tokens - 1 later
            heapq.heappush(self.running, (self.iteration + svc.output_tokens - 1, self.waiting.popleft()))
            admitted += 1
        self.busy = True
        self.clock.at(now + svc.step_s(len(self.running)) + admitted * svc.prefill_s, self._end)

    def _end(self, now: float, _arg) -> None:
        while self.running and self.running[0][0] <= self.iteration:
            self.clock.complete(heapq.heappop(self.running)[1], now)
        self.iteration += 1
        self.busy = False
        if self.running or self.waiting:
            self._start(now)


class SharedServer:
    """Several models time-sharing one GPU (Baseline 1): FIFO, one request at a time."""

    def __init__(self, clock: _Clock, service_by_comp: Mapping[int, float]) -> None:
        self.clock, self.service_by_comp = clock, service_by_comp
        self.queue: deque[int] = deque()
        self.busy = False

    def arrive(self, now: float, rid: int) -> None:
        self.queue.append(rid)
        if not self.busy:
            self._start(now)

    def _start(self, now: float) -> None:
        rid = self.queue.popleft()
        self.busy = True
        self.clock.at(now + self.service_by_comp[self.clock.comp[rid]], self._finish, rid)

    def _finish(self, now: float, rid: int) -> None:
        self.clock.complete(rid, now)
        self.busy = False
        if self.queue:
            self._start(now)


def isolated_s(service) -> float:
    """Batch-1 time of one request alone on the GPU (either kind of service model)."""
    return service.service_s(1) if hasattr(service, "service_s") else service.isolated_s()



def run_arrivals(service, batch: int, arrivals) -> np.ndarray:
    """One server fed open-loop at the given arrival times; the latency of each request, in
    arrival order, all drained."""
    clock = _Clock()
    server = StaticServer(clock, service, batch) if hasattr(service, "service_s") else ContinuousServer(clock, service)
    for t in arrivals:
        clock.at(float(t), lambda now, _a: server.arrive(now, clock.new_request(0, -1, now, None)))
    clock.run()
    tr = clock.trace()
    return tr.done - tr.send


def run_open_loop(service, batch: int, rate_hz: float, n_requests: int, seed: int = 0) -> np.ndarray:
    """ROSA §3.4.2 Step 1's profiling run: one server, open-loop Poisson arrivals at rate_hz."""
    return run_arrivals(service, batch, np.cumsum(np.random.default_rng(seed).exponential(1.0 / rate_hz, n_requests)))

