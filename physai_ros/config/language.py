"""fleet.yaml for the language stream (OxyGen §3): a task's `language:` (what its
robots are asked, how long the answers may be, k tokens per frame, the action-rate floor) and the
server's `language:` (memory per robot, operator questions' limits).

    server:
      language: {kv_budget_mb: 4, max_requests_per_robot: 2, max_question_chars: 200,
                 max_question_tokens: 32, queries_per_s: 1.0, query_burst: 3}
    tasks:
      pick_place:
        language: {question: "what is the current subtask?", every_rounds: 5, max_tokens: 16,
                   tokens_per_frame: 4, min_action_rate_hz: 2.0}

A task without `language:` never speaks on its own; an operator can still ask its robots (the
ask_robot service) when the server's section is present, with the defaults below.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from physai_ros.config_fields import FleetConfigError, integer, join_key, mapping, no_unknown, number, string


@dataclass(frozen=True)
class TaskLanguageConfig:
    question: str = ""            # asked every `every_rounds` rounds; "" continues the prompt
    every_rounds: int = 0         # 0: never on its own (operator questions only)
    max_tokens: int = 16          # the token budget of one answer
    tokens_per_frame: int = 4     # k: tokens decoded per frame for each of its texts
    min_action_rate_hz: float = 1.0  # f_min: text yields before the action rate drops below it
    temperature: float = 0.0      # 0: greedy
    top_p: float = 1.0


@dataclass(frozen=True)
class LanguageServerConfig:
    kv_budget_mb: float = 4.0     # per robot: its texts' K/V (prefix copies and generated tokens)
    max_requests_per_robot: int = 2
    max_question_chars: int = 200
    max_question_tokens: int = 32
    queries_per_s: float = 1.0    # questions per robot and operator: sustained rate ...
    query_burst: int = 3          # ... and burst
    max_pending_per_robot: int = 2  # questions of one operator waiting for the robot's next frame

    @property
    def kv_budget_bytes(self) -> int:
        return int(self.kv_budget_mb * (1 << 20))


def parse_task_language(v: Any, path: str) -> TaskLanguageConfig | None:
    if v is None:
        return None
    d = mapping(v, path)
    dflt = TaskLanguageConfig()
    no_unknown(d, set(vars(dflt)), path)
    question = d.get("question", "")
    if question != "":
        question = string(question, join_key(path, "question"))
    every = integer(d.get("every_rounds", dflt.every_rounds), join_key(path, "every_rounds"), 0)
    top_p = number(d.get("top_p", dflt.top_p), join_key(path, "top_p"))
    if top_p > 1:
        raise FleetConfigError(f"{join_key(path, 'top_p')}: expected 0 < top_p <= 1, got {top_p!r}")
    return TaskLanguageConfig(
        question=question, every_rounds=every,
        max_tokens=integer(d.get("max_tokens", dflt.max_tokens), join_key(path, "max_tokens"), 1),
        tokens_per_frame=integer(d.get("tokens_per_frame", dflt.tokens_per_frame),
                                 join_key(path, "tokens_per_frame"), 1),
        min_action_rate_hz=number(d.get("min_action_rate_hz", dflt.min_action_rate_hz),
                                  join_key(path, "min_action_rate_hz")),
        temperature=number(d.get("temperature", dflt.temperature), join_key(path, "temperature"), allow_zero=True),
        top_p=top_p)


def parse_server_language(v: Any, path: str) -> LanguageServerConfig | None:
    if v is None:
        return None
    d = mapping(v, path)
    dflt = LanguageServerConfig()
    no_unknown(d, set(vars(dflt)), path)
    ints = {k: integer(d.get(k, getattr(dflt, k)), join_key(path, k), 1)
            for k in ("max_requests_per_robot", "max_question_chars", "max_question_tokens", "query_burst",
                      "max_pending_per_robot")}
    return LanguageServerConfig(
        kv_budget_mb=number(d.get("kv_budget_mb", dflt.kv_budget_mb), join_key(path, "kv_budget_mb")),
        queries_per_s=number(d.get("queries_per_s", dflt.queries_per_s), join_key(path, "queries_per_s")),
        **ints)

