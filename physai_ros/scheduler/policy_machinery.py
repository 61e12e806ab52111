"""Machinery shared by every policy: validation, the pending table, task books, skip counters,
stale-observation refresh, placement and counters. A policy only supplies `order_slots()`."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np

from physai_ros.scheduler.bookkeeping import TaskBook
from physai_ros.scheduler.pending import PendingEntry, finite, validate
from physai_ros.scheduler.placement import PLACEMENT_RULES, place
from physai_ros.scheduler.table import OrderedView, PendingTable
from physai_ros.scheduler.types import (
    Batch,
    EngineInstanceInfo,
    Request,
    SchedulerDecision,
    SubmitResult,
)


# How a pending round's ongoing wait is counted (bookkeeping.py): "paper" from when the robot
# actually waits; "lookahead" from when the next generation must start (our earlier reading).
PROVISIONAL_WAITS = ("paper", "lookahead")


@dataclass(frozen=True)
class TaskHandover:
    """Tasks moving from one queue to another: their histories and their queued requests
    (request, whether it was requeued after a lost instance)."""

    books: dict[str, TaskBook]
    queued: tuple[tuple[Request, bool], ...]


class QueueScheduler:
    """Base class: everything except the order in which pending requests are considered."""

    name = "base"

    def __init__(self, *, stale_after_s: Optional[float] = None, refresh_timeout_s: float = 0.25,
                 saturation_tolerance: float = 0.05, default_exec_s: float = 0.0,
                 count_first_wait: bool = False, task_ttl_s: float = 600.0,
                 provisional_wait: str = "paper", hold_ratio_floor: bool = False,
                 placement_rule: str = "paper") -> None:
        """provisional_wait, hold_ratio_floor, placement_rule: the paper's behaviour by default;
        the other values are this project's earlier readings, kept for the ablation
        (docs/scheduler.md, "Algorithm 1, step by step")."""
        if stale_after_s is not None and not (stale_after_s > 0):
            raise ValueError("stale_after_s must be > 0 or None")
        if provisional_wait not in PROVISIONAL_WAITS:
            raise ValueError(f"provisional_wait: expected one of {PROVISIONAL_WAITS}, got {provisional_wait!r}")
        if placement_rule not in PLACEMENT_RULES:
            raise ValueError(f"placement_rule: expected one of {PLACEMENT_RULES}, got {placement_rule!r}")
        self.provisional_wait = provisional_wait
        self.hold_ratio_floor = bool(hold_ratio_floor)
        self.placement_rule = placement_rule
        if not (refresh_timeout_s >= 0) or not (0 <= saturation_tolerance < 1) or default_exec_s < 0:
            raise ValueError("refresh_timeout_s >= 0, 0 <= saturation_tolerance < 1, default_exec_s >= 0")
        self.stale_after_s = stale_after_s
        self.refresh_timeout_s = refresh_timeout_s
        self.saturation_tolerance = saturation_tolerance
        self.default_exec_s = default_exec_s
        self.count_first_wait = count_first_wait
        # A server that never calls on_task_finished (robot vanished, task id changed) must not
        # grow without bound: histories idle this long with nothing queued or running are dropped.
        self.task_ttl_s = task_ttl_s
        self._pending: dict[str, PendingEntry] = {}
        self._table = PendingTable()
        self._held: dict[int, PendingEntry] = {}     # awaiting a refresh (by id(entry))
        self._first: dict[int, PendingEntry] = {}    # selected before, served ahead of all
        self._requeued: set[str] = set()            # pending again after their instance was lost
        self._requeue_seq = -(1 << 62)              # requeued work sorts before all other work
        self._by_task: dict[str, str] = {}         # task_id -> pending request_id
        self._inflight: dict[str, tuple[Request, float]] = {}
        self._books: dict[str, TaskBook] = {}
        self._cycle = 0                             # cycles that dispatched something
        self._seq = 0
        self._counts: Counter[str] = Counter()
        self._rejects: Counter[str] = Counter()

    # ---- Scheduler protocol -----------------------------------------------------------
    def submit(self, request: Request, now: float) -> SubmitResult:
        self._counts["submitted"] += 1
        reason = validate(request)
        if not reason and not finite(now):
            reason = f"now must be finite, got {now!r}"
        if not reason and request.request_id in self._inflight:
            reason = f"request_id {request.request_id!r} is already in flight"
        if reason:
            return self._reject(reason)
        book = self._books.get(request.task_id)
        if book is not None and book.last_dispatched_round is not None \
                and request.round_id <= book.last_dispatched_round:
            return self._reject(f"task {request.task_id!r} round {request.round_id} already served "
                                f"(last dispatched round {book.last_dispatched_round})")
        clash = self._pending.get(request.request_id)
        if clash is not None and clash.request.task_id != request.task_id:
            return self._reject(f"duplicate request_id {request.request_id!r} (queued for task "
                                f"{clash.request.task_id!r})")
        superseded: tuple[Request, ...] = ()
        old_id = self._by_task.get(request.task_id)
        if old_id is not None:
            old = self._pending[old_id]
            if request.round_id < old.request.round_id:
                return self._reject(f"task {request.task_id!r} round {request.round_id} is older "
                                    f"than its queued round {old.request.round_id}")
            if request.round_id == old.request.round_id:
                return self._refresh(old, request, now)
            self._drop(old_id)
            superseded = (old.request,) if old_id != request.request_id else ()
            self._counts["superseded"] += 1
        if book is None:
            book = self._books[request.task_id] = TaskBook(request.task_id, request.arrival_time,
                                                            self.count_first_wait,
                                                            lookahead=self.provisional_wait == "lookahead")
        book.on_request(request.round_id, request.arrival_time, request.exec_phase_start,
                        request.actions_remaining, request.control_period)
        self._queue(request, book, now)
        self._counts["accepted"] += 1
        return SubmitResult(True, "", superseded)

    def on_dispatched(self, batch: Batch, now: float) -> None:
        for rid in batch.request_ids:
            item = self._inflight.get(rid)
            if item is None:
                self._counts["unknown_dispatch"] += 1
                continue
            req, _ = item
            self._inflight[rid] = (req, now)
            book = self._books.get(req.task_id)
            if book is not None:
                book.on_dispatch(req.round_id, now)

    def on_completed(self, request_id: str, now: float, generation_s: float) -> None:
        item = self._inflight.pop(request_id, None)
        if item is None or not finite(now):
            self._counts["unknown_completion"] += 1
            return
        req, _ = item
        self._counts["completed"] += 1
        book = self._books.get(req.task_id)
        if book is not None:
            book.on_complete(req.round_id, now, generation_s if finite(generation_s) else 0.0)

    def on_task_finished(self, task_id: str) -> list[Request]:
        dropped = [e.request for e in self._pending.values() if e.request.task_id == task_id]
        for req in dropped:
            self._drop(req.request_id)
        self._books.pop(task_id, None)
        self._counts["tasks_finished"] += 1
        return dropped

    def requeue(self, request_id: str, now: float) -> bool:
        """Lost with its instance: pending again, first in line, never asked for a refresh (it
        was served from this observation once already) and never superseded by its task's next
        round (it is not the task's queued request; the next round queues beside it)."""
        item = self._inflight.get(request_id)
        book = self._books.get(item[0].task_id) if item is not None else None
        if item is None or book is None:  # unknown, or its task ended while it was in flight
            self._counts["requeue_refused"] += 1
            return False
        del self._inflight[request_id]
        self._queue_first(item[0], book, now)
        self._counts["requeued"] += 1
        return True

    def hand_over(self, task_ids: Sequence[str]) -> TaskHandover:
        """Take these tasks' queued requests out, for another queue to serve (a route change:
        scheduler.routed). Their books go with them; a task with a request still in flight here
        keeps its book here as well (the same object) until that request completes, so its
        completion still closes the round the other queue goes on from."""
        queued, books = [], {}
        for task_id in task_ids:
            book = self._books.get(task_id)
            if book is None:
                continue
            books[task_id] = book
            for e in [e for e in self._pending.values() if e.request.task_id == task_id]:
                queued.append((e.request, e.request.request_id in self._requeued))
                self._drop(e.request.request_id)
            if not any(req.task_id == task_id for req, _ in self._inflight.values()):
                del self._books[task_id]
        self._counts["handed_over"] += len(queued)
        return TaskHandover(books, tuple(queued))

    def take_over(self, handover: TaskHandover, now: float) -> None:
        """Queue what another queue handed over (hand_over): each task's history as it was, a
        requeued request still first in line, the others ranked as if submitted now."""
        self._books.update(handover.books)
        for req, requeued in handover.queued:
            book = self._books[req.task_id]
            if requeued:
                self._queue_first(req, book, now)
            else:
                self._queue(req, book, now)
        self._counts["taken_over"] += len(handover.queued)

    def _queue(self, req: Request, book: TaskBook, now: float) -> None:
        """The task's queued request, ranked by the policy."""
        self._seq += 1
        e = PendingEntry(req, book, self._seq, self._cycle, now, self.default_exec_s, self.hold_ratio_floor)
        e.slot = self._table.add(e)
        self._pending[req.request_id] = e
        self._by_task[req.task_id] = req.request_id

    def _queue_first(self, req: Request, book: TaskBook, now: float) -> None:
        self._requeue_seq += 1
        e = PendingEntry(req, book, self._requeue_seq, self._cycle, now, self.default_exec_s,
                         self.hold_ratio_floor)
        e.refreshed = e.priority = True
        e.first_rank = (-1, self._requeue_seq)  # ahead of refreshed ones, oldest loss first
        e.slot = self._table.add(e)
        self._table.ready[e.slot] = False
        self._first[id(e)] = e
        self._pending[req.request_id] = e
        self._requeued.add(req.request_id)

    def queued(self) -> list[Request]:
        return [e.request for e in self._pending.values()]

    def pending(self) -> int:
        return len(self._pending)

    def request(self, request_id: str) -> Request | None:
        e = self._pending.get(request_id)
        if e is not None:
            return e.request
        item = self._inflight.get(request_id)
        return item[0] if item else None

    def skipped(self, request_id: str) -> int:
        return self._cycle - self._pending[request_id].skip_base

    def wait_ratio(self, request_id: str, now: float) -> float:
        return self._pending[request_id].wait_ratio(now)

    def stats(self) -> dict[str, Any]:
        return {"scheduler": self.name, "pending": len(self._pending),
                "in_flight": len(self._inflight), "requeued_waiting": len(self._requeued), "tasks": len(self._books), "cycles": self._cycle,
                **dict(self._counts), "rejected_by_reason": dict(self._rejects)}

    def schedule(self, now: float, instances: Sequence[EngineInstanceInfo]) -> SchedulerDecision:
        self._counts["decisions"] += 1
        if self._counts["decisions"] % 1024 == 0:
            self._forget_idle_tasks(now)
        if not self._pending or not instances:
            return SchedulerDecision([], [], now)
        for e in list(self._held.values()):
            if now - e.refresh_asked_at >= self.refresh_timeout_s:
                # No fresh observation came: serve the one we have rather than starve it.
                self._counts["refresh_timeouts"] += 1
                self._promote(e)
        first = sorted(self._first.values(), key=lambda e: e.first_rank)
        slots = self._table.ready_slots()
        ordered = OrderedView(first, self.order_slots(slots, now) if len(slots) else slots,
                              self._table.entries)

        refresh: list[str] = []
        while True:
            placed = place(ordered, instances, now, self.saturation_tolerance, self.placement_rule)
            stale = [e for _, items in placed for e in items if self._is_stale(e, now)]
            if not stale:
                break
            for k, e in enumerate(stale):
                # Selected in this order: served in this order once the fresh observation is in.
                e.first_rank = (self._counts["decisions"], len(refresh) + k)
                e.refresh_asked_at = now
                e.refreshed = True
                self._first.pop(id(e), None)
                self._held[id(e)] = e
                self._table.ready[e.slot] = False
                refresh.append(e.request.request_id)
            ordered = ordered.without(stale)
        self._counts["refreshes_requested"] += len(refresh)

        batches = []
        for inst, items in placed:
            ids = tuple(e.request.request_id for e in items)
            batches.append(Batch(inst.instance_id, ids, inst.service_time(len(ids))))
            for e in items:
                self._dispatch(e, now)
        if batches:
            # Alg. 1 l.23-25: everyone not selected was skipped once more. Selected requests
            # leave the table, so one global counter does it in O(1).
            self._cycle += 1
            self._counts["dispatched"] += sum(len(b.request_ids) for b in batches)
        # A request held for a refresh keeps its skip counter (Alg. 1 l.24 resets it when the
        # request is dispatched); while held it is not ranked, and once refreshed it is served
        # ahead of all in the order it was selected.
        return SchedulerDecision(batches, refresh, now)

    # ---- for subclasses ---------------------------------------------------------------
    def order_slots(self, slots: np.ndarray, now: float) -> np.ndarray:
        """The PendingTable slots of rankable requests, best first (ties: oldest first)."""
        raise NotImplementedError

    def order(self, now: float) -> list[PendingEntry]:
        """The full order a decision at `now` would consider (for tests and diagnostics)."""
        first = sorted(self._first.values(), key=lambda e: e.first_rank)
        slots = self._table.ready_slots()
        return list(OrderedView(first, self.order_slots(slots, now) if len(slots) else slots,
                                self._table.entries))

    # ---- internals --------------------------------------------------------------------
    def _is_stale(self, e: PendingEntry, now: float) -> bool:
        return (self.stale_after_s is not None and not e.refreshed
                and now - e.request.obs_capture_time > self.stale_after_s)

    def _promote(self, e: PendingEntry) -> None:
        e.refresh_asked_at = None
        e.priority = True
        self._held.pop(id(e), None)
        self._first[id(e)] = e
        self._table.ready[e.slot] = False

    def _unlist(self, e: PendingEntry) -> None:
        self._held.pop(id(e), None)
        self._first.pop(id(e), None)
        if e.slot >= 0:
            self._table.remove(e.slot)
            e.slot = -1

    def _dispatch(self, e: PendingEntry, now: float) -> None:
        req = e.request
        self._unlist(e)
        del self._pending[req.request_id]
        self._requeued.discard(req.request_id)
        if self._by_task.get(req.task_id) == req.request_id:
            del self._by_task[req.task_id]
        self._inflight[req.request_id] = (req, now)
        e.book.on_dispatch(req.round_id, now)

    def _forget_idle_tasks(self, now: float) -> None:
        busy = {e.request.task_id for e in self._pending.values()} | \
            {req.task_id for req, _ in self._inflight.values()}
        stale = [t for t, b in self._books.items()
                 if t not in busy and now - b.last_seen > self.task_ttl_s]
        for t in stale:
            del self._books[t]
        self._counts["tasks_forgotten"] += len(stale)

    def _drop(self, request_id: str) -> None:
        e = self._pending.pop(request_id, None)
        if e is None:
            return
        self._requeued.discard(request_id)
        self._unlist(e)
        if self._by_task.get(e.request.task_id) == request_id:
            del self._by_task[e.request.task_id]

    def _refresh(self, old: PendingEntry, request: Request, now: float) -> SubmitResult:
        """A newer observation for a queued round: keep its place, age and priority."""
        old_id, old_request = old.request.request_id, old.request
        if request.request_id != old_id:
            if request.request_id in self._pending:
                return self._reject(f"duplicate request_id {request.request_id!r}")
            del self._pending[old_id]
            self._pending[request.request_id] = old
            self._by_task[request.task_id] = request.request_id
        old.request = request
        if old.refresh_asked_at is not None:
            self._promote(old)
        self._counts["refreshed"] += 1
        return SubmitResult(True, "refreshed", (old_request,) if request.request_id != old_id else ())

    def _reject(self, reason: str) -> SubmitResult:
        self._counts["rejected"] += 1
        self._rejects[_reason_key(reason)] += 1
        return SubmitResult(False, reason)


def _reason_key(reason: str) -> str:
    """Group rejection reasons by kind for counters (strip ids and numbers)."""
    for key in ("duplicate", "already served", "older than", "already in flight", "must be", "not a Request",
                "now must"):
        if key in reason:
            return key
    return reason[:40]
