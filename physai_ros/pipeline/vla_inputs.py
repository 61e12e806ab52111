"""A component query -> what the VLA backbone reads (the VLA-backbone backend).

The observation goes through the serving path's own preprocessing (ActionModelRunner.prepare:
letterboxed uint8 views, the prompt as the checkpoint's preprocessor writes it, the normalised
state), so a component sees exactly the engine input System 1 would get for the same frame; the
query is only re-wrapped as an ObservationData for it. What that path would fail on, or silently
accept although the model cannot read it (a 2-D or 4-channel "image", more views than the model
has, an empty question), is refused here with a reason naming the field: the backend turns the
reason into that query's ComponentAnswer(error=...), never an exception for the batch.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from physai_ros.pipeline.backend import ComponentQuery
from physai_ros.protocol.component import QUESTION_COMPONENTS
from physai_ros.protocol.observation import ImageData, ObservationData


class QueryError(ValueError):
    """A query the backbone cannot answer; the message names the field."""


def check_query(q: Any, max_views: int, max_state_dim: int, max_answer_tokens: int) -> None:
    """Everything about a query that does not need the model: raises QueryError."""
    if not isinstance(q, ComponentQuery):
        raise QueryError(f"query: expected a ComponentQuery, got {type(q).__name__}")
    if q.component not in QUESTION_COMPONENTS:
        raise QueryError(f"component: {q.component!r} is not one of {', '.join(QUESTION_COMPONENTS)}")
    if not isinstance(q.question, str) or not q.question.strip():
        raise QueryError("question: empty")
    if not isinstance(q.task_prompt, str) or not q.task_prompt.strip():
        raise QueryError("task_prompt: empty (the prefix is the observation and the task prompt)")
    if isinstance(q.max_tokens, bool) or not isinstance(q.max_tokens, int) \
            or not 1 <= q.max_tokens <= max_answer_tokens:
        raise QueryError(f"max_tokens: expected 1..{max_answer_tokens}, got {q.max_tokens!r}")
    images = q.images if isinstance(q.images, (tuple, list)) else ()
    if not 1 <= len(images) <= max_views:
        raise QueryError(f"images: {len(images)} views, the model takes 1..{max_views}")
    for i, im in enumerate(images):
        if not isinstance(im, np.ndarray) or im.dtype != np.uint8 or im.ndim != 3 or im.shape[2] != 3 \
                or min(im.shape[:2]) < 1:
            what = f"{im.dtype} {list(im.shape)}" if isinstance(im, np.ndarray) else type(im).__name__
            raise QueryError(f"images[{i}]: expected an HxWx3 uint8 RGB array, got {what}")
    if q.state is not None:
        s = np.asarray(q.state)
        if s.ndim != 1 or s.shape[0] > max_state_dim or not np.issubdtype(s.dtype, np.number) \
                or not np.all(np.isfinite(s)):
            raise QueryError(f"state: expected at most {max_state_dim} finite values, got {s.dtype} {list(s.shape)}")


def as_observation(q: ComponentQuery) -> ObservationData:
    """The query as the serving path's observation (rgb8 views, no copy of the pixels)."""
    views = []
    for im in q.images:
        im = np.ascontiguousarray(im)
        h, w = im.shape[:2]
        views.append(ImageData(h, w, "rgb8", w * 3, im))
    state = np.zeros(0, np.float32) if q.state is None else np.asarray(q.state, dtype=np.float32).reshape(-1)
    return ObservationData(robot_id=q.robot_id, task_id="", round_id=0, stamp=0.0, images=tuple(views), state=state,
                           wrench=np.zeros(6, np.float32), wrench_stamp=0.0, prompt=q.task_prompt,
                           exec_phase_start=0.0, actions_remaining=0, control_period=0.0, horizon_policy="",
                           horizon_params=())


def engine_input(runner: Any, config: Any, q: ComponentQuery) -> Any:
    """The engine input System 1 would get for this observation (serving.action_runner), checked
    against the model; QueryError with the reason otherwise."""
    from physai_ros.engine.types import EngineInputError

    if q.state is None and runner.prompt_style.reads_state:
        raise QueryError("state: a pi0.5 prompt carries the state, and this query has none")
    try:
        inp = runner.prepare(as_observation(q), None)
        inp.validate(config)
    except (ValueError, KeyError, EngineInputError) as e:
        raise QueryError(str(e)) from None
    return inp


def question_ids(tokenizer: Any, question: str, vocab_size: int, max_question_tokens: int) -> list[int]:
    """The question's token ids as the language stream encodes a text question (no BOS)."""
    ids = [int(t) for t in tokenizer.encode_text(question)]
    if not ids:
        raise QueryError("question: encodes to no tokens")
    if len(ids) > max_question_tokens:
        raise QueryError(f"question: {len(ids)} tokens, at most {max_question_tokens}")
    if max(ids) >= vocab_size:
        raise QueryError(f"question: token id {max(ids)} outside the model's vocabulary ({vocab_size})")
    return ids
