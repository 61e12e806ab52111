"""The fused streaming tick as a CUDA graph (realtime-vla section 3.1 applied to the 480 Hz
stream).

Why: on an H200 the eager fused tick at pi0's expert widths took 9.6 ms alone (host-bound: some
200 launches and their Python around them), 36 ms beside the VLM thread, so the stream ran at
23 Hz with 95 % of its 480 Hz slots missed (bench/results/gpu, 2026-11-29). A replay is one
launch from the host.

How: `FusedTick._tick` is a pure function of tensors. With graphs, `FusedTick.prepare` writes
each KV snapshot (the K^T/V^T buffers whose suffix columns each tick overwrites, the mask bias,
the RoPE tables) into the buffers of the last snapshot of the same shape, so one graph per shape
(robot count, prefix length) serves every VLM pass. The per-tick inputs (state, wrench, Euler
state, host scalars) are copied into static buffers before each replay, and the outputs copied
out (a robot's preview may be read after the next tick has run). The first tick on a shape runs
eagerly (its result is that tick's answer) and then captures; every later one replays.

Capture is thread-local and on a side stream, without the device-wide synchronize, garbage
collection and cache flush that `torch.cuda.graph` does on entry: the VLM thread keeps running
on its own stream meanwhile.

What the CPU can check is tested: `StaticTick` keeps the same contract (static inputs, outputs
copied out, one per snapshot buffer set) by calling the tick on its static buffers, and
test_streaming_tick_graph drives it against the eager tick. The capture itself needs a GPU:
bench/gpu_steps checks it against the eager fused tick and times it.
"""
from __future__ import annotations

from typing import Callable, Dict, Optional, Sequence, Tuple

import torch


class StaticTick:
    """A tick bound to one snapshot whose per-tick inputs live in static buffers: what a captured
    graph needs, run here by calling the tick on those buffers."""

    def __init__(self, fn: Callable, snapshot_args: Sequence, tick_args: Sequence[Optional[torch.Tensor]]):
        self.fn, self.snapshot_args = fn, tuple(snapshot_args)
        self.inputs = [None if a is None else a.detach().clone() for a in tick_args]

    def run(self) -> Tuple[torch.Tensor, ...]:
        return self.fn(*self.snapshot_args, *self.inputs)

    def replay(self, tick_args: Sequence[Optional[torch.Tensor]]) -> Tuple[torch.Tensor, ...]:
        for dst, src in zip(self.inputs, tick_args):
            if dst is not None:
                dst.copy_(src, non_blocking=True)
        return tuple(o.clone() for o in self.run())


class TickGraph(StaticTick):
    """The tick captured as a CUDA graph against the static buffers."""

    _side: Dict[int, "torch.cuda.Stream"] = {}  # per device: the capture stream, warmed once

    def __init__(self, fn: Callable, snapshot_args: Sequence, tick_args: Sequence[Optional[torch.Tensor]]):
        super().__init__(fn, snapshot_args, tick_args)
        current = torch.cuda.current_stream()
        side = self._side.get(current.device.index)
        warm = side is not None
        if side is None:
            side = self._side.setdefault(current.device.index, torch.cuda.Stream(current.device))
        side.wait_stream(current)  # the clones above were made on the current stream
        with torch.cuda.stream(side):
            if not warm:  # cuBLAS handles and workspaces of this stream, before its first capture
                fn(*self.snapshot_args, *self.inputs)
            self.graph = torch.cuda.CUDAGraph()
            self.graph.capture_begin(capture_error_mode="thread_local")
            try:
                self.outputs: Tuple[torch.Tensor, ...] = fn(*self.snapshot_args, *self.inputs)
            finally:
                self.graph.capture_end()
        current.wait_stream(side)

    def run(self) -> Tuple[torch.Tensor, ...]:
        self.graph.replay()
        return self.outputs


class SnapshotGraphs:
    """The captured tick of each snapshot buffer set (one per shape: FusedTick refills them): the
    first tick on a set runs eagerly and captures, the others replay."""

    def __init__(self, fn: Callable, make: Callable[..., StaticTick] = TickGraph):
        self.fn, self.make = fn, make
        self._ticks: Dict[int, Tuple[object, StaticTick]] = {}  # id(snapshot) -> (snapshot, tick)
        self.captures = 0
        self.replays = 0
        self.failed = ""  # why a capture failed; the ticks then stay eager, answers unchanged

    def step(self, snapshot, snapshot_args: Sequence, tick_args: Sequence[Optional[torch.Tensor]]
             ) -> Tuple[torch.Tensor, ...]:
        hit = self._ticks.get(id(snapshot))
        if hit is not None and hit[0] is snapshot:
            self.replays += 1
            return hit[1].replay(tick_args)
        out = self.fn(*snapshot_args, *tick_args)  # this tick's answer
        if self.failed:
            return out
        try:
            tick = self.make(self.fn, snapshot_args, tick_args)
        except Exception as exc:  # a capture the device refuses must not stop the stream
            self.failed = f"{type(exc).__name__}: {exc}"
            return out
        self._ticks[id(snapshot)] = (snapshot, tick)
        self.captures += 1
        return out
