"""CUDA graph capture of the fast path (realtime-vla section 3.1), one prefix graph and one
denoise graph per graph shape, with static device buffers and pinned host staging buffers.

Only constructed when torch.cuda.is_available(). A shape is (batch bucket, views, prompt-token
bucket): a batch is padded up to the next captured batch size with copies of robot 0 (their
outputs are dropped), to its own largest view count and to the smallest token bucket that holds
its longest prompt (masked, so results do not change). Padding every batch to max_views and
max_tokens instead cost a 1-view, 48-token robot the work of 3 views and 256 tokens (an H200 run
replayed 43 ms for every view count at batch 1: bench/results/gpu). What the CPU can check is
tested: the static shapes give the same chunks as dynamic padding.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Tuple

import torch

from physai_ros.engine.batching import Batch
from physai_ros.engine.pi0.fast import FastPi0
from physai_ros.engine.types import Pi0Config, PrefixCache

BATCH_SIZES = (1, 2, 4, 8, 16, 32)
TOKEN_BUCKETS = (64, 128, 256)  # prompt lengths captured (LeRobot pads pi0's prompts to 48)


def bucket(n: int) -> int:
    for b in BATCH_SIZES:
        if n <= b:
            return b
    raise ValueError(f"batch of {n} exceeds the largest captured batch size {BATCH_SIZES[-1]}")


@dataclass
class _Captured:
    host_in: Dict[str, torch.Tensor]  # pinned
    dev_in: Dict[str, torch.Tensor]
    prefix_graph: "torch.cuda.CUDAGraph"
    denoise_graph: "torch.cuda.CUDAGraph"
    actions: torch.Tensor
    updates: torch.Tensor
    host_actions: torch.Tensor  # pinned
    host_updates: torch.Tensor
    prefix_done: "torch.cuda.Event"
    start: "torch.cuda.Event"
    cache: PrefixCache  # the prefix graph's output buffers (the denoise graph reads them)


class GraphCache:
    def __init__(self, model: FastPi0, config: Pi0Config, device: torch.device, dtype: torch.dtype):
        if not torch.cuda.is_available():
            raise RuntimeError("CUDA graphs need a CUDA device")
        self.model, self.cfg, self.device, self.dtype = model, config, device, dtype
        self.graphs: Dict[Tuple[int, int, int], _Captured] = {}  # (batch bucket, views, tokens)
        self.pool = torch.cuda.graph_pool_handle()
        self._keep = []  # prefix caches whose buffers the denoise graphs read

    def _shapes(self, key: Tuple[int, int, int]) -> Dict[str, Tuple[Tuple[int, ...], torch.dtype]]:
        c = self.cfg
        s = c.vision.image_size
        b, views, tokens = key
        return {
            "images": ((b, views, 3, s, s), self.dtype),
            "image_masks": ((b, views), torch.bool),
            "tokens": ((b, tokens), torch.int64),
            "token_mask": ((b, tokens), torch.bool),
            "state": ((b, c.max_state_dim), torch.float32),
            "noise": ((b, c.chunk_size, c.max_action_dim), torch.float32),
        }

    def _capture(self, key: Tuple[int, int, int]) -> _Captured:
        # Host buffers name the CPU: a caller may have pointed torch's default device at the GPU.
        shapes = self._shapes(key).items()
        host = {k: torch.zeros(shape, dtype=dt, device="cpu").pin_memory() for k, (shape, dt) in shapes}
        dev = {k: torch.zeros(shape, dtype=dt, device=self.device) for k, (shape, dt) in self._shapes(key).items()}
        dev["image_masks"][:, 0] = True  # a valid dummy observation for warm-up and capture
        dev["token_mask"][:, 0] = True
        m = self.model

        def run_prefix():
            return m.prefix(dev["images"], dev["image_masks"], dev["tokens"], dev["token_mask"])

        # Warm up on a side stream (lazy inits, allocator) before capture, as PyTorch requires.
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for _ in range(2):
                cache = run_prefix()
                m.denoise(cache, dev["state"], dev["noise"])
        torch.cuda.current_stream(self.device).wait_stream(side)

        g_prefix, g_denoise = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
        with torch.cuda.graph(g_prefix, pool=self.pool):
            cache = run_prefix()
        # The denoise graph reads the prefix graph's output buffers (kept alive by `cache`).
        with torch.cuda.graph(g_denoise, pool=self.pool):
            actions, updates = m.denoise(cache, dev["state"], dev["noise"])
        self._keep.append(cache)
        return _Captured(
            host_in=host, dev_in=dev, prefix_graph=g_prefix, denoise_graph=g_denoise,
            actions=actions, updates=updates,
            host_actions=torch.empty(actions.shape, dtype=actions.dtype, device="cpu").pin_memory(),
            host_updates=torch.empty(updates.shape, dtype=updates.dtype, device="cpu").pin_memory(),
            prefix_done=torch.cuda.Event(enable_timing=True), start=torch.cuda.Event(enable_timing=True),
            cache=cache,
        )

    def _stage(self, batch: Batch) -> Tuple[int, _Captured]:
        """The batch's graphs (captured on first use) with its inputs copied into their static
        buffers (padded with copies of robot 0), queued on the current stream."""
        n = batch.size
        b = bucket(n)
        key = (b, int(batch.images.shape[1]), int(batch.tokens.shape[1]))
        if key not in self.graphs:
            self.graphs[key] = self._capture(key)
        g = self.graphs[key]
        for k, h in g.host_in.items():
            src = getattr(batch, k)
            h[:n].copy_(src)
            if n < b:
                h[n:].copy_(src[:1].expand_as(h[n:]))
            g.dev_in[k].copy_(h, non_blocking=True)
        return n, g

    @staticmethod
    def _rows(cache: PrefixCache, n: int) -> PrefixCache:
        """A copy of the first n rows (device to device, queued behind the replay): the graph's own
        buffers are overwritten by the next replay."""
        return PrefixCache(keys=[k[:n].clone() for k in cache.keys], values=[v[:n].clone() for v in cache.values],
                           pad=cache.pad[:n].clone(), next_pos=cache.next_pos[:n].clone())

    def run(self, batch: Batch, keep_prefix: bool = False
            ) -> Tuple[torch.Tensor, torch.Tensor, float, Optional[PrefixCache]]:
        """batch: collated on the CPU at its static shape (static_collate_kwargs). Returns CPU
        (actions, updates) for the batch's robots, the prefix time in ms (CUDA events) and, with
        keep_prefix, a copy of the robots' rows of the prefix cache (the language stream starts
        its texts from it)."""
        n, g = self._stage(batch)
        stream = torch.cuda.current_stream(self.device)
        g.start.record(stream)
        g.prefix_graph.replay()
        g.prefix_done.record(stream)
        g.denoise_graph.replay()
        kept = self._rows(g.cache, n) if keep_prefix else None
        g.host_actions.copy_(g.actions, non_blocking=True)
        g.host_updates.copy_(g.updates, non_blocking=True)
        stream.synchronize()
        t_prefix = g.start.elapsed_time(g.prefix_done)
        return g.host_actions[:n].clone(), g.host_updates[:, :n].clone(), t_prefix, kept

    def prefix_rows(self, batch: Batch) -> PrefixCache:
        """The prefix graph alone (same static batch as run): a copy of the robots' rows of its KV
        cache, on the device. What a text task pays for a prefill of its own where it does not
        share the action step's (the isolated baseline of bench/language_stream.py)."""
        n, g = self._stage(batch)
        g.prefix_graph.replay()
        kept = self._rows(g.cache, n)
        torch.cuda.current_stream(self.device).synchronize()
        return kept


def token_bucket(n: int, max_tokens: int) -> int:
    """The smallest captured prompt length that holds n tokens (max_tokens beyond the buckets)."""
    for t in TOKEN_BUCKETS:
        if n <= t <= max_tokens:
            return t
    return max_tokens


def static_collate_kwargs(config: Pi0Config, batch) -> dict:
    """collate() arguments giving this batch its graph shape: its own largest view count and
    its longest prompt rounded up to a token bucket."""
    views = max(len(x.images) for x in batch)
    tokens = token_bucket(max(int(x.tokens.shape[0]) for x in batch), config.max_tokens)
    return {"num_views": views, "num_tokens": tokens}
