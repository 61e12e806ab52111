"""OxyGen's unified KV cache manager (§3.2): resumable language generation states that live
across frames, with the paper's operations and a memory bound per robot.

STORE(state) -> request id (sequential), RETRIEVE(id), UPDATE(id, state), REMOVE(id);
BATCH(ids) stacks the states' K/V along the batch dimension into padded per-layer buffers with
room for k more tokens, UNBATCH(batched) hands each request back its grown K/V. The decoders
(language.py) advance requests either one step at a time on their own K/V or k steps on a batch.

Memory is accounted per robot in bytes of K/V (the prefix copy and the generated tokens). A robot
over its budget cannot store a new request (refused with the reason), and a request that would
grow past it is ended with the reason "memory" before it does: the server never grows without
limit, and one robot's long texts cannot take another robot's memory.
"""
from __future__ import annotations

import itertools
import threading
from typing import Dict, Iterable, List, Optional


from physai_ros.engine.language.decoder import BatchedState, LanguageRequest, batch_requests, unbatch_requests

DONE_MEMORY = "memory"


class KVBudgetError(RuntimeError):
    """A robot's language KV memory is full: the message names the robot and both sizes."""


def _row_bytes(req: LanguageRequest) -> int:
    """Bytes one more token adds to a request: one K and one V row per layer."""
    return sum(k[:1].numel() * k.element_size() * 2 for k in req.prefix_keys)


class KVCacheManager:
    def __init__(self, robot_budget_bytes: int, max_requests_per_robot: int = 8):
        if robot_budget_bytes < 1 or max_requests_per_robot < 1:
            raise ValueError("robot_budget_bytes and max_requests_per_robot must be >= 1")
        self.robot_budget_bytes = int(robot_budget_bytes)
        self.max_requests_per_robot = int(max_requests_per_robot)
        self._ids = itertools.count()
        self._states: Dict[int, LanguageRequest] = {}
        self._robot_of: Dict[int, str] = {}
        self._lock = threading.Lock()
        self.stats = {"stored": 0, "removed": 0, "refused": 0, "cut_for_memory": 0}

    # ---------------------------------------------------------------- accounting
    def bytes_of(self, robot: str) -> int:
        with self._lock:
            return sum(r.kv_bytes() for i, r in self._states.items() if self._robot_of[i] == robot)

    def active(self, robot: Optional[str] = None) -> List[int]:
        with self._lock:
            return [i for i, r in self._states.items() if not r.done and (robot is None or self._robot_of[i] == robot)]

    def total_bytes(self) -> int:
        with self._lock:
            return sum(r.kv_bytes() for r in self._states.values())

    # ---------------------------------------------------------------- the paper's operations
    def store(self, state: LanguageRequest, robot: str) -> int:
        """Persist a new generation state; refused (KVBudgetError) when the robot's memory or
        request count would exceed its budget."""
        with self._lock:
            mine = [r for i, r in self._states.items() if self._robot_of[i] == robot]
            used = sum(r.kv_bytes() for r in mine)
            if len(mine) >= self.max_requests_per_robot or used + state.kv_bytes() > self.robot_budget_bytes:
                self.stats["refused"] += 1
                raise KVBudgetError(
                    f"{robot}: language KV memory full ({len(mine)} requests, {used} + {state.kv_bytes()} bytes "
                    f"> budget {self.robot_budget_bytes} or more than {self.max_requests_per_robot} requests)")
            rid = next(self._ids)
            self._states[rid], self._robot_of[rid] = state, robot
            self.stats["stored"] += 1
            return rid

    def retrieve(self, rid: int) -> LanguageRequest:
        with self._lock:
            return self._states[rid]

    def update(self, rid: int, state: LanguageRequest) -> None:
        with self._lock:
            if rid not in self._states:
                raise KeyError(f"no language request {rid}")
            self._states[rid] = state

    def remove(self, rid: int) -> None:
        with self._lock:
            if self._states.pop(rid, None) is not None:
                self._robot_of.pop(rid)
                self.stats["removed"] += 1

    def remove_done(self) -> List[int]:
        """REMOVE every finished request (Algorithm 1, line 12); their ids."""
        done = [i for i in list(self._states) if self._states[i].done]
        for i in done:
            self.remove(i)
        return done

    def cap(self, rids: Iterable[int], k: int) -> None:
        """End, with reason "memory", every request whose k more tokens would take its robot over
        budget (checked before decoding, so nothing is allocated past the bound)."""
        with self._lock:
            used: Dict[str, int] = {}
            for i, r in self._states.items():
                used[self._robot_of[i]] = used.get(self._robot_of[i], 0) + r.kv_bytes()
            for i in rids:
                r = self._states[i]
                if r.done:
                    continue
                robot = self._robot_of[i]
                grow = _row_bytes(r) * min(k, r.params.max_tokens - len(r.tokens))
                if used[robot] + grow > self.robot_budget_bytes:
                    r.done, r.reason = True, DONE_MEMORY
                    self.stats["cut_for_memory"] += 1
                else:
                    used[robot] += grow

    def batch(self, rids: List[int], k: int) -> BatchedState:
        """BATCH: the requests' K/V stacked with room for k more tokens each."""
        state = batch_requests([self.retrieve(i) for i in rids], k)
        state.ids = list(rids)
        return state

    def unbatch(self, state: BatchedState) -> None:
        """UNBATCH, then UPDATE each request."""
        unbatch_requests(state)
        for rid, r in zip(state.ids, state.requests):
            self.update(rid, r)
