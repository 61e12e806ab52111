"""Deadline (SLO) handling on the robot side (ROSA section 3.3).

A request's deadline is its observation's capture time plus the task's SLO. When it passes
without a chunk, the configured fallback runs:

- ``hold``: stop at the last commanded position and keep waiting for the answer; the late
  chunk is executed when it comes (the buffer drops the actions whose time has passed).
- ``stop_and_resend``: stop, give the request up and send a fresh observation; the answer to
  the given-up request is discarded when it comes.
- ``use_last_plan``: keep executing what is left in the buffer and keep waiting.

While a request stays unanswered, every further SLO period counts as another miss, so a dead
server is detected under every fallback. ``max_consecutive_misses`` misses in a row (no chunk
on time in between) escalate to STOPPED: the robot holds, sends nothing, discards chunks, and
only :meth:`DeadlineMonitor.operator_reset` leaves that state. An on-time chunk resets the
count.

Start-up (``startup_grace_s``): the first rounds of a fresh server are slow (first calls per
batch shape, CUDA graph capture, a latency profile still running, every robot joining at once,
the first texts, a busy host), and three robots of the demo were stopped for good by them within
8 s of serving. So for ``startup_grace_s`` after the robot's first request (sent once the server
serves it), a miss runs the fallback (the robot holds or resends: it never moves on a late plan
it should not) and is counted (``startup_misses``, ``total_misses``) but not toward escalation;
from then on every miss counts. The window is fixed: an on-time chunk inside it does not end it
(it did at first, and the demo's robot_2 was stopped 11 s after it registered: its first
answers were on time, then three slow rounds came in a row), and a server that is never on time escalates once it has passed.

The monitor only decides; it returns plain-data :class:`DeadlineAction` lists that the
robot_client node carries out (stop the controller's buffer, send an observation, raise a
diagnostic).
"""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Any

# Given-up rounds remembered so their late answers are recognised and discarded.
_ABANDONED_KEEP = 64


class Fallback(str, enum.Enum):
    HOLD = "hold"
    STOP_AND_RESEND = "stop_and_resend"
    USE_LAST_PLAN = "use_last_plan"


class DeadlineState(str, enum.Enum):
    NOMINAL = "nominal"
    DEGRADED = "degraded"  # the last request missed its SLO; fallback in effect
    STOPPED = "stopped"  # escalated; needs an operator reset


class ActionKind(str, enum.Enum):
    HOLD = "hold"  # stop motion: drop the buffer's tentative nodes, hold position
    RESEND = "resend"  # send a fresh observation now (the old request is given up)
    CONTINUE = "continue"  # keep executing the buffer as it is
    ESCALATE = "escalate"  # stopped: tell the operator (diagnostic ERROR)


@dataclass(frozen=True)
class DeadlineAction:
    kind: ActionKind
    round_id: int
    consecutive_misses: int
    detail: str


@dataclass(frozen=True)
class ChunkVerdict:
    execute: bool
    late: bool
    # "on_time", "late", "given_up" (answer to a request given up on), "stopped",
    # "unexpected" (never requested, or a duplicate)
    reason: str
    latency_s: float
    actions: tuple[DeadlineAction, ...] = ()


@dataclass(frozen=True)
class DeadlineConfig:
    slo_s: float
    fallback: Fallback = Fallback.STOP_AND_RESEND
    max_consecutive_misses: int = 3
    startup_grace_s: float = 0.0  # fleet.yaml tasks: slo_startup_grace_s, default 60 (see above)

    def __post_init__(self):
        if not (isinstance(self.slo_s, (int, float)) and math.isfinite(self.slo_s)
                and self.slo_s > 0):
            raise ValueError(f"slo must be a positive number of seconds, got {self.slo_s!r}")
        try:
            object.__setattr__(self, "fallback", Fallback(self.fallback))
        except ValueError:
            names = ", ".join(f.value for f in Fallback)
            raise ValueError(f"fallback {self.fallback!r} unknown; expected one of: {names}") \
                from None
        m = self.max_consecutive_misses
        if isinstance(m, bool) or not isinstance(m, int) or m < 1:
            raise ValueError(f"max_consecutive_misses must be an integer >= 1, got {m!r}")
        g = self.startup_grace_s
        if isinstance(g, bool) or not isinstance(g, (int, float)) or not math.isfinite(g) or g < 0:
            raise ValueError(f"startup_grace_s must be a number of seconds >= 0, got {g!r}")

    @classmethod
    def from_task(cls, task: Any) -> "DeadlineConfig":
        """From a fleet.yaml task (physai_ros.config.task.TaskConfig, already validated
        there): ``slo_ms``, ``fallback``, ``max_consecutive_slo_violation``."""
        return cls(slo_s=float(task.slo_ms) / 1000.0, fallback=Fallback(task.fallback),
                   max_consecutive_misses=int(task.max_consecutive_slo_violation),
                   startup_grace_s=float(getattr(task, "slo_startup_grace_s", 0.0)))


