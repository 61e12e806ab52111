"""Kairos's execution-aware policy (Algorithm 1, phases 1-2): wait-ratio buckets with aging,
longest estimated execution first inside a bucket. Placement, batching, refresh and skip
counters are shared with the baselines (core.py, placement.py).

The §5.5 ablations are parameters: `buckets` (default 10; 0 = infinitely many, i.e. order by
the raw wait ratio, aging still applied to the estimate) and `intra_bucket` ("longest_exec",
the paper's, "fifo" or "shortest_exec")."""
from __future__ import annotations

import math

import numpy as np

from physai_ros.scheduler.policy_machinery import QueueScheduler


def bucket_of(ratio: float, skipped: int, buckets: int, aging_interval: int) -> int:
    """Alg. 1 l.6-8: floor(w * B) (a ratio of exactly 1 lands in the top bucket), promoted by
    ceil(skipped / A) buckets once skipped >= A, capped at the top."""
    b = int(ratio * buckets)
    if b >= buckets:
        b = buckets - 1
    if skipped >= aging_interval:
        b = min(buckets - 1, b + math.ceil(skipped / aging_interval))
    return b


def exec_estimate(last_exec_s: float, skipped: int) -> float:
    """Alg. 1 l.12: the last observed execution length, aged by (1 + skipped)."""
    return last_exec_s * (1 + skipped)


INTRA_BUCKET = ("longest_exec", "fifo", "shortest_exec")


class WaitRatioScheduler(QueueScheduler):
    name = "wait_ratio"

    def __init__(self, buckets: int = 10, aging_interval: int = 20, intra_bucket: str = "longest_exec",
                 **kw) -> None:
        if int(buckets) < 0 or int(aging_interval) < 1:
            raise ValueError(f"buckets must be >= 0 (0: infinitely many) and aging_interval >= 1, "
                             f"got {buckets}, {aging_interval}")
        if intra_bucket not in INTRA_BUCKET:
            raise ValueError(f"intra_bucket: expected one of {INTRA_BUCKET}, got {intra_bucket!r}")
        super().__init__(**kw)
        self.buckets = int(buckets)
        self.aging_interval = int(aging_interval)
        self.intra_bucket = intra_bucket

    def bucket(self, request_id: str, now: float) -> int:
        """The request's bucket (with buckets=0, the raw ratio has no bucket: -1)."""
        e = self._pending[request_id]
        if self.buckets == 0:
            return -1
        return bucket_of(e.wait_ratio(now), self._cycle - e.skip_base, self.buckets, self.aging_interval)

    def ratios(self, slots: np.ndarray, now: float) -> np.ndarray:
        """PendingEntry.wait_ratio for many slots at once (same float operations)."""
        t = self._table
        anchor = t.anchor[slots]
        w = t.wait_sum[slots] + np.maximum(now - anchor, 0.0)   # anchor inf -> no ongoing wait
        life = now - t.t_start[slots]
        pos = life > 0.0
        r = np.where(pos, w / np.where(pos, life, 1.0), (w > 0.0).astype(np.float64))
        return np.maximum(np.minimum(r, 1.0), t.floor[slots])

    def order_slots(self, slots: np.ndarray, now: float) -> np.ndarray:
        t, B, A = self._table, self.buckets, self.aging_interval
        skipped = self._cycle - t.skip_base[slots]
        if B == 0:  # infinitely many buckets: the raw ratio is the priority
            b = self.ratios(slots, now)
        else:
            b = np.minimum((self.ratios(slots, now) * B).astype(np.int64), B - 1)
            b = np.minimum(b + np.where(skipped >= A, -(-skipped // A), 0), B - 1)
        est = t.exec_est[slots] * (1 + skipped)
        inner = {"longest_exec": -est, "shortest_exec": est, "fifo": t.seq[slots]}[self.intra_bucket]
        # Highest bucket first, then the in-bucket order (longest estimated execution), then oldest.
        return slots[np.lexsort((t.seq[slots], inner, -b))]
