"""ROSA §3.4.2 Step 2.1: per-server configurations feasible in memory and SLO.

A configuration is (model, batch size, k robot streams). Its load is k times the per-robot rate:
f for System 1, f/H for System 2 (continuous batching, b = 1 in the profile), freq_hz for the
obligation models. It is valid only if the model fits in the server's memory and the SLO
percentile of L_{m,h}(b, k * rate) is within the deadline; for goal-coupled models the mean
latency must also leave room for eq. (4) (a necessary condition checked per configuration; the
exact closed-loop check runs on the whole packing, Step 2.3).

Latency is taken as non-decreasing in load over the part of the curve we use: the SLO-compatible
rate capacity of a batch size is the largest rate up to which *every* rate meets the deadline, so
a server that is feasible with k streams is feasible with any fewer. That makes the configuration
(b, k_max(b)) dominate every (b, k < k_max(b)) for covering robots, which packing.py relies on.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

from physai_ros.scheduler.factory.types import ModelProfile

# ModelProfile stores p50/mean/p99; a deadline's quantile maps to the closest column that is not
# optimistic: 0.5 -> p50, anything else -> p99 (the profiles hold nothing beyond p99).
_QUANTILE_COLUMN = {0.5: "p50", 0.99: "p99"}


def quantile_column(q: float) -> str:
    return _QUANTILE_COLUMN.get(round(q, 6), "p99")


@dataclass(frozen=True)
class Part:
    """One component's share of a pooled obligation stream (colocation.py): its own rate, which
    its Route carries, and its own SLO, which the per-component attainment is reported against."""

    component: str
    rate_hz: float
    slo_s: float
    quantile: str


@dataclass(frozen=True)
class Stream:
    """One robot's requests to one component - or, for obligation components answered by one
    model, to all of them together (`parts`): the unit a server serves and routes are made of.
    A pooled stream's rate is the sum of its parts' and its SLO the strictest of theirs."""

    class_name: str
    robot_id: str
    rate_hz: float
    slo_s: float
    quantile: str  # profile column the SLO is checked against
    mean_cap_s: float = math.inf  # mean latency that still allows the class's rate (eq. 4)
    parts: tuple[Part, ...] = ()  # obligation streams: one Part per component (empty: goal-coupled)


@dataclass(frozen=True)
class Pair:
    """One (component, task class) of isolated packing (ROSA §3.4.3): K robots at one rate.
    For obligation components on one model, `component` is their pooled label ("safety+monitor")."""

    component: str
    class_name: str
    model: str
    robot_ids: tuple[str, ...]
    rate_hz: float  # per robot
    slo_s: float
    quantile: str
    mean_cap_s: float = math.inf
    parts: tuple[Part, ...] = ()  # obligation pairs: the components pooled on the model

    def streams(self, robot_ids: tuple[str, ...] | None = None) -> tuple[Stream, ...]:
        ids = self.robot_ids if robot_ids is None else robot_ids
        return tuple(Stream(self.class_name, r, self.rate_hz, self.slo_s, self.quantile, self.mean_cap_s, self.parts)
                     for r in ids)


@dataclass(frozen=True)
class ServerConfig:
    """A single-class configuration p of P(f): batch b serving up to k_max streams of a pair."""

    model: str
    batch: int
    k_max: int
    mean_at_k_max_s: float  # the ILP's latency tie-break


class LatencyTable:
    """L_{m,h}(b, lambda) of every model on the pool's hardware, curves sorted once per solve."""

    def __init__(self, profiles: Mapping[tuple[str, str], ModelProfile], hardware: str, memory_gb: float = math.inf):
        self.hardware = hardware
        self.memory_gb = memory_gb
        self._curves: dict[tuple[str, int], tuple[list[float], dict[str, list[float]]]] = {}
        self._batches: dict[str, list[int]] = {}
        self._fits: dict[str, bool] = {}
        for (model, hw), prof in profiles.items():
            if hw != hardware:
                continue
            self._batches[model] = prof.batch_sizes()
            self._fits[model] = prof.weights_gb <= memory_gb
            for b in self._batches[model]:
                pts = sorted((p for p in prof.points if p.batch == b), key=lambda p: p.rate_hz)
                cols = {
                    "p99": [p.p99_s for p in pts],
                    "mean": [p.mean_s for p in pts],
                    "p50": [p.p50_s if p.p50_s is not None else p.mean_s for p in pts],
                }
                self._curves[(model, b)] = ([p.rate_hz for p in pts], cols)

    def has(self, model: str) -> bool:
        return model in self._batches

    def fits(self, model: str) -> bool:
        return self._fits.get(model, False)

    def batch_sizes(self, model: str) -> list[int]:
        return self._batches.get(model, [])

    def latency(self, model: str, batch: int, rate_hz: float, column: str = "p99") -> float:
        """Same interpolation as ModelProfile.latency: flat below, linear between, inf above."""
        curve = self._curves.get((model, batch))
        if curve is None:
            return math.inf
        rates, cols = curve
        values = cols[column]
        if rate_hz > rates[-1] * (1 + 1e-9):
            return math.inf
        if rate_hz <= rates[0]:
            return values[0]
        lo, hi = 0, len(rates) - 1
        while hi - lo > 1:  # bisect: the segment [rates[lo], rates[hi]] holding rate_hz
            mid = (lo + hi) // 2
            if rates[mid] < rate_hz:
                lo = mid
            else:
                hi = mid
        r0, r1, v0, v1 = rates[lo], rates[hi], values[lo], values[hi]
        return v0 + (v1 - v0) * (rate_hz - r0) / (r1 - r0) if r1 > r0 else v1

    def min_mean(self, model: str) -> float:
        """The lowest mean latency the model reaches at any batch (an idle server)."""
        return min((self._curves[(model, b)][1]["mean"][0] for b in self.batch_sizes(model)), default=math.inf)

    def rate_cap(self, model: str, batch: int, slo_s: float, column: str, mean_cap_s: float = math.inf) -> float:
        """Largest aggregate rate up to which every rate meets the SLO and the mean cap."""
        curve = self._curves.get((model, batch))
        if curve is None:
            return 0.0
        rates, cols = curve
        limits = [(cols[column], slo_s)]
        if mean_cap_s < math.inf:
            limits.append((cols["mean"], mean_cap_s))
        cap = rates[-1]
        for values, limit in limits:
            if values[0] > limit:
                return 0.0
            for i in range(1, len(rates)):
                if values[i] > limit:  # crosses inside segment i-1..i
                    v0, v1, r0, r1 = values[i - 1], values[i], rates[i - 1], rates[i]
                    cap = min(cap, r0 + (r1 - r0) * (limit - v0) / (v1 - v0))
                    break
        return cap

    def configs(self, pair: Pair) -> list[ServerConfig]:
        """P(f) restricted to one pair: per batch size, the dominant (b, k_max) configuration."""
        if not self.fits(pair.model):
            return []
        out = []
        for b in self.batch_sizes(pair.model):
            cap = self.rate_cap(pair.model, b, pair.slo_s, pair.quantile, pair.mean_cap_s)
            k = len(pair.robot_ids) if pair.rate_hz <= 0 else int(math.floor(cap / pair.rate_hz * (1 + 1e-9)))
            k = min(k, len(pair.robot_ids))
            if k >= 1:
                out.append(ServerConfig(pair.model, b, k, self.latency(pair.model, b, k * pair.rate_hz, "mean")))
        return out

    def best_batch(self, model: str, streams: tuple[Stream, ...]) -> tuple[int, float, float] | None:
        """The batch size serving these streams together with every SLO and mean cap met, lowest
        SLO-percentile latency first; (batch, mean_s, p99_s) or None."""
        load = sum(s.rate_hz for s in streams)
        best = None
        for b in self.batch_sizes(model):
            if not all(self.latency(model, b, load, s.quantile) <= s.slo_s * (1 + 1e-9) for s in streams):
                continue
            mean = self.latency(model, b, load, "mean")
            if mean > min((s.mean_cap_s for s in streams), default=math.inf) * (1 + 1e-9):
                continue
            p99 = self.latency(model, b, load, "p99")
            if best is None or (p99, mean) < (best[2], best[1]):
                best = (b, mean, p99)
        return best
