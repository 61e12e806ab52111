"""Whether the component service takes a robot's question: a registered robot, its own task, a
component its task has, a bounded printable question, the views and state it registered, and
max_tokens within bounds (serving.pipeline.service; the reasons are protocol.component's)."""
from __future__ import annotations

import unicodedata
from typing import Any, Callable, Mapping

import numpy as np

from physai_ros.protocol.component import (BAD_IMAGES, BAD_QUESTION, BAD_STATE, MAX_TOKENS, UNKNOWN_COMPONENT,
                                           UNKNOWN_ROBOT, WRONG_TASK, ComponentRequest)


def check_request(req: ComponentRequest, registration: Callable[[str], Any], routes: Mapping[tuple[str, str], str],
                  s: Any) -> tuple[str, str] | None:
    """(reason, detail) for a query the service does not take, else None. registration: the
    serving core's lookup by robot id; routes: (task, component) -> backend key; s: the
    service's settings (max_question_chars, max_answer_tokens)."""
    q = req.query
    reg = registration(q.robot_id)
    if reg is None:
        return UNKNOWN_ROBOT, f"{q.robot_id[:64]!r} is not registered with this server"
    if req.task_id and req.task_id != reg.task_id:
        return WRONG_TASK, f"query for task {req.task_id[:64]!r}, the robot is registered for {reg.task_id!r}"
    if (reg.task_id, q.component) not in routes:
        have = sorted(c for (t, c) in routes if t == reg.task_id)
        return UNKNOWN_COMPONENT, (f"task {reg.task_id!r} has no component {q.component[:32]!r}"
                                   f" (has: {', '.join(have) or 'none'})")
    text = q.question.strip() if isinstance(q.question, str) else ""
    if not text:
        return BAD_QUESTION, "empty"
    if len(q.question) > s.max_question_chars:
        return BAD_QUESTION, f"{len(q.question)} characters, at most {s.max_question_chars}"
    for label, t in (("question", q.question), ("task_prompt", q.task_prompt)):
        if not isinstance(t, str) or any(unicodedata.category(ch) in ("Cc", "Cs", "Co", "Cn")
                                         and ch not in "\n\t" for ch in t):
            return BAD_QUESTION, f"{label}: control, surrogate, private-use or unassigned characters"
    if len(q.task_prompt) > s.max_question_chars:
        return BAD_QUESTION, f"task_prompt: {len(q.task_prompt)} characters, at most {s.max_question_chars}"
    if isinstance(q.max_tokens, bool) or not isinstance(q.max_tokens, int) \
            or not 1 <= q.max_tokens <= s.max_answer_tokens:
        return MAX_TOKENS, f"expected 1..{s.max_answer_tokens}, got {q.max_tokens!r}"
    if len(q.images) != reg.num_views:
        return BAD_IMAGES, f"{len(q.images)} images, registered {reg.num_views}"
    for i, im in enumerate(q.images):
        h, w = reg.view_size(i)
        if not isinstance(im, np.ndarray) or im.dtype != np.uint8 or im.shape != (h, w, 3):
            got = f"{im.dtype} {list(im.shape)}" if isinstance(im, np.ndarray) else type(im).__name__
            return BAD_IMAGES, f"images[{i}]: {got}, registered {h}x{w} (HxWx3 uint8)"
    if q.state is not None and len(q.state):
        st = np.asarray(q.state)
        if st.shape != (reg.state_dim,) or not np.issubdtype(st.dtype, np.number) or not np.all(np.isfinite(st)):
            return BAD_STATE, f"{st.dtype} {list(st.shape)}, registered {reg.state_dim} finite values"
    return None
