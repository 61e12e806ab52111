"""Requests lost with their engine instance (a remote worker gone, an instance's thread dead),
back to the scheduler's queue to run on another instance, without ROS. The serving core calls it
under its lock and turns the requests it gives up on into ERROR chunks.

A request is dispatched at most MAX_DISPATCH_ATTEMPTS times (a worker that keeps vanishing must
not bounce a request forever), and one whose task ended meanwhile is not queued again.
"""
from __future__ import annotations

from collections import Counter
from typing import Iterable

from physai_ros.scheduler.types import Request

# A request whose instance was lost (worker gone) is dispatched at most this many times.
MAX_DISPATCH_ATTEMPTS = 3


class Redispatch:
    def __init__(self, scheduler, failover: Counter, max_attempts: int = MAX_DISPATCH_ATTEMPTS):
        """failover: the server's failover counters (redispatched, redispatch_exhausted)."""
        self.scheduler = scheduler
        self.failover = failover
        self.max_attempts = int(max_attempts)
        self._attempts: dict[str, int] = {}  # request_id -> dispatches so far (lost ones only)

    def retry(self, lost: Iterable[Request], now: float, limit: bool = True,
              count: bool = True) -> tuple[set[str], list[tuple[Request, str]]]:
        """Queue `lost` again. limit: give up on a request dispatched max_attempts times already;
        count: this loss counts as a dispatch (False for work that never ran). Returns the ids
        queued again and (request, why) for those given up."""
        again: set[str] = set()
        given_up: list[tuple[Request, str]] = []
        for req in lost:
            n = self._attempts.get(req.request_id, 1)
            if limit and n >= self.max_attempts:
                self.failover["redispatch_exhausted"] += 1
                given_up.append((req, f"after {n} instances"))
            elif not self.scheduler.requeue(req.request_id, now):
                given_up.append((req, "its task ended meanwhile"))
            else:
                if count:
                    self._attempts[req.request_id] = n + 1
                again.add(req.request_id)
        self.failover["redispatched"] += len(again)
        return again, given_up

    def settle(self, requests: Iterable[Request], again: set[str], now: float, service_s: float) -> None:
        """A batch's requests are over, except those queued `again`: answered, no longer in flight,
        and the scheduler told (service_s: the batch's time on the instance)."""
        for req in requests:
            if req.request_id not in again:
                self.done(req.request_id)
                self.scheduler.on_completed(req.request_id, now, service_s)

    def done(self, request_id: str) -> None:
        """The request is answered (or dropped): no longer in flight."""
        self._attempts.pop(request_id, None)
