"""ROSA §3.4.2 Step 1: provision the obligation models (safety, monitor) with the minimum footprint.

Obligation models run at fixed per-robot frequencies; serving them faster buys nothing, so they
get the fewest servers that meet their SLOs at the aggregate load of eq. (2),
lambda_m = sum_r lambda_bar_{r,m}. Robots' streams are indivisible (a robot talks to one server
per component), so the footprint is found by the same isolated ILP packing as the goal-coupled
models, one (component, class) at a time, then compaction merges servers of the same component
and model across classes (§3.4.3: the primitive applies to every component).
"""
from __future__ import annotations

from physai_ros.scheduler.factory.compaction import compact, drain
from physai_ros.scheduler.factory.configs import LatencyTable, Pair, quantile_column
from physai_ros.scheduler.factory.packing import PlannedServer, pack_pair
from physai_ros.scheduler.factory.types import OBLIGATION, FactoryProblem


def aggregate_rates(problem: FactoryProblem) -> dict[str, float]:
    """Eq. (2): total request rate per obligation component over all robots."""
    out: dict[str, float] = {}
    for cls in problem.classes:
        for spec in cls.components:
            if spec.component in OBLIGATION:
                out[spec.component] = out.get(spec.component, 0.0) + cls.num_robots * obligation_freq(spec, cls.name)
    return out


def obligation_freq(spec, class_name: str) -> float:
    if spec.freq_hz is None or spec.freq_hz <= 0:
        raise ValueError(f"class {class_name!r}: obligation component {spec.component!r} needs freq_hz > 0")
    return float(spec.freq_hz)


def obligation_pairs(problem: FactoryProblem) -> list[Pair]:
    pairs = []
    for cls in problem.classes:
        for spec in cls.components:
            if spec.component in OBLIGATION and cls.robot_ids:
                pairs.append(Pair(spec.component, cls.name, spec.model, cls.robot_ids,
                                  obligation_freq(spec, cls.name), spec.slo_s, quantile_column(spec.slo_quantile)))
    return pairs


def provision_obligations(problem: FactoryProblem, table: LatencyTable) -> tuple[list[PlannedServer], str | None]:
    """Minimum-footprint servers for every obligation component, or the reason none fits."""
    servers: list[PlannedServer] = []
    for pair in obligation_pairs(problem):
        packed = pack_pair(table, pair)
        if isinstance(packed, str):
            return [], f"obligations do not fit: {packed}"
        servers.extend(packed)
    # Whole-server merges first (§3.4.3), then stream moves to reach the eq. (2) footprint.
    servers = drain(table, compact(table, servers))
    budget = problem.servers.num_servers
    if len(servers) > budget:
        rates = aggregate_rates(problem)
        per = {}
        for s in servers:
            per[s.component] = per.get(s.component, 0) + 1
        detail = ", ".join(f"{c} needs {n} servers for {rates.get(c, 0.0):.3g} Hz" for c, n in sorted(per.items()))
        return [], f"obligations do not fit: {detail}; the pool has {budget}"
    return servers, None
