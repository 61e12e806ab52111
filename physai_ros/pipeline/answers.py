"""Reading a component's raw answer (docs/pipelines.md "Answers"): a safety or monitor label, or a
System 2 subgoal, or a typed reason why it is unusable. Never raises on bad text: a model that
says something unexpected is a counted error the controller handles like an SLO miss."""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Union

from physai_ros.pipeline.backend import ComponentAnswer

SAFETY_LABELS = ("safe", "unsafe")
MONITOR_LABELS = ("ongoing", "done", "failed")
LABELS = {"safety": SAFETY_LABELS, "monitor": MONITOR_LABELS}
MAX_SUBGOAL_CHARS = 200
# Trailing punctuation a model adds to a one-word answer ("Unsafe."); nothing else is forgiven.
_TRAILING_PUNCTUATION = ".!?,;:"


class AnswerError(str, enum.Enum):
    BACKEND_ERROR = "backend_error"  # the backend could not answer (ComponentAnswer.error)
    EMPTY = "empty"
    UNKNOWN_LABEL = "unknown_label"  # not one of the component's labels
    TOO_LONG = "too_long"  # a subgoal over MAX_SUBGOAL_CHARS
    BAD_CHARSET = "bad_charset"  # a subgoal with control characters or line breaks


@dataclass(frozen=True)
class Parsed:
    value: str  # the label (lower case) or the subgoal text (stripped)


@dataclass(frozen=True)
class Unparseable:
    reason: AnswerError
    detail: str  # what was wrong, for logs (the text shortened)


AnswerResult = Union[Parsed, Unparseable]


def _show(text: str, limit: int = 60) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


def parse_label(text: str, labels: tuple[str, ...]) -> AnswerResult:
    word = text.strip().rstrip(_TRAILING_PUNCTUATION).strip().lower()
    if not word:
        return Unparseable(AnswerError.EMPTY, f"no label in {_show(text)}")
    if word not in labels:
        return Unparseable(AnswerError.UNKNOWN_LABEL, f"{_show(text)} is none of {list(labels)}")
    return Parsed(word)


def parse_subgoal(text: str, max_chars: int = MAX_SUBGOAL_CHARS) -> AnswerResult:
    goal = text.strip()
    if not goal:
        return Unparseable(AnswerError.EMPTY, "empty subgoal")
    if len(goal) > max_chars:
        return Unparseable(AnswerError.TOO_LONG, f"subgoal of {len(goal)} characters > {max_chars}: {_show(goal)}")
    if not goal.isprintable():
        return Unparseable(AnswerError.BAD_CHARSET, f"subgoal with control characters: {_show(goal)}")
    return Parsed(goal)


def parse_answer(component: str, answer: ComponentAnswer) -> AnswerResult:
    """A backend's answer for `component` (system2 | safety | monitor)."""
    if not answer.ok:
        return Unparseable(AnswerError.BACKEND_ERROR, answer.error)
    if not isinstance(answer.text, str):
        return Unparseable(AnswerError.EMPTY, f"answer text is {type(answer.text).__name__}, not str")
    if component == "system2":
        return parse_subgoal(answer.text)
    if component in LABELS:
        return parse_label(answer.text, LABELS[component])
    raise ValueError(f"no answers to parse for component {component!r}")  # a caller's bug, not a model's
