"""How much slower than an idle machine this one runs right now, for deadlines and rate checks.

A test that waits for real processes cannot know how long start-up, discovery or a round takes on
the machine it lands on: an idle 2-core box, the same box beside two busy jobs per core, or a CI
host shared with other runs. Fixed windows either fail there or are so long they hide a hang. So
waits take a base deadline (what the step needs on an idle 2-core machine, with margin) and
stretch it by slowdown(), measured when the wait starts and again when it runs out.

slowdown() is the larger of two measurements, never below 1:
- the share of a CPU a busy thread of this process gets: wall time over the thread's own CPU time
  for a ~20 ms spin (1 on an idle machine, ~3 with two busy processes per core on top of the
  suite). It sees load at the moment of the call;
- the 1-minute load average per core, which sees load that the short spin may fall between.
Capped at MAX_SLOWDOWN so that a test that really hangs still ends within a bounded time.
"""
from __future__ import annotations

import os
import threading
import time

MAX_SLOWDOWN = 6.0
_SPIN_CPU_S = 0.02
_CACHE_S = 2.0
_lock = threading.Lock()
_cached: tuple[float, float] | None = None  # (monotonic time measured, value)


def _spin_ratio() -> float:
    wall0, cpu0 = time.monotonic(), time.thread_time()
    x = 0
    while time.thread_time() - cpu0 < _SPIN_CPU_S:
        x += 1
    cpu = time.thread_time() - cpu0
    return (time.monotonic() - wall0) / max(cpu, 1e-6)


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
        value = min(MAX_SLOWDOWN, max(1.0, _spin_ratio(), _load_per_core()))
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
