"""Chunked rounds before the streams' work, when both compute on the same host's cores.

A chunked round has a deadline (its task's SLO, then SLO escalation stops the robot for good);
the streams' work has none that a short delay breaks: a VLM pass refreshes the streaming robots'
KV cache (the ticks go on with the previous one), and a late action-expert tick takes a bigger
flow step while the robot's controller plays the window it already has (0.8 s ahead in the demo).
On a CPU all three compete for the same cores. In `make demo` on 2 cores (three chunked robots,
one streaming) the VLM thread, the action-expert thread and the chunked instance computed at once,
each many times slower than alone: the chunked robots got 100-230 rounds a minute at a 1.0-1.7 s
p50, 800 with the streaming robot served chunked instead. With each stream waiting for the
chunked batch in flight (a pass at most 1 s, a tick 0.25 s), 390-490 rounds at 0.5-0.65 s, and the
streaming robot still completed episodes (docs/demo.md).

Only local instances count: a remote engine worker computes on another host. On a GPU the streams
and the chunked batch run on their own CUDA streams, so the server does not wait there
(server.streaming.vlm_waits_for_chunked_s, tick_waits_for_chunked_s).
"""
from __future__ import annotations

import contextlib
import threading
import time
from typing import Iterator


class ChunkedCompute:
    """How many local chunked batches compute now; stream threads wait for none."""

    def __init__(self) -> None:
        self._running = 0
        self._idle = threading.Condition()

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Around one local engine call."""
        with self._idle:
            self._running += 1
        try:
            yield
        finally:
            with self._idle:
                self._running -= 1
                if self._running == 0:
                    self._idle.notify_all()

    @property
    def running(self) -> int:
        return self._running

    def wait_idle(self, max_wait_s: float) -> float:
        """Block until no chunked batch computes, at most max_wait_s. Returns the seconds
        waited (0.0 when none was computing)."""
        # Unlocked first look: the streams ask before every tick (up to 480 a second) and no
        # batch is running most of the time. A batch starting right after it is the same race
        # the locked check had.
        if max_wait_s <= 0 or self._running == 0:
            return 0.0
        with self._idle:
            if self._running == 0:
                return 0.0
            t0 = time.monotonic()
            self._idle.wait_for(lambda: self._running == 0, max_wait_s)
            return time.monotonic() - t0
