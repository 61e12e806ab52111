"""The fused streaming tick as a CUDA graph, one per KV snapshot (realtime-vla section 3.1 applied
to the 480 Hz stream).

Why: on an H200 the eager fused tick at pi0's expert widths took 9.6 ms alone (host-bound: some
200 launches and their Python around them), 36 ms beside the VLM thread, so the stream ran at
23 Hz with 95 % of its 480 Hz slots missed (bench/results/gpu, 2026-11-29). A replay is one
launch from the host.

How: `FusedTick._tick` is a pure function of tensors. Its per-snapshot inputs (the K^T/V^T
buffers whose suffix columns each tick overwrites, the mask bias, RoPE tables) already live at
fixed addresses for as long as the snapshot does, so a graph is captured per snapshot against
them; the per-tick inputs (state, wrench, Euler state, host scalars) are copied into static
buffers before each replay, and the outputs are copied out (the robot's preview may be read
after the next tick has run). The first tick of a snapshot runs eagerly (its result is that
tick's answer) and then captures; every later tick of the snapshot replays.

Capture is thread-local and on a side stream, without the device-wide synchronize, garbage
collection and cache flush that `torch.cuda.graph` does on entry: the VLM thread keeps running
on its own stream meanwhile. A retired snapshot's graph is kept until the next one retires, so
no graph (and its private memory pool) is destroyed while its last replay may still be queued.

What the CPU can check is tested: `StaticTick` keeps the same contract (static inputs, outputs
copied out, one per snapshot and batch) by calling the tick on its static buffers, and
test_streaming_tick_graph drives `SnapshotGraphs` with it against the eager tick. The capture
itself needs a GPU: bench/gpu_steps checks it against the eager fused tick and times it.
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
    """The captured tick of the snapshot being ticked: the first tick of a snapshot (or of a new
    robot count) runs eagerly and captures, the others replay."""

    def __init__(self, fn: Callable, make: Callable[..., StaticTick] = TickGraph):
        self.fn, self.make = fn, make
        self._current: Optional[Tuple[object, int, StaticTick]] = None  # (snapshot, batch, tick)
        self._retired: Optional[StaticTick] = None
        self.captures = 0
        self.replays = 0

    def step(self, snapshot, snapshot_args: Sequence, tick_args: Sequence[Optional[torch.Tensor]]
             ) -> Tuple[torch.Tensor, ...]:
        batch = int(tick_args[2].shape[0])  # x [B, C, A]
        cur = self._current
        if cur is not None and cur[0] is snapshot and cur[1] == batch:
            self.replays += 1
            return cur[2].replay(tick_args)
        out = self.fn(*snapshot_args, *tick_args)  # this tick's answer
        tick = self.make(self.fn, snapshot_args, tick_args)
        self._retired = None if cur is None else cur[2]
        self._current = (snapshot, batch, tick)
        self.captures += 1
        return out
