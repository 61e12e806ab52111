"""Each robot's newest System 1 prefix, kept for its pipeline components (OxyGen's cross-task KV
sharing): the language stream offers every frame's prefix KV cache
(serving.language.stream.PrefixFrame); this keeps, per robot, a reference to the frame of its
latest round, so a component question can be decoded on it instead of prefilling the same
observation again.

A reference, not a copy: the engine allocates a new cache per prefill and never writes an old
one, so holding it costs nothing until a question comes (the decoder's start() then copies the
one row it reads, as for any text). A robot's entry is replaced by its next round and dropped
once older than `max_age_s`: a robot that stopped running rounds (held after a safety stop) must
not be judged on what it saw before the stop, so its components fall back to their own prefill.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable, Optional


@dataclass(frozen=True)
class KeptPrefix:
    """One robot's row of a System 1 frame."""

    frame: Any  # serving.language.stream.PrefixFrame
    row: int
    robot_id: str
    task_id: str
    round_id: int

    @property
    def last_prompt_token(self) -> int:
        b = self.frame.batch
        return int(b.tokens[self.row][b.token_mask[self.row]][-1])

    def prompt(self, tokenizer) -> str:
        """The prompt System 1 read in that round (the task's, or a System 2 subgoal)."""
        b = self.frame.batch
        return tokenizer.decode(b.tokens[self.row].cpu().numpy(), b.token_mask[self.row].cpu().numpy()).strip()

    def age_s(self, now: float) -> float:
        return now - self.frame.stamp


class KeptPrefixes:
    def __init__(self, max_age_s: float, clock: Callable[[], float]):
        if not max_age_s >= 0:
            raise ValueError(f"max_age_s: expected >= 0, got {max_age_s!r}")
        self.max_age_s, self.clock = float(max_age_s), clock
        self._kept: dict[str, KeptPrefix] = {}
        self._lock = threading.Lock()  # offers come from instance threads, questions from the pipeline's
        self.offered = 0

    def offer(self, frame: Any) -> None:
        """A frame's prefix (the language stream's listener): its robots' rows replace theirs."""
        with self._lock:
            self.offered += 1
            for row, fr in enumerate(frame.rows):
                old = self._kept.get(fr.robot_id)
                # Instances run concurrently: an older round finishing late must not replace a newer one.
                if old is None or old.frame.stamp <= frame.stamp:
                    self._kept[fr.robot_id] = KeptPrefix(frame, row, fr.robot_id, fr.task_id, fr.round_id)
            self._expire(self.clock())

    def get(self, robot_id: str, now: Optional[float] = None) -> Optional[KeptPrefix]:
        """The robot's newest prefix if it is at most max_age_s old."""
        now = self.clock() if now is None else now
        with self._lock:
            self._expire(now)
            return self._kept.get(robot_id)

    def forget(self, robot_id: str) -> None:
        """The robot's prefix no longer shows what it sees (released, reset, stopped)."""
        with self._lock:
            self._kept.pop(robot_id, None)

    def clear(self) -> None:
        with self._lock:
            self._kept.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._kept)

    def _expire(self, now: float) -> None:
        for robot in [r for r, k in self._kept.items() if k.age_s(now) > self.max_age_s]:
            del self._kept[robot]
