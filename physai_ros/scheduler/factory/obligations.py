"""ROSA §3.4.2 Step 1: provision the obligation models (safety, monitor) with the minimum footprint.

Obligation models run at fixed per-robot frequencies; serving them faster buys nothing, so they
get the fewest servers that meet their SLOs at the aggregate load of eq. (2),
lambda_m = sum_r lambda_bar_{r,m}, summed per MODEL when several obligation components are one
model (colocation.py: ROSA dedicates a server to a model, not to a component). Robots' streams
are indivisible (a robot talks to one server per model), so the footprint is found by the same
isolated ILP packing as the goal-coupled models, one (model, class) at a time, then compaction
merges servers of the same model across classes (§3.4.3: the primitive applies to every component).
"""
from __future__ import annotations

from physai_ros.scheduler.factory.colocation import obligation_freq, obligation_groups, obligation_pair
from physai_ros.scheduler.factory.compaction import compact, drain
from physai_ros.scheduler.factory.configs import LatencyTable, Pair
from physai_ros.scheduler.factory.packing import PlannedServer, pack_pair
from physai_ros.scheduler.factory.types import OBLIGATION, FactoryProblem

__all__ = ["aggregate_rates", "obligation_freq", "obligation_pairs", "provision_obligations"]


def aggregate_rates(problem: FactoryProblem) -> dict[str, float]:
    """Eq. (2): total request rate per obligation component over all robots."""
    out: dict[str, float] = {}
    for cls in problem.classes:
        for spec in cls.components:
            if spec.component in OBLIGATION:
                out[spec.component] = out.get(spec.component, 0.0) + cls.num_robots * obligation_freq(spec, cls.name)
    return out


def obligation_pairs(problem: FactoryProblem) -> list[Pair]:
    """Per class, one pair per model answering its obligation components (colocation.py): a
    component alone on its model is the pair it always was; components sharing a model are one
    pooled pair at their summed per-robot rate and strictest SLO."""
    return [obligation_pair(cls, model, specs) for cls in problem.classes if cls.robot_ids
            for model, specs in obligation_groups(cls)]


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
        per: dict[str, tuple[int, float]] = {}  # label -> (servers, aggregate rate)
        for s in servers:
            n, load = per.get(s.component, (0, 0.0))
            per[s.component] = (n + 1, load + s.load_hz)
        detail = ", ".join(f"{c} needs {n} servers for {load:.3g} Hz" for c, (n, load) in sorted(per.items()))
        return [], f"obligations do not fit: {detail}; the pool has {budget}"
    return servers, None
