"""A ComponentBackend whose answers the caller controls (tests, demos, docs/pipelines.md): per
(robot, component) a queue of scripted answers or a function of the query, each with its own
latency or error. No model, no thread: latencies are reported in the answers for a simulated
clock (physai_lab.pipeline_runner) to apply."""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Callable, Sequence, Union

from physai_ros.pipeline.backend import ComponentAnswer, ComponentQuery

NEVER = math.inf  # a latency that never arrives (a lost answer, a dead server)


@dataclass(frozen=True)
class Scripted:
    text: str = ""
    latency_ms: float = 0.0
    error: str = ""  # non-empty: the backend could not answer


ScriptEntry = Union[str, Scripted]
AnswerFunction = Callable[[ComponentQuery], ScriptEntry]


class ScriptedBackend:
    name = "scripted"

    def __init__(self, default_latency_ms: float = 0.0):
        self.default_latency_ms = default_latency_ms
        self._queues: dict[tuple[str, str], deque[Scripted]] = {}
        self._functions: dict[tuple[str, str], AnswerFunction] = {}
        self._defaults: dict[tuple[str, str], Scripted] = {}
        self.asked: list[ComponentQuery] = []  # every query, in order
        self.closed = False

    def _entry(self, e: ScriptEntry) -> Scripted:
        return e if isinstance(e, Scripted) else Scripted(text=e, latency_ms=self.default_latency_ms)

    def script(self, robot_id: str, component: str, *answers: ScriptEntry) -> "ScriptedBackend":
        """Queue answers for the next queries of (robot, component), in order."""
        self._queues.setdefault((robot_id, component), deque()).extend(self._entry(a) for a in answers)
        return self

    def respond_with(self, robot_id: str, component: str, fn: AnswerFunction) -> "ScriptedBackend":
        """Answer (robot, component) with fn(query) once its queue is empty."""
        self._functions[(robot_id, component)] = fn
        return self

    def default(self, robot_id: str, component: str, answer: ScriptEntry) -> "ScriptedBackend":
        """The answer once the queue is empty and no function is set (else: an error answer)."""
        self._defaults[(robot_id, component)] = self._entry(answer)
        return self

    def pending(self, robot_id: str, component: str) -> int:
        return len(self._queues.get((robot_id, component), ()))

    def answer(self, queries: Sequence[ComponentQuery]) -> list[ComponentAnswer]:
        return [self._answer_one(q) for q in queries]

    def _answer_one(self, q: ComponentQuery) -> ComponentAnswer:
        self.asked.append(q)
        key = (q.robot_id, q.component)
        queue = self._queues.get(key)
        if queue:
            s = queue.popleft()
        elif key in self._functions:
            try:
                s = self._entry(self._functions[key](q))
            except Exception as e:  # noqa: BLE001 - a backend must not raise for one query
                s = Scripted(error=f"scripted function raised {type(e).__name__}: {e}",
                             latency_ms=self.default_latency_ms)
        elif key in self._defaults:
            s = self._defaults[key]
        else:
            s = Scripted(error=f"scripted: no answer for {q.robot_id}/{q.component}",
                         latency_ms=self.default_latency_ms)
        return ComponentAnswer(text=s.text, error=s.error, tokens=len(s.text.split()), latency_ms=s.latency_ms)

    def close(self) -> None:
        self.closed = True
