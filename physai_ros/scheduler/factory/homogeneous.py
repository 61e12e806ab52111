"""ROSA §3.4.2 Step 2: binary search for the largest shared action rate f of a homogeneous fleet.

f lies between the class's floor (F^min / K, or a vanishing rate when there is none) and
f_max = 1 / t_act (zero inference latency in eq. 4). Each probe runs the feasibility check
(Steps 2.1-2.3, feasibility.RateChecker); only feasible probes are recorded, so the answer is never
above the true optimum and is within rate_tolerance * hi of it when the search converges.
"""
from __future__ import annotations

import time

from physai_ros.scheduler.factory.feasibility import RateChecker
from physai_ros.scheduler.factory.packing import PlannedServer

# With no F^min, the search floor is this fraction of f_max: below it a fleet is not "served".
RATE_FLOOR = 1e-6


def floor_rate(cls) -> float:
    if cls.min_throughput > 0 and cls.num_robots:
        return cls.min_throughput / cls.num_robots
    return cls.f_max() * RATE_FLOOR


def infeasible_floor(cls, why: str) -> str:
    if cls.min_throughput > 0:
        return (f"class {cls.name}: F_min = {cls.min_throughput:.4g} actions/s "
                f"({cls.min_throughput / max(1, cls.num_robots):.4g} Hz x {cls.num_robots} robots) cannot be met: {why}")
    return f"class {cls.name}: no feasible action rate: {why}"


def binary_search(checker: RateChecker, rate_tolerance: float, deadline: float
                  ) -> tuple[dict[str, float], list[PlannedServer]] | str:
    (cls,) = checker.problem.classes
    lo, hi = floor_rate(cls), cls.f_max()
    if lo > hi:
        return infeasible_floor(cls, f"above 1/t_act = {hi:.4g} Hz")
    best = checker.check({cls.name: lo})
    if isinstance(best, str):
        return infeasible_floor(cls, best)
    top = checker.check({cls.name: hi})
    if not isinstance(top, str):
        return {cls.name: hi}, top
    while hi - lo > rate_tolerance * hi and time.monotonic() < deadline:
        f = (lo + hi) / 2
        got = checker.check({cls.name: f})
        if isinstance(got, str):
            hi = f
        else:
            lo, best = f, got
    return {cls.name: lo}, best
