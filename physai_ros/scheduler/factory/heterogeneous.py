"""ROSA §3.4.3: adaptive frontier search over the class-rate vector f of a heterogeneous fleet.

Maximizes eq. (1), sum_c v_c K_c f_c s.t. K_c f_c >= F_c^min. The search keeps a feasible point f
(starting at the floors F_c^min / K_c) and an optimistic upper bound u_c per class (1 / t_act at
first). Each step takes the class with the largest potential weighted gain v_c K_c (u_c - f_c)
and probes halfway to its bound; a feasible probe advances the frontier, an infeasible one lowers
u_c (monotonicity: every vector component-wise above an infeasible one is infeasible, and the
frontier only grows). It stops when every class is within rate_tolerance of its bound or the time
budget is spent. Feasibility is the isolated-ILP-plus-compaction check of feasibility.py.
"""
from __future__ import annotations

import time

from physai_ros.scheduler.factory.feasibility import RateChecker
from physai_ros.scheduler.factory.homogeneous import floor_rate, infeasible_floor
from physai_ros.scheduler.factory.packing import PlannedServer


def frontier_search(checker: RateChecker, rate_tolerance: float, deadline: float
                    ) -> tuple[dict[str, float], list[PlannedServer]] | str:
    classes = [c for c in checker.problem.classes if c.num_robots > 0]
    f = {c.name: floor_rate(c) for c in classes}
    u = {c.name: c.f_max() for c in classes}
    for c in classes:
        if f[c.name] > u[c.name]:
            return infeasible_floor(c, f"above 1/t_act = {u[c.name]:.4g} Hz")
    best = checker.check(f)
    if isinstance(best, str):
        floors = [c for c in classes if c.min_throughput > 0]
        if floors:
            names = ", ".join(f"{c.name} ({c.min_throughput:.4g} actions/s)" for c in floors)
            return f"F_min cannot be met for {names}: {best}"
        return f"no feasible class rates: {best}"
    top = checker.check(u)
    if not isinstance(top, str):
        return dict(u), top
    weight = {c.name: (c.value_weight if c.value_weight > 0 else 1e-9) * c.num_robots for c in classes}
    while time.monotonic() < deadline:
        open_ = [n for n in f if u[n] - f[n] > rate_tolerance * u[n]]
        if not open_:
            break
        n = max(open_, key=lambda k: weight[k] * (u[k] - f[k]))
        probe = {**f, n: (f[n] + u[n]) / 2}
        got = checker.check(probe)
        if isinstance(got, str):
            u[n] = probe[n]
        else:
            f, best = probe, got
    return f, best
