"""Sliding-window statistics: percentiles of recent samples and the rate of recent events.

Both keep only what a window needs (a bounded deque pruned by age), so a node can feed them from
a 480 Hz callback for days without growing. Times are float seconds on any monotonic clock the
caller chooses; nothing here reads a clock itself, which keeps it deterministic under test.
"""
from __future__ import annotations

import math
from collections import deque


def _check_time(t: float) -> float:
    t = float(t)
    if not math.isfinite(t):
        raise ValueError(f"time must be finite, got {t!r}")
    return t


def _finite_sample(t, value) -> tuple[float, float] | None:
    """(t, value) as floats when both are finite numbers, else None (the caller counts it)."""
    try:
        t, value = _check_time(t), float(value)
    except (TypeError, ValueError):
        return None
    return (t, value) if math.isfinite(value) else None


class SlidingWindow:
    """Samples of the last `span_s` seconds (at most `max_samples`, oldest dropped first)."""

    def __init__(self, span_s: float = 10.0, max_samples: int = 10_000):
        if not (math.isfinite(span_s) and span_s > 0):
            raise ValueError(f"span_s must be positive, got {span_s!r}")
        if max_samples < 1:
            raise ValueError(f"max_samples must be >= 1, got {max_samples!r}")
        self.span_s = float(span_s)
        self._samples: deque[tuple[float, float]] = deque(maxlen=int(max_samples))
        self.rejected = 0  # non-finite values or times: counted, never stored

    def add(self, t: float, value: float) -> bool:
        sample = _finite_sample(t, value)
        if sample is None:
            self.rejected += 1
            return False
        self._samples.append(sample)
        return True

    def _prune(self, now: float) -> None:
        horizon = _check_time(now) - self.span_s
        while self._samples and self._samples[0][0] < horizon:
            self._samples.popleft()

    def values(self, now: float) -> list[float]:
        self._prune(now)
        return [v for _, v in self._samples]

    def count(self, now: float) -> int:
        self._prune(now)
        return len(self._samples)

    def percentile(self, q: float, now: float) -> float | None:
        """q in [0, 100], linear interpolation between order statistics; None when empty."""
        if not 0.0 <= q <= 100.0:
            raise ValueError(f"percentile must be in [0, 100], got {q!r}")
        vals = sorted(self.values(now))
        if not vals:
            return None
        pos = (len(vals) - 1) * q / 100.0
        lo = math.floor(pos)
        hi = min(lo + 1, len(vals) - 1)
        return vals[lo] + (vals[hi] - vals[lo]) * (pos - lo)

    def mean(self, now: float) -> float | None:
        vals = self.values(now)
        return sum(vals) / len(vals) if vals else None


class RateEstimator:
    """Events per second over the last `span_s` seconds.

    The rate is (events in the window - 1) / (now - oldest event in the window): measured from the
    oldest event rather than the window start, so a stream that started 0.3 s ago already reads
    its true rate; measured up to `now` rather than the newest event, so a stream that stops reads
    a falling rate at once and 0 when fewer than two events remain: a dead stream never keeps
    its last rate.
    """

    def __init__(self, span_s: float = 5.0, max_events: int = 100_000):
        if not (math.isfinite(span_s) and span_s > 0):
            raise ValueError(f"span_s must be positive, got {span_s!r}")
        self.span_s = float(span_s)
        self._times: deque[float] = deque(maxlen=int(max_events))
        self.total = 0
        self.rejected = 0

    def tick(self, t: float) -> bool:
        try:
            t = _check_time(t)
        except (TypeError, ValueError):
            self.rejected += 1
            return False
        if self._times and t < self._times[-1]:
            self.rejected += 1  # time going backwards would make the span meaningless
            return False
        self._times.append(t)
        self.total += 1
        return True

    def rate_hz(self, now: float) -> float:
        horizon = _check_time(now) - self.span_s
        while self._times and self._times[0] < horizon:
            self._times.popleft()
        if len(self._times) < 2:
            return 0.0
        span = max(now, self._times[-1]) - self._times[0]
        return (len(self._times) - 1) / span if span > 0 else 0.0


class CounterRate:
    """How much a cumulative counter (refusals, fallbacks, underruns) grew over the last `span_s`
    seconds, from totals sampled now and then (each diagnostics update). With the default span it
    is "per minute", so a status turns bad when something happens and good again a minute after
    it stops, while the totals keep growing. The first sample counts from zero; a counter that
    goes down (its process restarted) starts over from its new value."""

    def __init__(self, span_s: float = 60.0):
        if not (math.isfinite(span_s) and span_s > 0):
            raise ValueError(f"span_s must be positive, got {span_s!r}")
        self.span_s = float(span_s)
        self._samples: deque[tuple[float, float]] = deque()

    def update(self, t: float, total: float) -> float:
        t = _check_time(t)
        if not math.isfinite(total):
            raise ValueError(f"counter total must be finite, got {total!r}")
        if not self._samples:
            self._samples.append((t, 0.0))
        elif total < self._samples[-1][1] or t < self._samples[-1][0]:
            self._samples.clear()
            self._samples.append((t, 0.0))
        self._samples.append((t, float(total)))
        # Keep the newest sample at or before the window start as the baseline.
        while len(self._samples) > 2 and self._samples[1][0] <= t - self.span_s:
            self._samples.popleft()
        return float(total) - self._samples[0][1]


class SeriesRecorder:
    """Time series for the run report (`series` in the summary JSON), bounded in memory.

    Each label keeps at most `max_points` points: when full, every second point is dropped and
    the label then keeps only every 2nd (4th, ...) new point, so a 10-minute soak run and a 30 s
    demo both end as an evenly spaced series of at most `max_points` points.
    """

    def __init__(self, max_points: int = 2000):
        if max_points < 2:
            raise ValueError(f"max_points must be >= 2, got {max_points!r}")
        self.max_points = int(max_points)
        self._t: dict[str, list[float]] = {}
        self._v: dict[str, list[float]] = {}
        self._stride: dict[str, int] = {}
        self._seen: dict[str, int] = {}
        self.rejected = 0

    def add(self, label: str, t: float, value: float) -> bool:
        sample = _finite_sample(t, value)
        if sample is None:
            self.rejected += 1
            return False
        t, value = sample
        ts, vs = self._t.setdefault(label, []), self._v.setdefault(label, [])
        seen = self._seen.get(label, 0)
        self._seen[label] = seen + 1
        stride = self._stride.setdefault(label, 1)
        if seen % stride:
            return True
        ts.append(t)
        vs.append(value)
        if len(ts) > self.max_points:
            self._t[label], self._v[label] = ts[::2], vs[::2]
            self._stride[label] = stride * 2
        return True

    def to_json(self) -> dict:
        return {label: {"t": list(self._t[label]), "v": list(self._v[label])} for label in self._t}
