"""CUDA graph capture of the fast path (realtime-vla section 3.1), one prefix graph and one
denoise graph per batch size, with static device buffers and pinned host staging buffers.

Only constructed when torch.cuda.is_available(); nothing on the CPU machines here can run it, so
its timings are not measured (docs/engine.md). What the CPU can check is tested: inputs padded to
the static shapes (max views, max prompt tokens) give the same result as dynamic padding.

Shapes are static per graph: every batch is padded to config.max_views view slots and
config.max_tokens prompt tokens (masked, so results do not change), and batch sizes are padded
up to the next captured size with copies of robot 0 (their outputs are dropped).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Tuple

import torch

from .batching import Batch
from .fast import FastPi0
from .types import Pi0Config

BATCH_SIZES = (1, 2, 4, 8, 16, 32)


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


class GraphCache:
    def __init__(self, model: FastPi0, config: Pi0Config, device: torch.device, dtype: torch.dtype):
        if not torch.cuda.is_available():
            raise RuntimeError("CUDA graphs need a CUDA device")
        self.model, self.cfg, self.device, self.dtype = model, config, device, dtype
        self.graphs: Dict[int, _Captured] = {}
        self.pool = torch.cuda.graph_pool_handle()
        self._keep = []  # prefix caches whose buffers the denoise graphs read

    def _shapes(self, b: int) -> Dict[str, Tuple[Tuple[int, ...], torch.dtype]]:
        c = self.cfg
        s = c.vision.image_size
        return {
            "images": ((b, c.max_views, 3, s, s), self.dtype),
            "image_masks": ((b, c.max_views), torch.bool),
            "tokens": ((b, c.max_tokens), torch.int64),
            "token_mask": ((b, c.max_tokens), torch.bool),
            "state": ((b, c.max_state_dim), torch.float32),
            "noise": ((b, c.chunk_size, c.max_action_dim), torch.float32),
        }

    def _capture(self, b: int) -> _Captured:
        host = {k: torch.zeros(shape, dtype=dt).pin_memory() for k, (shape, dt) in self._shapes(b).items()}
        dev = {k: torch.zeros(shape, dtype=dt, device=self.device) for k, (shape, dt) in self._shapes(b).items()}
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
            host_actions=torch.empty(actions.shape, dtype=actions.dtype).pin_memory(),
            host_updates=torch.empty(updates.shape, dtype=updates.dtype).pin_memory(),
            prefix_done=torch.cuda.Event(enable_timing=True), start=torch.cuda.Event(enable_timing=True),
        )

    def run(self, batch: Batch) -> Tuple[torch.Tensor, torch.Tensor, float]:
        """batch: collated on the CPU at the static view/token sizes. Returns CPU (actions,
        updates) for the batch's robots and the prefix time in ms (CUDA events)."""
        n = batch.size
        b = bucket(n)
        if b not in self.graphs:
            self.graphs[b] = self._capture(b)
        g = self.graphs[b]
        for k, h in g.host_in.items():
            src = getattr(batch, k)
            h[:n].copy_(src)
            if n < b:
                h[n:].copy_(src[:1].expand_as(h[n:]))
            g.dev_in[k].copy_(h, non_blocking=True)
        stream = torch.cuda.current_stream(self.device)
        g.start.record(stream)
        g.prefix_graph.replay()
        g.prefix_done.record(stream)
        g.denoise_graph.replay()
        g.host_actions.copy_(g.actions, non_blocking=True)
        g.host_updates.copy_(g.updates, non_blocking=True)
        stream.synchronize()
        t_prefix = g.start.elapsed_time(g.prefix_done)
        return g.host_actions[:n].clone(), g.host_updates[:, :n].clone(), t_prefix


def static_collate_kwargs(config: Pi0Config) -> dict:
    """collate() arguments that produce the graphs' static shapes."""
    return {"num_views": config.max_views, "num_tokens": config.max_tokens}
