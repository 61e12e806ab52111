"""A token bucket: a sender may send `burst` messages back to back, then `rate_hz` a second on
average. A minimum gap between consecutive messages would refuse a well-behaved sender whose
requests jitter around its rate (a control loop answered early, a network hiccup releasing two
queued frames); the bucket refuses only a sender that is over its rate for longer than its burst.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TokenBucket:
    rate_hz: float
    burst: float
    level: float = -1.0  # < 0: full at the first take
    at: float = 0.0

    def take(self, now: float) -> bool:
        """Spend one token at `now` (seconds, monotonic); False (nothing spent) when none is left."""
        if self.level < 0:
            self.level, self.at = self.burst, now
        self.level = min(self.burst, self.level + max(0.0, now - self.at) * self.rate_hz)
        self.at = now
        if self.level < 1.0:
            return False
        self.level -= 1.0
        return True
