"""Operator questions to a robot's policy, checked before they reach a frame: the
robot must be served, the text short, printable and of a bounded token count, each requester's
rate of questions to a robot bounded (a token bucket) and its waiting questions few: a requester
(the operator who signed the question) flooding a robot spends only its own bucket and places. A refused question gets its
reason back at once and is counted per robot and reason; it never touches another robot's text.
"""
from __future__ import annotations

import unicodedata
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Callable

from physai_ros.config.language import LanguageServerConfig
from physai_ros.protocol.text import SOURCE_OPERATOR, TextQuery
from physai_ros.security.rate_limit import TokenBucket

MAX_ANSWER_TOKENS = 256  # an operator's max_tokens above this is refused (KV memory per text)


@dataclass
class PendingQuestion:
    request_id: int
    question: str
    tokens: list[int]
    max_tokens: int  # 0: the task's
    source: str = SOURCE_OPERATOR
    requester: str = ""


@dataclass
class QueryGate:
    cfg: LanguageServerConfig
    encode: Callable[[str], list[int]]
    refused: dict[str, Counter] = field(default_factory=dict)
    _buckets: dict[tuple[str, str], TokenBucket] = field(default_factory=dict)  # per (robot, requester)

    def check(self, q: TextQuery, pending: deque, now: float) -> tuple[str, str] | list[int]:
        """The question's token ids, or (reason, detail) when refused (counted)."""
        bad = self._why_not(q, pending, now)
        if isinstance(bad, tuple):
            self.refused.setdefault(q.robot_id[:64], Counter())[bad[0]] += 1
        return bad

    def _why_not(self, q: TextQuery, pending: deque, now: float):
        c = self.cfg
        text = q.question.strip() if isinstance(q.question, str) else ""
        if not text:
            return "empty", "the question is empty"
        if len(text) > c.max_question_chars:
            return "too_long", f"{len(text)} characters, at most {c.max_question_chars}"
        if any(unicodedata.category(ch) in ("Cc", "Cs", "Co", "Cn") for ch in text):
            return "bad_characters", "control, surrogate, private-use or unassigned characters"
        if isinstance(q.max_tokens, bool) or not isinstance(q.max_tokens, int) \
                or not 0 <= q.max_tokens <= MAX_ANSWER_TOKENS:
            return "max_tokens", f"expected 0..{MAX_ANSWER_TOKENS}, got {q.max_tokens!r}"
        ids = self.encode(text)
        if len(ids) > c.max_question_tokens:
            return "too_long", f"{len(ids)} tokens, at most {c.max_question_tokens}"
        waiting = sum(1 for p in pending if p.requester == q.requester)
        if waiting >= c.max_pending_per_robot:
            return "busy", f"{waiting} question(s) of {q.requester or 'yours'} already wait for this robot's next frame"
        # Last: only a question that would be taken spends the requester's rate.
        if not self._take((q.robot_id, q.requester), now):
            return "rate", f"more than {c.queries_per_s:g} question(s)/s (burst {c.query_burst})"
        return ids

    def _take(self, key: tuple[str, str], now: float) -> bool:
        b = self._buckets.get(key)
        if b is None:
            b = self._buckets[key] = TokenBucket(self.cfg.queries_per_s, float(self.cfg.query_burst))
        return b.take(now)

    def forget(self, robot_id: str) -> None:
        for key in [k for k in self._buckets if k[0] == robot_id]:
            del self._buckets[key]
