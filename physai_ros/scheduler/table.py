"""Structure-of-arrays copy of the ranking fields of queued requests.

A decision ranks every queued request; doing that per request in Python costs ~1 us each, so
10,000 queued requests would take >10 ms. The fields a ranking needs are constant while a
request is queued (PendingEntry.rebind), so they are written once into numpy arrays on submit
and the policies rank whole arrays at once."""
from __future__ import annotations

from typing import Any

import numpy as np

_FLOATS = ("wait_sum", "anchor", "t_start", "floor", "exec_est", "arrival", "attained")
_INTS = ("skip_base", "seq")


class PendingTable:
    def __init__(self, capacity: int = 256) -> None:
        self._cap = 0
        self.hi = 0                             # slots [0, hi) have been used
        self._free: list[int] = []
        self.entries: list[Any] = []
        for name in _FLOATS:
            setattr(self, name, np.zeros(0))
        for name in _INTS:
            setattr(self, name, np.zeros(0, dtype=np.int64))
        self.ready = np.zeros(0, dtype=bool)   # rankable (not held for a refresh, not first)
        self._grow(capacity)

    def _grow(self, cap: int) -> None:
        for name in _FLOATS + _INTS + ("ready",):
            old = getattr(self, name)
            new = np.zeros(cap, dtype=old.dtype)
            new[: self._cap] = old[: self._cap]
            setattr(self, name, new)
        self.entries.extend([None] * (cap - self._cap))
        self._cap = cap

    def add(self, entry: Any) -> int:
        if self._free:
            slot = self._free.pop()
        else:
            if self.hi == self._cap:
                self._grow(2 * self._cap)
            slot = self.hi
            self.hi += 1
        self.entries[slot] = entry
        self.write(slot, entry)
        self.ready[slot] = True
        return slot

    def write(self, slot: int, e: Any) -> None:
        self.wait_sum[slot] = e.wait_sum
        self.anchor[slot] = e.anchor
        self.t_start[slot] = e.t_start
        self.floor[slot] = e.ratio_floor
        self.exec_est[slot] = e.exec_est
        self.arrival[slot] = e.request.arrival_time
        self.attained[slot] = e.book.attained_s
        self.skip_base[slot] = e.skip_base
        self.seq[slot] = e.seq

    def remove(self, slot: int) -> None:
        self.entries[slot] = None
        self.ready[slot] = False
        self._free.append(slot)

    def ready_slots(self) -> np.ndarray:
        return np.flatnonzero(self.ready[: self.hi])


class OrderedView:
    """The decision's order without building a list of all queued entries: priority entries
    first, then table slots in ranked order. Placement usually reads only a short prefix."""

    __slots__ = ("first", "slots", "entries", "_n1")

    def __init__(self, first: list, slots: np.ndarray, entries: list) -> None:
        self.first, self.slots, self.entries = first, slots, entries
        self._n1 = len(first)

    def __len__(self) -> int:
        return self._n1 + len(self.slots)

    def __getitem__(self, i: int) -> Any:
        if i < 0:
            i += len(self)
        if i < self._n1:
            return self.first[i]
        return self.entries[self.slots[i - self._n1]]

    def __iter__(self):
        yield from self.first
        for s in self.slots.tolist():
            yield self.entries[s]

    def without(self, drop: list) -> "OrderedView":
        ids = {id(e) for e in drop}
        slots = [e.slot for e in drop if e.slot >= 0]
        keep = self.slots[~np.isin(self.slots, np.asarray(slots, dtype=np.int64))] if slots else self.slots
        return OrderedView([e for e in self.first if id(e) not in ids], keep, self.entries)
