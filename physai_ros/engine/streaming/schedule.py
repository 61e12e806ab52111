"""The staggered flow-matching schedule of streaming generation (realtime-vla section 6.2).

Every action token of a robot's window has its own flow time tau in [0, 1] (1 = pure noise,
0 = final). Token ``a`` (a global, ever-increasing index) finishes at

    finish_a = first_finish + a * stagger_s

and its flow time at wall time ``t`` is

    tau_a(t) = clamp((finish_a - t) / span_s, 0, 1)

so each token is integrated from 1 to 0 over ``span_s`` seconds, and consecutive tokens finish
``stagger_s`` apart: the nearest actions become final first, later ones keep being refined.
A tick at time t takes one Euler step per token from its current tau to tau_a(t); a late tick
just takes a bigger step, so missed ticks never break the schedule. A token whose tau reached
0 is final and never changes again. With ``stagger_s = 0`` every token shares one time and one
chunk is sampled exactly as the chunked sampler does (span_s / tick period Euler steps).

The window slides: when token w+1 is final, token w leaves and a fresh noise token w+C enters at
tau = 1, which needs (C - 1) * stagger_s >= span_s (checked).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch


class ScheduleError(ValueError):
    """A schedule that cannot run with the given chunk size or rates."""


@dataclass(frozen=True)
class StaggeredSchedule:
    span_s: float  # seconds one token takes from tau = 1 to tau = 0
    stagger_s: float  # seconds between consecutive tokens' finish times; 0 = one synchronous chunk
    lead_s: float = 0.0  # a token is final this long before it is due

    def validate(self, chunk_size: int) -> None:
        for name in ("span_s", "stagger_s", "lead_s"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise ScheduleError(f"{name} must be a finite number >= 0, got {v!r}")
        if self.span_s <= 0:
            raise ScheduleError(f"span_s must be > 0, got {self.span_s}")
        if self.stagger_s > 0 and self.span_s > (chunk_size - 1) * self.stagger_s * (1 + 1e-9):
            raise ScheduleError(
                f"span_s {self.span_s:.4g} s exceeds (chunk - 1) * stagger_s = "
                f"{(chunk_size - 1) * self.stagger_s:.4g} s: a token entering the window would not "
                f"start from pure noise; use fewer steps per token or a longer chunk")

    @property
    def sliding(self) -> bool:
        return self.stagger_s > 0

    def finish_times(self, first_finish: float, index: torch.Tensor) -> torch.Tensor:
        return first_finish + index.to(torch.float64) * self.stagger_s

    def tau(self, finish: torch.Tensor, t: float) -> torch.Tensor:
        """Flow time of tokens with the given finish times at wall time t (float64)."""
        return ((finish - t) / self.span_s).clamp(0.0, 1.0)

    @staticmethod
    def for_rates(tick_hz: float, action_hz: float, steps_per_token: float, lead_ticks: float = 1.0,
                  stagger: bool = True) -> "StaggeredSchedule":
        """Real-time streaming: tokens finish at the action rate, each over steps_per_token ticks."""
        if not (tick_hz > 0 and action_hz > 0 and steps_per_token > 0):
            raise ScheduleError("tick_hz, action_hz and steps_per_token must be > 0")
        return StaggeredSchedule(span_s=steps_per_token / tick_hz,
                                 stagger_s=(1.0 / action_hz) if stagger else 0.0,
                                 lead_s=lead_ticks / tick_hz)


def dense_nodes(token_due: np.ndarray, token_values: np.ndarray, token_final: np.ndarray,
                node_hz: float, first_tick: int):
    """Resample a window of tokens onto the absolute node grid (node k due at k / node_hz).

    Returns (ticks int64 [N], positions [N, D], committed bool [N]) for grid nodes from
    ``first_tick`` through the last token's due time. A node between tokens j and j+1 is the
    linear interpolation of the two and is committed when both are final (a node on a token
    is that token). Empty arrays when no node lies in range.
    """
    eps = 1e-6
    last = math.floor(float(token_due[-1]) * node_hz + eps)
    first = max(int(first_tick), math.ceil(float(token_due[0]) * node_hz - eps))
    if last < first:
        return np.zeros(0, np.int64), np.zeros((0, token_values.shape[1])), np.zeros(0, bool)
    ticks = np.arange(first, last + 1, dtype=np.int64)
    n = token_due.shape[0]
    idx = np.arange(n, dtype=np.float64)
    s = np.interp(ticks / node_hz, token_due, idx)
    # np.interp per action dim, for all dims at once: slope * (s - j) + v[j] on [j, j + 1]
    # (the same float operations as numpy's interp over integer abscissae; v[j] exactly on a token).
    j = np.minimum(np.floor(s).astype(np.int64), n - 1)
    j1 = np.minimum(j + 1, n - 1)
    v = np.asarray(token_values, dtype=np.float64)
    pos = (v[j1] - v[j]) * (s - j)[:, None] + v[j]
    # s lies in [0, n - 1] (interp clamps), so these stay in range; min / max only guard
    # (np.clip's Python wrapper costs more than the rest of this line).
    lo = np.minimum(np.floor(s + eps).astype(np.int64), n - 1)
    hi = np.maximum(np.ceil(s - eps).astype(np.int64), 0)
    return ticks, pos, token_final[lo] & token_final[hi]
