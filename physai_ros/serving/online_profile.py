"""System 1's batch service times measured while serving, and when they have drifted from the
ones the factory plan was made with (ROSA §3.4.2 profiles L(b, lambda); here the service time
at each batch size is measured from real batches, the queueing at each rate is then simulated
from it by scheduler.factory.profiling, as at start-up).

A batch size counts once it has `min_samples` batches in its window; its median is compared
with the reference. Without a reference (the plan's profile came from a file, not from this
server) the first full window is the drift: the plan should run on what this server measures.
"""
from __future__ import annotations

import statistics
from collections import deque
from typing import Mapping


class OnlineServiceTimes:
    def __init__(self, reference: Mapping[int, float] | None = None, window: int = 32, min_samples: int = 8,
                 threshold: float = 0.5):
        if window < min_samples or min_samples < 1 or not threshold > 0:
            raise ValueError("window >= min_samples >= 1 and threshold > 0")
        self.reference = {int(b): float(t) for b, t in (reference or {}).items()}
        self.window, self.min_samples, self.threshold = window, min_samples, threshold
        self._samples: dict[int, deque] = {}
        self.batches = 0

    def observe(self, batch: int, service_s: float) -> str | None:
        """One served batch. Returns why the plan's service times no longer hold (None while
        they do): the batch size, the measured median and the reference."""
        if batch < 1 or not service_s > 0:
            return None
        self.batches += 1
        q = self._samples.setdefault(int(batch), deque(maxlen=self.window))
        q.append(float(service_s))
        if len(q) < self.min_samples:
            return None
        med = statistics.median(q)
        ref = self.reference.get(int(batch))
        if ref is None:
            return (f"System 1 batch {batch} measured at {med * 1e3:.1f} ms over {len(q)} batches "
                    "(the plan's profile was not measured on this server)")
        if abs(med / ref - 1.0) > self.threshold:
            return (f"System 1 batch {batch} measured at {med * 1e3:.1f} ms over {len(q)} batches, "
                    f"{ref * 1e3:.1f} ms planned (beyond {self.threshold:.0%})")
        return None

    def medians(self) -> dict[int, float]:
        """The service time per batch size: measured where a window is full enough, the
        reference elsewhere."""
        out = dict(self.reference)
        out.update({b: statistics.median(q) for b, q in self._samples.items() if len(q) >= self.min_samples})
        return out

    def rebase(self, service: Mapping[int, float]) -> None:
        """A new plan runs on `service`: drift is measured from it, over fresh windows."""
        self.reference = {int(b): float(t) for b, t in service.items()}
        self._samples.clear()
