"""Per-episode outcomes and the trade-off bookkeeping built from them (plain data only).

The average execution horizon is Kairos's efficiency proxy (section 5.2): the mean of the horizon
the policy chose, over every round of every episode of a setting (rounds pooled, so a long
episode weighs by its number of rounds, as inference cost does).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence


@dataclass(frozen=True)
class EpisodeResult:
    setting: str           # e.g. "confidence t=0.5"
    robot_id: str
    task: str
    seed: int
    success: bool
    sim_time_s: float      # episode length in simulated seconds (until success or the timeout)
    horizons: tuple[int, ...]  # horizon chosen in each answered round (status OK)
    refused: int = 0       # chunks the server refused (counted by the client)
    errors: int = 0
    underruns: int = 0     # times the trajectory buffer ran dry while it had been executing
    slo_misses: int = 0

    @property
    def rounds(self) -> int:
        return len(self.horizons)


@dataclass(frozen=True)
class TradeoffPoint:
    policy: str            # "static" | "confidence" | "expert"
    parameter: float       # H for static, t for confidence
    avg_horizon: float
    success_rate: float
    episodes: int
    successes: int
    rounds: int
    ci95: tuple[float, float] = (0.0, 1.0)  # Wilson interval of the success rate
    extra: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"policy": self.policy, "parameter": self.parameter,
                "avg_horizon": round(self.avg_horizon, 4), "success_rate": round(self.success_rate, 4),
                "episodes": self.episodes, "successes": self.successes, "rounds": self.rounds,
                "success_ci95": [round(self.ci95[0], 4), round(self.ci95[1], 4)], **self.extra}


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval: honest at 0 or n successes, unlike the normal approximation."""
    if n <= 0:
        return (0.0, 1.0)
    p = successes / n
    d = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / d
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return (max(0.0, centre - half), min(1.0, centre + half))


def mcnemar_exact(a: Sequence[bool], b: Sequence[bool]) -> dict:
    """Two settings run on the same episodes (same seeds, in order): McNemar's exact test on the
    discordant pairs (a succeeded where b failed, and the reverse). p: the two-sided binomial
    probability of a split at least this uneven if neither setting were better."""
    if len(a) != len(b):
        raise ValueError(f"paired outcomes of unequal length: {len(a)} and {len(b)}")
    only_a = sum(1 for x, y in zip(a, b) if x and not y)
    only_b = sum(1 for x, y in zip(a, b) if y and not x)
    n, k = only_a + only_b, min(only_a, only_b)
    p = 1.0 if n == 0 else min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n)
    return {"only_first": only_a, "only_second": only_b, "p_two_sided": round(p, 4)}


def average_horizon(episodes: Sequence[EpisodeResult]) -> float:
    """Mean chosen horizon over all rounds of all episodes (NaN when no round was answered)."""
    total = sum(sum(e.horizons) for e in episodes)
    rounds = sum(e.rounds for e in episodes)
    return total / rounds if rounds else math.nan


def summarize(policy: str, parameter: float, episodes: Sequence[EpisodeResult]) -> TradeoffPoint:
    if not episodes:
        raise ValueError(f"{policy} {parameter}: no episodes to summarize")
    wins = sum(1 for e in episodes if e.success)
    n = len(episodes)
    return TradeoffPoint(
        policy=policy, parameter=float(parameter), avg_horizon=average_horizon(episodes),
        success_rate=wins / n, episodes=n, successes=wins, rounds=sum(e.rounds for e in episodes),
        ci95=wilson_interval(wins, n),
        extra={"mean_episode_s": round(sum(e.sim_time_s for e in episodes) / n, 3),
               "refused": sum(e.refused for e in episodes), "errors": sum(e.errors for e in episodes),
               "underruns": sum(e.underruns for e in episodes)})


def static_success_at(static: Sequence[TradeoffPoint], horizon: float) -> float | None:
    """The static-horizon curve's success rate at `horizon`, linearly interpolated between the
    two static points around it; None outside the swept range (no extrapolation)."""
    pts = sorted((p.avg_horizon, p.success_rate) for p in static if not math.isnan(p.avg_horizon))
    if not pts or horizon < pts[0][0] or horizon > pts[-1][0]:
        return None
    for (h0, s0), (h1, s1) in zip(pts, pts[1:]):
        if h0 <= horizon <= h1:
            return s0 if h1 == h0 else s0 + (s1 - s0) * (horizon - h0) / (h1 - h0)
    return pts[-1][1]


def dominance(static: Sequence[TradeoffPoint], confidence: Sequence[TradeoffPoint]) -> dict:
    """How the confidence points sit against the static curve.

    A confidence point is *dominated* when some static point is at least as good on both axes
    and better on one; it is *above* the static curve when its success rate exceeds the curve's
    interpolated value at its average horizon. "dominates" is claimed only when no confidence
    point is dominated and every one inside the static range lies above the curve."""
    rows = []
    for c in confidence:
        dominated_by = [s.parameter for s in static
                        if s.success_rate >= c.success_rate and s.avg_horizon >= c.avg_horizon
                        and (s.success_rate > c.success_rate or s.avg_horizon > c.avg_horizon)]
        ref = static_success_at(static, c.avg_horizon)
        rows.append({"t": c.parameter, "avg_horizon": round(c.avg_horizon, 4),
                     "success_rate": round(c.success_rate, 4),
                     "static_success_at_same_horizon": None if ref is None else round(ref, 4),
                     "gain_vs_static": None if ref is None else round(c.success_rate - ref, 4),
                     # A gain smaller than the point's own 95% half-width is not evidence.
                     "gain_within_ci": None if ref is None else
                     abs(c.success_rate - ref) <= (c.ci95[1] - c.ci95[0]) / 2,
                     "dominated_by_static_H": dominated_by})
    inside = [r for r in rows if r["gain_vs_static"] is not None]
    dominates = bool(rows) and not any(r["dominated_by_static_H"] for r in rows) and bool(inside) \
        and all(r["gain_vs_static"] > 0 for r in inside)
    return {"confidence_dominates": dominates,
            "significant": dominates and not any(r["gain_within_ci"] for r in inside),
            "points": rows,
            "dominated_points": sum(1 for r in rows if r["dominated_by_static_H"]),
            "points_above_static_curve": sum(1 for r in inside if r["gain_vs_static"] > 0),
            "points_inside_static_range": len(inside)}
