"""Round-trip latency estimate for the robot client: observation capture -> chunk arrival.

The async trigger needs "how long will the next chunk take" to decide when to send. A mean
alone under-estimates a jittery link, so the estimate is the larger of an EWMA (tracks drift
quickly) and a high quantile of a sliding window (covers the tail); before any sample it is a
configured prior.
"""
from __future__ import annotations

import collections
import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class LatencyStats:
    samples: int
    rejected: int
    last_s: float
    ewma_s: float
    quantile_s: float
    estimate_s: float


class LatencyEstimator:
    def __init__(self, prior_s: float = 0.2, alpha: float = 0.2, window: int = 50,
                 quantile: float = 0.9, max_s: float = 60.0):
        if not (math.isfinite(prior_s) and prior_s >= 0):
            raise ValueError(f"prior_s must be >= 0, got {prior_s!r}")
        if not 0.0 < alpha <= 1.0:
            raise ValueError(f"alpha must lie in (0, 1], got {alpha!r}")
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window!r}")
        if not 0.0 <= quantile <= 1.0:
            raise ValueError(f"quantile must lie in [0, 1], got {quantile!r}")
        self.prior_s = float(prior_s)
        self.alpha = float(alpha)
        self.quantile = float(quantile)
        self.max_s = float(max_s)
        self._window: collections.deque = collections.deque(maxlen=int(window))
        self._ewma: float | None = None
        self._last = math.nan
        self.samples = 0
        self.rejected = 0

    def add(self, latency_s: float) -> bool:
        """Record one latency. Negative, non-finite or absurd values (clock trouble, a chunk
        for another robot's observation) are counted and ignored; returns whether it was used."""
        try:
            x = float(latency_s)
        except (TypeError, ValueError):
            self.rejected += 1
            return False
        if not (math.isfinite(x) and 0.0 <= x <= self.max_s):
            self.rejected += 1
            return False
        self._window.append(x)
        self._ewma = x if self._ewma is None else (1 - self.alpha) * self._ewma + self.alpha * x
        self._last = x
        self.samples += 1
        return True

    def observe(self, capture_time: float, receive_time: float) -> bool:
        return self.add(receive_time - capture_time)

    def ewma(self) -> float:
        return self.prior_s if self._ewma is None else self._ewma

    def window_quantile(self, q: float | None = None) -> float:
        if not self._window:
            return self.prior_s
        q = self.quantile if q is None else q
        return float(np.quantile(np.fromiter(self._window, float), q))

    def estimate(self) -> float:
        if not self._window:
            return self.prior_s
        return max(self.ewma(), self.window_quantile())

    def stats(self) -> LatencyStats:
        return LatencyStats(self.samples, self.rejected, self._last, self.ewma(),
                            self.window_quantile(), self.estimate())