class DeadlineMonitor:
    def __init__(self, config: DeadlineConfig):
        self.config = config
        self.state = DeadlineState.NOMINAL
        self.consecutive_misses = 0
        self.total_misses = 0
        self.startup_misses = 0  # misses in the start-up grace: reported, not escalated
        self.late_chunks = 0
        self.discarded_chunks = 0
        self.stops = 0
        self._round: int | None = None  # the awaited request
        self._captured_at = 0.0
        self._deadline = math.inf
        self._abandoned: dict[int, float] = {}  # round -> capture time, insertion-ordered
        self._first_request_at: float | None = None

    @property
    def awaited_round(self) -> int | None:
        return self._round

    def may_send(self) -> bool:
        return self.state is not DeadlineState.STOPPED

    def on_request(self, round_id: int, capture_time: float) -> None:
        """An observation captured at ``capture_time`` was sent. A still-awaited older request
        is given up (its late answer is judged by the fallback like any late answer)."""
        if self._round is not None:
            self._give_up(self._round, self._captured_at)
        self._round = int(round_id)
        self._captured_at = float(capture_time)
        self._deadline = self._captured_at + self.config.slo_s
        if self._first_request_at is None:
            self._first_request_at = self._captured_at

    def _give_up(self, round_id: int, captured_at: float) -> None:
        self._abandoned[round_id] = captured_at
        while len(self._abandoned) > _ABANDONED_KEEP:
            del self._abandoned[next(iter(self._abandoned))]

    def check(self, now: float) -> list[DeadlineAction]:
        """Call periodically. Returns the fallback actions if the awaited deadline passed."""
        if self._round is None or self.state is DeadlineState.STOPPED or not now >= self._deadline:
            return []
        return self._miss(now)

    def in_startup_grace(self, now: float) -> bool:
        """Within startup_grace_s of the first request."""
        return self._first_request_at is not None and now - self._first_request_at < self.config.startup_grace_s

    def _miss(self, now: float) -> list[DeadlineAction]:
        rnd = self._round
        self.total_misses += 1
        waited = now - self._captured_at
        startup = self.in_startup_grace(now)
        if startup:
            self.startup_misses += 1
        else:
            self.consecutive_misses += 1
        n = self.consecutive_misses
        if not startup and n >= self.config.max_consecutive_misses:
            self.state = DeadlineState.STOPPED
            self.stops += 1
            self._give_up(rnd, self._captured_at)
            self._round, self._deadline = None, math.inf
            return [DeadlineAction(ActionKind.HOLD, rnd, n, "SLO escalation: stopped"),
                    DeadlineAction(ActionKind.ESCALATE, rnd, n,
                                   f"{n} consecutive SLO misses (last waited {waited:.3f} s, "
                                   f"SLO {self.config.slo_s:.3f} s); operator reset required")]
        self.state = DeadlineState.DEGRADED
        detail = f"round {rnd} waited {waited:.3f} s > SLO {self.config.slo_s:.3f} s"
        if startup:
            detail += f" (start-up: not counted toward escalation for {self.config.startup_grace_s:g} s)"
        fb = self.config.fallback
        if fb is Fallback.STOP_AND_RESEND:
            self._give_up(rnd, self._captured_at)
            self._round, self._deadline = None, math.inf
            return [DeadlineAction(ActionKind.HOLD, rnd, n, detail),
                    DeadlineAction(ActionKind.RESEND, rnd, n, detail)]
        # hold / use_last_plan keep waiting for the same answer: re-arm one SLO later.
        self._deadline = now + self.config.slo_s
        kind = ActionKind.HOLD if fb is Fallback.HOLD else ActionKind.CONTINUE
        return [DeadlineAction(kind, rnd, n, detail)]

    def on_chunk(self, round_id: int, now: float) -> ChunkVerdict:
        """A chunk answering ``round_id`` arrived at ``now``: execute it or not?"""
        rnd = int(round_id)
        if self.state is DeadlineState.STOPPED:
            self.discarded_chunks += 1
            self._abandoned.pop(rnd, None)
            return ChunkVerdict(False, False, "stopped", math.nan)
        if rnd == self._round:
            latency = now - self._captured_at
            if latency <= self.config.slo_s:
                self._round, self._deadline = None, math.inf
                self.consecutive_misses = 0
                self.state = DeadlineState.NOMINAL
                return ChunkVerdict(True, False, "on_time", latency)
            # Late. A deadline that passed without check() noticing is counted now; one that
            # check() already counted was re-armed into the future (or the round given up).
            actions: tuple[DeadlineAction, ...] = ()
            if now >= self._deadline:
                actions = tuple(self._miss(now))
            self.late_chunks += 1
            if self.state is DeadlineState.STOPPED or \
                    self.config.fallback is Fallback.STOP_AND_RESEND:
                self._abandoned.pop(rnd, None)
                self.discarded_chunks += 1
                return ChunkVerdict(False, True, "late", latency, actions)
            self._round, self._deadline = None, math.inf
            return ChunkVerdict(True, True, "late", latency, actions)
        if rnd in self._abandoned:
            latency = now - self._abandoned.pop(rnd)
            self.late_chunks += 1
            if self.config.fallback is Fallback.STOP_AND_RESEND:
                self.discarded_chunks += 1
                return ChunkVerdict(False, True, "given_up", latency)
            return ChunkVerdict(True, True, "given_up", latency)
        self.discarded_chunks += 1
        return ChunkVerdict(False, False, "unexpected", math.nan)

    def abandon(self) -> int | None:
        """Give the awaited request up without counting a miss: the robot stopped for a reason of
        its own (a task pipeline's hold, client.pipeline). Its late answer is judged as a
        given-up one. Returns the round given up, if any."""
        rnd = self._round
        if rnd is not None:
            self._give_up(rnd, self._captured_at)
            self._round, self._deadline = None, math.inf
        return rnd

    def operator_reset(self) -> None:
        self.state = DeadlineState.NOMINAL
        self.consecutive_misses = 0
        self._round, self._deadline = None, math.inf
        self._abandoned.clear()
