from physai_ros.pipeline.answers import (MAX_SUBGOAL_CHARS, AnswerError, Parsed, Unparseable, parse_answer,
                                         parse_label, parse_subgoal)
from physai_ros.pipeline.backend import ComponentAnswer

import pytest


@pytest.mark.parametrize("text,label", [("safe", "safe"), ("Unsafe.", "unsafe"), ("  SAFE!\n", "safe"),
                                        ("unsafe ?", "unsafe"), ("safe.,", "safe")])
def test_safety_labels_tolerate_case_whitespace_and_trailing_punctuation(text, label):
    assert parse_answer("safety", ComponentAnswer(text=text)) == Parsed(label)


@pytest.mark.parametrize("text", ["it is safe", "safe-ish", "'safe'", "sa fe", "yes", "unsafe and safe", "...safe"])
def test_anything_else_is_an_unknown_label(text):
    r = parse_answer("safety", ComponentAnswer(text=text))
    assert isinstance(r, Unparseable) and r.reason is AnswerError.UNKNOWN_LABEL


def test_monitor_labels():
    assert [parse_label(t, ("ongoing", "done", "failed")) for t in ("Done.", "failed", " ongoing ")] == \
        [Parsed("done"), Parsed("failed"), Parsed("ongoing")]
    assert parse_answer("monitor", ComponentAnswer(text="safe")).reason is AnswerError.UNKNOWN_LABEL
    assert parse_answer("safety", ComponentAnswer(text="done")).reason is AnswerError.UNKNOWN_LABEL


def test_empty_and_backend_errors():
    assert parse_answer("monitor", ComponentAnswer(text=" .\n")).reason is AnswerError.EMPTY
    r = parse_answer("monitor", ComponentAnswer(text="done", error="engine died"))
    assert r == Unparseable(AnswerError.BACKEND_ERROR, "engine died")
    assert parse_answer("system2", ComponentAnswer(text="   ")).reason is AnswerError.EMPTY


def test_subgoals():
    assert parse_subgoal("  place the red cube in bin A \n") == Parsed("place the red cube in bin A")
    assert parse_subgoal("x" * MAX_SUBGOAL_CHARS) == Parsed("x" * MAX_SUBGOAL_CHARS)
    assert parse_subgoal("x" * (MAX_SUBGOAL_CHARS + 1)).reason is AnswerError.TOO_LONG
    assert parse_subgoal("pick\nplace").reason is AnswerError.BAD_CHARSET
    assert parse_subgoal("pick\x00").reason is AnswerError.BAD_CHARSET
    assert parse_subgoal("prends le cube rouge, à gauche") == Parsed("prends le cube rouge, à gauche")


def test_never_raises_on_odd_text():
    assert parse_answer("system2", ComponentAnswer(text=None)).reason is AnswerError.EMPTY  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        parse_answer("system1", ComponentAnswer(text="x"))  # a caller's bug, not a model's
