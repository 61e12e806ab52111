"""One frame of OxyGen's Algorithm 1 on our engine, with an action-rate floor (f_min):
prefill once, denoise the actions on that cache, start each robot's new language request from
the same cache, then decode k tokens for every active request of every robot and frame in one
batch. k is the configured tokens-per-frame, lowered (down to 0) when decoding that many would
push the frame past 1 / f_min: text yields before actions slip.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence

import torch

from physai_ros.engine.language.decoder import SamplingParams
from physai_ros.engine.language.kv_manager import KVBudgetError, KVCacheManager


@dataclass
class DecodeBudget:
    """Chooses k per frame. The cost of one decode step is learned per batch size (an
    exponential average of measured steps); until measured, the first guess is the configured k."""

    k_max: int
    f_min_hz: float
    alpha: float = 0.3
    step_s: Dict[int, float] = field(default_factory=dict)

    def __post_init__(self):
        if self.k_max < 0 or not (math.isfinite(self.f_min_hz) and self.f_min_hz > 0):
            raise ValueError(f"k_max must be >= 0 and f_min_hz > 0, got {self.k_max}, {self.f_min_hz}")

    def choose(self, actions_s: float, batch: int, k_max: Optional[int] = None,
               f_min_hz: Optional[float] = None) -> int:
        """Tokens to decode this frame given the time the actions took. k_max / f_min_hz: this
        frame's (the server takes them from the tasks of the texts being decoded)."""
        k_max = self.k_max if k_max is None else k_max
        f_min = self.f_min_hz if f_min_hz is None else f_min_hz
        per_step = self.step_s.get(batch) or (max(self.step_s.values()) if self.step_s else None)
        if per_step is None:
            return k_max
        left = 1.0 / f_min - actions_s
        return max(0, min(k_max, int(left // per_step))) if left > 0 else 0

    def record(self, batch: int, steps: int, seconds: float) -> None:
        if steps <= 0:
            return
        s = seconds / steps
        old = self.step_s.get(batch)
        self.step_s[batch] = s if old is None else (1 - self.alpha) * old + self.alpha * s


@dataclass
class FrameResult:
    actions: torch.Tensor
    updates: torch.Tensor
    new_requests: Dict[str, Optional[int]]  # robot -> request id (None: refused, reason below)
    refused: Dict[str, str]
    emitted: Dict[int, List[int]]  # request id -> tokens decoded this frame
    finished: Dict[int, str]  # request id -> end reason, removed from the manager
    k: int
    actions_s: float
    decode_s: float


def start_texts(decoder, manager: KVCacheManager, cache, batch, robots: Sequence[str],
                ask: Dict[str, SamplingParams], questions: Optional[Dict[str, Sequence[int]]] = None,
                request_ids: Optional[Dict[str, str]] = None):
    """STORE a new request for each robot of `ask`, started from its row of this frame's prefix
    cache. Returns (robot -> manager id or None, robot -> why refused)."""
    new, refused = {}, {}
    for row, robot in enumerate(robots):
        if robot not in ask:
            continue
        last = int(batch.tokens[row][batch.token_mask[row]][-1])
        try:
            q = (questions or {}).get(robot, ())
            name = (request_ids or {}).get(robot, robot)
            new[robot] = manager.store(decoder.start(cache, row, last, ask[robot], name, question=q), robot)
        except (KVBudgetError, ValueError) as e:
            new[robot], refused[robot] = None, str(e)
    return new, refused


def decode_frame(decoder, manager: KVCacheManager, budget: DecodeBudget, actions_s: float,
                 clock: Callable[[], float] = time.perf_counter, k_max: Optional[int] = None,
                 f_min_hz: Optional[float] = None):
    """Algorithm 1's decoding half: k tokens for every active request in one batch (k from the
    budget), then REMOVE the finished. Returns (emitted, finished, k, decode_s)."""
    active = manager.active()
    k = budget.choose(actions_s, len(active), k_max, f_min_hz) if active else 0
    emitted: Dict[int, List[int]] = {}
    t1 = clock()
    if active and k > 0:
        manager.cap(active, k)
        live = [i for i in active if not manager.retrieve(i).done]
        if live:
            state = manager.batch(live, k)
            out = decoder.decode_batched(state, k)
            manager.unbatch(state)
            emitted = dict(zip(live, out))
    decode_s = clock() - t1
    budget.record(len(active), k if active else 0, decode_s)
    finished = {i: manager.retrieve(i) for i in active if manager.retrieve(i).done}
    manager.remove_done()
    return emitted, finished, k, decode_s


def action_step(engine, batch):
    """A frame's actions and the prefix cache its texts start from: (actions, updates, cache,
    collated batch). A collated batch (engine.batching.Batch) runs the model's prefix and denoise
    here; a list of EngineInput runs the engine's own action step (Pi0Engine.infer_frame:
    collation, CUDA graphs where built, the chunks on the host), as the policy server does."""
    if isinstance(batch, (list, tuple)):
        outputs, cache, batch = engine.infer_frame(list(batch), keep_prefix=True)
        return (torch.stack([o.actions for o in outputs]), torch.stack([o.updates for o in outputs], dim=1),
                cache, batch)
    cache = engine.model.prefix(batch.images, batch.image_masks, batch.tokens, batch.token_mask)
    actions, updates = engine.model.denoise(cache, batch.state, batch.noise)
    return actions, updates, cache, batch


def run_frame(engine, decoder, manager: KVCacheManager, budget: DecodeBudget, batch, robots: Sequence[str],
              ask: Dict[str, SamplingParams], clock: Callable[[], float] = time.perf_counter,
              questions: Optional[Dict[str, Sequence[int]]] = None) -> FrameResult:
    """Algorithm 1 for one frame of `robots` (`batch`: collated, or a list of EngineInput; see
    action_step). `ask` names the robots that start a text this frame and its sampling
    parameters, `questions` the token ids a robot's text answers (none: it continues the prompt)."""
    t0 = clock()
    actions, updates, cache, batch = action_step(engine, batch)
    actions_s = clock() - t0
    new, refused = start_texts(decoder, manager, cache, batch, robots, ask, questions)
    emitted, finished, k, decode_s = decode_frame(decoder, manager, budget, actions_s, clock)
    return FrameResult(actions, updates, new, refused, emitted, {i: r.reason for i, r in finished.items()}, k,
                       actions_s, decode_s)
