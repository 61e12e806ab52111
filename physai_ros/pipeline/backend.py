"""One interface for the models that serve a pipeline's vision-language components.

A component (System 2 planner, safety checker, progress monitor) is asked a question about one
robot's current observation and answers in text. Two kinds of backend implement it: the VLA's own
backbone through the language stream (the question decoded on the prefix KV cache that System 1
also uses, OxyGen §3) and a Hugging Face `transformers` vision-language model loaded from a local
directory. Tests use a scripted backend whose answers they control. Backends return raw text;
parsing and validating it (label sets, length, charset) is the pipeline's job, so a backend never
decides what an answer means.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, Sequence

import numpy as np


@dataclass(frozen=True)
class ComponentQuery:
    """One question about one robot's observation."""

    robot_id: str
    component: str  # one of QUESTION_COMPONENTS
    question: str  # the component's prompt, with {task} already replaced by the task prompt
    task_prompt: str  # the task's own prompt (System 1's until a plan replaces it)
    images: tuple[np.ndarray, ...]  # HxWx3 uint8, the robot's views in its configured order
    state: np.ndarray | None = None  # proprioception, unnormalised (float32), when the model uses it
    max_tokens: int = 16


@dataclass(frozen=True)
class ComponentAnswer:
    """A backend's raw reply: text, or an error (the query could not be answered at all)."""

    text: str = ""
    error: str = ""  # empty when text is the model's answer
    tokens: int = 0  # generated tokens (for rates and cost accounting)
    latency_ms: float = 0.0  # the backend's own time for the batch this answer was part of
    meta: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.error


@dataclass(frozen=True)
class KVDemand:
    """The K/V memory one query will hold on its backend (bytes): its prompt's at once, its
    answer's by the last token. A backend that can say it has `kv_demand(query) -> KVDemand`;
    the server then admits its queries by memory (serving.pipeline.memory_dispatch)."""

    prompt_bytes: int
    answer_bytes: int


class ComponentBackend(Protocol):
    """A model serving one or more components. `answer` takes a batch (any mix of robots and
    components the backend hosts) and returns one answer per query, in order; it must not raise
    for a bad query (return an answer with `error` set), so one robot's query never costs another
    robot its answer."""

    name: str

    def answer(self, queries: Sequence[ComponentQuery]) -> list[ComponentAnswer]: ...

    def close(self) -> None: ...
