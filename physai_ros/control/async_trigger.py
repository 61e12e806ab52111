"""When the robot client sends its next observation (Kairos section 2.1, LeRobot async inference).

The next request goes out while the current chunk still executes, once the time the buffer can
still run (actions remaining x action period) falls to the measured round-trip latency plus a
margin: the answer then lands just before the buffer runs dry, so the robot keeps moving and
the observation is as fresh as it can be. At most one request per robot is outstanding; a
request unanswered for ``request_timeout_s`` (or abandoned by the deadline fallback) no longer
blocks the next one.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

# How many given-up requests are remembered so their late answers can be told apart.
_GIVEN_UP_KEEP = 64


@dataclass(frozen=True)
class TriggerDecision:
    send: bool
    # Why: "no_plan" (nothing left to execute), "low_buffer" (time left <= lead), "enough_buffer",
    # "waiting_for_reply", "min_interval", "rate_cap", "bad_input".
    reason: str
    time_left_s: float
    lead_s: float


@dataclass(frozen=True)
class Outstanding:
    round_id: int
    sent_at: float


class AsyncTrigger:
    def __init__(self, margin_s: float = 0.05, request_timeout_s: float = 1.0,
                 min_interval_s: float = 0.0):
        for name, v in (("margin_s", margin_s), ("request_timeout_s", request_timeout_s),
                        ("min_interval_s", min_interval_s)):
            if not (math.isfinite(v) and v >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
        if request_timeout_s == 0:
            raise ValueError("request_timeout_s must be > 0")
        self.margin_s = float(margin_s)
        self.request_timeout_s = float(request_timeout_s)
        self.min_interval_s = float(min_interval_s)
        self._outstanding: Outstanding | None = None
        self._last_sent_at = -math.inf
        self.max_rate_hz = 0.0  # set_rate: a factory plan's request rate (0: none)
        self.burst_s = 1.0
        self._paced_until = -math.inf
        # Requests given up on (timed out or abandoned); their late answers are recognised.
        self._given_up: dict[int, None] = {}  # insertion-ordered, bounded
        self.sent = 0
        self.timeouts = 0
        self.abandoned = 0
        self.late_replies = 0
        self.unmatched_replies = 0

    def set_rate(self, rate_hz: float, burst_s: float = 1.0) -> None:
        """Cap the average request rate at rate_hz (0 or not finite: no cap); at most burst_s
        of waiting is made up by sending sooner afterwards."""
        rate = float(rate_hz) if math.isfinite(rate_hz) and rate_hz > 0 else 0.0
        if rate != self.max_rate_hz:
            self._paced_until = -math.inf
        self.max_rate_hz, self.burst_s = rate, max(0.0, float(burst_s))

    @property
    def outstanding(self) -> Outstanding | None:
        return self._outstanding

    def _give_up(self, round_id: int) -> None:
        self._given_up[round_id] = None
        while len(self._given_up) > _GIVEN_UP_KEEP:
            del self._given_up[next(iter(self._given_up))]

    def _expire(self, now: float) -> None:
        out = self._outstanding
        if out is not None and now - out.sent_at >= self.request_timeout_s:
            self._give_up(out.round_id)
            self._outstanding = None
            self.timeouts += 1

    def decide(self, now: float, actions_remaining: int, action_period: float,
               latency_s: float) -> TriggerDecision:
        try:
            now = float(now)
            time_left = max(0, int(actions_remaining)) * float(action_period)
            lead = float(latency_s) + self.margin_s
        except (TypeError, ValueError):
            return TriggerDecision(False, "bad_input", math.nan, math.nan)
        if not (math.isfinite(now) and math.isfinite(time_left) and math.isfinite(lead)):
            return TriggerDecision(False, "bad_input", time_left, lead)
        self._expire(now)
        if self._outstanding is not None:
            return TriggerDecision(False, "waiting_for_reply", time_left, lead)
        if now - self._last_sent_at < self.min_interval_s:
            return TriggerDecision(False, "min_interval", time_left, lead)
        if now < self._paced_until:
            return TriggerDecision(False, "rate_cap", time_left, lead)
        if time_left <= 0:
            return TriggerDecision(True, "no_plan", time_left, lead)
        if time_left <= lead:
            return TriggerDecision(True, "low_buffer", time_left, lead)
        return TriggerDecision(False, "enough_buffer", time_left, lead)

    def on_sent(self, round_id: int, now: float) -> None:
        """The client published observation ``round_id``. A previous outstanding request that
        was not timed out is given up on (the caller decided to resend)."""
        if self._outstanding is not None:
            self._give_up(self._outstanding.round_id)
            self.abandoned += 1
        self._outstanding = Outstanding(int(round_id), float(now))
        self._last_sent_at = float(now)
        self.sent += 1
        if self.max_rate_hz > 0:
            # Average-rate pacing: the n-th send not before (start + n / rate). Time spent waiting
            # (on System 2, on a slow answer) is made up afterwards, up to burst_s of it; a
            # minimum gap instead would lose it for good and run below the planned rate (the
            # factory simulation measured 83 % of eq. (4)'s rate for P4 with a gap).
            start = float(now) if self._paced_until == -math.inf else max(self._paced_until, float(now) - self.burst_s)
            self._paced_until = start + 1.0 / self.max_rate_hz

    def abandon(self) -> int | None:
        """Stop waiting for the outstanding request (deadline fallback); returns its round."""
        out = self._outstanding
        if out is None:
            return None
        self._give_up(out.round_id)
        self._outstanding = None
        self.abandoned += 1
        return out.round_id

    def on_reply(self, round_id: int, now: float) -> str:
        """A chunk for ``round_id`` arrived. Returns "answered" (the outstanding request),
        "late" (a request already given up on) or "unmatched" (never sent / duplicate)."""
        rnd = int(round_id)
        out = self._outstanding
        if out is not None and out.round_id == rnd:
            self._outstanding = None
            return "answered"
        if rnd in self._given_up:
            del self._given_up[rnd]
            self.late_replies += 1
            return "late"
        self.unmatched_replies += 1
        return "unmatched"
