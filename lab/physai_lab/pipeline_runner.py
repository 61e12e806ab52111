"""A PipelineController and a ComponentBackend over a simulated clock (tests, demos, and the
shape the ROS adapter follows): every `tick_s` it delivers the answers whose latency has passed,
runs step(now), sends the due queries to the backend (which answers at once, reporting a
latency) and, while the robot is not held, makes one simulated System 1 prediction per
`system1_period_s`. Deterministic: no threads, no sleeps."""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from physai_ros.pipeline.backend import ComponentAnswer, ComponentBackend
from physai_ros.pipeline.controller import PipelineController
from physai_ros.pipeline.decisions import Decision


@dataclass(frozen=True)
class TimedDecision:
    at: float
    decision: Decision


@dataclass
class PipelineRunner:
    controller: PipelineController
    backend: ComponentBackend
    system1_period_s: float | None = None  # default: the task's pipeline.action_period_ms
    tick_s: float = 0.01
    images: Sequence[np.ndarray] = ()  # what every query carries (a scripted backend ignores it)
    now: float = 0.0
    log: list[TimedDecision] = field(default_factory=list)
    _pending: list[tuple[float, int, int, ComponentAnswer]] = field(default_factory=list)  # heap
    _seq: int = 0
    _next_prediction: float = 0.0
    _started: bool = False

    def __post_init__(self) -> None:
        if self.system1_period_s is None:
            ms = self.controller.config.action_period_ms
            if ms is None:
                raise ValueError("system1_period_s: the task sets no pipeline.action_period_ms; give one")
            self.system1_period_s = ms / 1e3

    def _record(self, at: float, decisions: Sequence[Decision]) -> list[TimedDecision]:
        timed = [TimedDecision(at, d) for d in decisions]
        self.log.extend(timed)
        return timed

    def start(self) -> list[TimedDecision]:
        self._started = True
        self._next_prediction = self.now
        return self._record(self.now, self.controller.start(self.now))

    def run_until(self, t_end: float) -> list[TimedDecision]:
        """Advance the clock to t_end; returns the decisions made on the way (also in `log`)."""
        out = [] if self._started else self.start()
        while self.now <= t_end + 1e-12:
            out += self._tick(self.now)
            self.now = round(self.now + self.tick_s, 9)
        return out

    def _tick(self, t: float) -> list[TimedDecision]:
        out: list[TimedDecision] = []
        ctl = self.controller
        while self._pending and self._pending[0][0] <= t:
            at, _, qid, answer = heapq.heappop(self._pending)
            out += self._record(at, ctl.on_answer(qid, answer, at))
        step = ctl.step(t)
        out += self._record(t, step.decisions)
        if step.queries:
            answers = self.backend.answer([q.to_query(ctl.robot_id, self.images) for q in step.queries])
            for q, a in zip(step.queries, answers):
                if math.isfinite(a.latency_ms):
                    self._seq += 1
                    heapq.heappush(self._pending, (t + a.latency_ms / 1e3, self._seq, q.query_id, a))
        if ctl.held:
            self._next_prediction = max(self._next_prediction, t + self.system1_period_s)
        elif t >= self._next_prediction:
            out += self._record(t, ctl.on_system1_prediction(t))
            self._next_prediction = t + self.system1_period_s
        return out

    def decisions(self) -> list[Decision]:
        return [td.decision for td in self.log]
