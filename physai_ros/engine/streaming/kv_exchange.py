"""KV-cache hand-over from the VLM stream (writer, ~30 Hz) to the action-expert stream (reader,
~480 Hz): a double buffer with a version counter.

The writer fills the back slot while readers use the front slot, then swaps under a lock, so a
reader always sees a complete cache from one VLM pass. A reader holds a lease on the slot it
reads; the writer waits for the back slot's leases to end before overwriting it (a lease lasts
one copy into the expert's own buffers, far shorter than a VLM period).

On CUDA the writes are asynchronous: the writer records an event on its stream after filling a
slot and the reader's stream waits on it; the reader records an event when it has copied out,
and the writer's stream waits on that before the slot is written again. On CPU events are None.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator, List, Optional, Tuple

import torch

from physai_ros.engine.types import PrefixCache


@dataclass
class KVSnapshot:
    """One complete VLM pass. Row i of `cache` belongs to robot_ids[i]."""

    version: int
    cache: PrefixCache
    robot_ids: Tuple[str, ...]
    captured_at: Tuple[float, ...]  # per row: when its observation was taken (slow-loop latency)
    published_at: float
    ready_event: Optional[object] = None  # torch.cuda.Event on CUDA


@dataclass
class _Slot:
    keys: List[torch.Tensor] = field(default_factory=list)
    values: List[torch.Tensor] = field(default_factory=list)
    pad: Optional[torch.Tensor] = None
    next_pos: Optional[torch.Tensor] = None
    readers: int = 0
    release_event: Optional[object] = None
    snapshot: Optional[KVSnapshot] = None

    def fits(self, cache: PrefixCache) -> bool:
        return (self.pad is not None and len(self.keys) == len(cache.keys)
                and tuple(self.pad.shape) == tuple(cache.pad.shape)
                and all(a.shape == b.shape and a.dtype == b.dtype and a.device == b.device
                        for a, b in zip(self.keys, cache.keys)))

    def fill(self, cache: PrefixCache) -> PrefixCache:
        if not self.fits(cache):
            # Shapes change when robots join or leave or prompt lengths change: reallocate. No
            # reader holds this slot (the writer waited), so dropping the old tensors is safe.
            self.keys = [torch.empty_like(k) for k in cache.keys]
            self.values = [torch.empty_like(v) for v in cache.values]
            self.pad = torch.empty_like(cache.pad)
            self.next_pos = torch.empty_like(cache.next_pos)
        for dst, src in zip(self.keys, cache.keys):
            dst.copy_(src, non_blocking=True)
        for dst, src in zip(self.values, cache.values):
            dst.copy_(src, non_blocking=True)
        self.pad.copy_(cache.pad, non_blocking=True)
        self.next_pos.copy_(cache.next_pos, non_blocking=True)
        return PrefixCache(keys=self.keys, values=self.values, pad=self.pad, next_pos=self.next_pos)


def _cuda(t: torch.Tensor) -> bool:
    return t.device.type == "cuda" and torch.cuda.is_available()


class KVDoubleBuffer:
    def __init__(self) -> None:
        self._slots = [_Slot(), _Slot()]
        self._front = -1  # no complete cache yet
        self._version = 0
        self._cond = threading.Condition()

    @property
    def version(self) -> int:
        return self._version

    def publish(self, cache: PrefixCache, robot_ids, captured_at, published_at: float) -> int:
        """Copy a finished cache into the back slot and make it the front. Returns its version.
        captured_at: one capture time per row."""
        captured = tuple(float(c) for c in captured_at)
        if len(robot_ids) != cache.batch_size or len(captured) != cache.batch_size:
            raise ValueError(f"{len(robot_ids)} robot ids / {len(captured)} capture times for a cache "
                             f"of batch {cache.batch_size}")
        with self._cond:
            back = 0 if self._front != 0 else 1
            slot = self._slots[back]
            while slot.readers:
                self._cond.wait()
        # Outside the lock: readers of the front slot are never blocked by the copy.
        on_gpu = _cuda(cache.pad)
        if on_gpu and slot.release_event is not None:
            torch.cuda.current_stream().wait_event(slot.release_event)
        view = slot.fill(cache)
        event = None
        if on_gpu:
            event = torch.cuda.Event()
            event.record()
        with self._cond:
            self._version += 1
            slot.snapshot = KVSnapshot(self._version, view, tuple(robot_ids), captured,
                                       float(published_at), event)
            self._front = back
            return self._version

    @contextmanager
    def read(self) -> Iterator[Optional[KVSnapshot]]:
        """Lease the newest complete snapshot (None before the first publish)."""
        with self._cond:
            if self._front < 0:
                slot = None
            else:
                slot = self._slots[self._front]
                slot.readers += 1
        if slot is None:
            yield None
            return
        snap = slot.snapshot
        try:
            if snap.ready_event is not None:
                torch.cuda.current_stream().wait_event(snap.ready_event)
            yield snap
        finally:
            if snap.ready_event is not None:
                ev = torch.cuda.Event()
                ev.record()
                slot.release_event = ev
            with self._cond:
                slot.readers -= 1
                self._cond.notify_all()
