"""A queued request as the policies see it (its task book, wait ratio, skips and refresh state),
and the validation every submitted request passes first (a bad request is refused with a reason,
never raised)."""
from __future__ import annotations

import math
from typing import Any, Optional

from physai_ros.scheduler.bookkeeping import TaskBook
from physai_ros.scheduler.types import Request


class PendingEntry:
    """A queued request plus what the policies need to rank it in O(1)."""

    __slots__ = ("request", "book", "seq", "skip_base", "wait_sum", "anchor", "t_start",
                 "ratio_floor", "hold_floor", "exec_est", "refresh_asked_at", "refreshed", "priority",
                 "first_rank", "slot")

    def __init__(self, request: Request, book: TaskBook, seq: int, cycle: int, now: float,
                 default_exec_s: float, hold_floor: bool = False) -> None:
        self.request = request
        self.book = book
        self.seq = seq                     # submission order (FIFO and tie-breaks)
        self.skip_base = cycle             # skipped = scheduler cycle - skip_base
        self.hold_floor = hold_floor       # hold_ratio_floor (not the paper's; see rebind)
        # Order among requests served ahead of all (requeued, or selected and held for a
        # refresh): the order they were selected in, not the order they arrived in.
        self.first_rank: tuple = (0, seq)
        self.refresh_asked_at: Optional[float] = None
        self.refreshed = False             # a refresh was done (or timed out): never ask twice
        self.priority = False              # selected before but held for a refresh: serve first
        self.slot = -1                     # row in the PendingTable
        self.rebind(now, default_exec_s)

    def rebind(self, now: float, default_exec_s: float) -> None:
        """Freeze the task's wait-ratio parameters for this round (they are constant while the
        request is queued). With hold_floor (hold_ratio_floor=True, not in the paper, which
        relies on aging) the ratio never drops below its value now, at submission."""
        book, req = self.book, self.request
        self.wait_sum = book.wait_sum
        self.anchor = book.wait_anchor(req.round_id)
        self.t_start = book.t_start
        self.ratio_floor = 0.0
        if self.hold_floor:
            self.ratio_floor = self.wait_ratio(now)
        last = book.last_exec_s if book.last_exec_s is not None else req.last_exec_duration
        # Floor at one control period: an estimate of 0 could never age (0 x (1 + skipped)).
        self.exec_est = max(last if last is not None else default_exec_s, req.control_period)

    def wait_ratio(self, now: float) -> float:
        """Reference (scalar) form of the ratio the policies compute vectorised."""
        w = self.wait_sum + (now - self.anchor if now > self.anchor else 0.0)
        life = now - self.t_start
        r = (1.0 if w > 0.0 else 0.0) if life <= 0.0 else w / life
        if r > 1.0:
            r = 1.0
        return r if r > self.ratio_floor else self.ratio_floor


def finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def validate(req: Any) -> str:
    """Empty string when the request is well formed, else the reason it is not."""
    if not isinstance(req, Request):
        return f"not a Request: {type(req).__name__}"
    if not isinstance(req.request_id, str) or not req.request_id:
        return "request_id must be a non-empty string"
    if not isinstance(req.task_id, str) or not req.task_id:
        return "task_id must be a non-empty string"
    if not isinstance(req.round_id, int) or isinstance(req.round_id, bool) or req.round_id < 0:
        return f"round_id must be an int >= 0, got {req.round_id!r}"
    for name in ("arrival_time", "obs_capture_time"):
        if not finite(getattr(req, name)):
            return f"{name} must be a finite number, got {getattr(req, name)!r}"
    if req.exec_phase_start is not None and not finite(req.exec_phase_start):
        return f"exec_phase_start must be None or finite, got {req.exec_phase_start!r}"
    if not isinstance(req.actions_remaining, int) or isinstance(req.actions_remaining, bool) \
            or req.actions_remaining < 0:
        return f"actions_remaining must be an int >= 0, got {req.actions_remaining!r}"
    if not finite(req.control_period) or req.control_period <= 0:
        return f"control_period must be > 0, got {req.control_period!r}"
    if req.last_exec_duration is not None and (not finite(req.last_exec_duration)
                                               or req.last_exec_duration < 0):
        return f"last_exec_duration must be None or >= 0, got {req.last_exec_duration!r}"
    return ""
