"""Execution-unaware baselines behind the same interface (Kairos §5.1).

FIFO: oldest request first (the default of LLM serving engines).
Autellix: least attained service at the program level -- the task with the least accumulated
generation time goes first, FIFO among equals. (Autellix proper discretises attained service
into a few queues with its own anti-starvation; we keep its ordering principle only, like the
Kairos paper's description "prioritizes requests with lower accumulated generation time".)
Both share placement, batching and stale-observation refresh with the wait-ratio policy so
that only the order differs in comparisons.
"""
from __future__ import annotations

import numpy as np

from physai_ros.scheduler.policy_machinery import QueueScheduler


class FifoScheduler(QueueScheduler):
    name = "fifo"

    def order_slots(self, slots: np.ndarray, now: float) -> np.ndarray:
        t = self._table
        return slots[np.lexsort((t.seq[slots], t.arrival[slots]))]


class AutellixScheduler(QueueScheduler):
    name = "autellix"

    def order_slots(self, slots: np.ndarray, now: float) -> np.ndarray:
        t = self._table
        # attained service is constant while a request is queued: its task has nothing running.
        return slots[np.lexsort((t.seq[slots], t.arrival[slots], t.attained[slots]))]
