"""How much slower than an idle machine this one runs right now, for deadlines and rate checks.

A test that waits for real processes cannot know how long start-up, discovery or a round takes on
the machine it lands on: an idle 2-core box, the same box beside two busy jobs per core, or a CI
host shared with other runs. Fixed windows either fail there or are so long they hide a hang. So
waits take a base deadline (what the step needs on an idle 2-core machine, with margin) and
stretch it by slowdown(), measured when the wait starts and again when it runs out.

slowdown() is the larger of two measurements of the run queue per core, never below 1:
- now: the runnable tasks the kernel counts (/proc/loadavg's 4th field), sampled over ~50 ms;
- the 1-minute load average, which sees load that falls between those samples.
Both count other processes, not this one's threads waiting for the GIL: a wall-over-CPU spin in
a test process whose executor threads are busy read 6 on a machine whose run queue was 4 per
core. Capped at MAX_SLOWDOWN so that a test that really hangs still ends within a bounded time.
"""
from __future__ import annotations

import os
import threading
import time

MAX_SLOWDOWN = 6.0
_SAMPLES, _SAMPLE_GAP_S = 5, 0.01
_CACHE_S = 2.0
_lock = threading.Lock()
_cached: tuple[float, float] | None = None  # (monotonic time measured, value)


def _runnable_per_core() -> float:
    """Runnable tasks per core now (less this sampling thread), averaged over a few samples."""
    samples = []
    for _ in range(_SAMPLES):
        try:
            with open("/proc/loadavg") as f:
                running = int(f.read().split()[3].split("/")[0])
        except (OSError, ValueError, IndexError):  # no procfs: the load average alone
            return 0.0
        samples.append(max(0, running - 1))
        time.sleep(_SAMPLE_GAP_S)
    return sum(samples) / len(samples) / (os.cpu_count() or 1)


def _load_per_core() -> float:
    try:
        return os.getloadavg()[0] / (os.cpu_count() or 1)
    except OSError:  # no load average on this platform
        return 1.0


def slowdown() -> float:
    """The machine's current slowdown against an idle one (1.0 .. MAX_SLOWDOWN)."""
    global _cached
    with _lock:
        now = time.monotonic()
        if _cached is not None and now - _cached[0] < _CACHE_S:
            return _cached[1]
        value = min(MAX_SLOWDOWN, max(1.0, _runnable_per_core(), _load_per_core()))
        _cached = (time.monotonic(), value)
        return value


def scaled(seconds: float) -> float:
    """A deadline of `seconds` on an idle machine, stretched to the machine's state now."""
    return seconds * slowdown()


class Deadline:
    """A base deadline stretched by the slowdown measured at its start and, when it runs out, once
    more by the slowdown then (load that arrives during a wait extends it, up to MAX_SLOWDOWN)."""

    def __init__(self, seconds: float):
        self.base_s = seconds
        self.start = time.monotonic()
        self.factor = slowdown()

    def expired(self) -> bool:
        if time.monotonic() - self.start < self.base_s * self.factor:
            return False
        self.factor = max(self.factor, slowdown())
        return time.monotonic() - self.start >= self.base_s * self.factor

    def remaining(self) -> float:
        return max(0.0, self.start + self.base_s * self.factor - time.monotonic())

    def describe(self) -> str:
        return (f"{time.monotonic() - self.start:.0f} s ({self.base_s:g} s on an idle machine x slowdown "
                f"{self.factor:.1f}; load average {', '.join(f'{v:.1f}' for v in os.getloadavg())})")
