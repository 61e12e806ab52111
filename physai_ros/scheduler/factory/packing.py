"""ROSA §3.4.2 Step 2.2 / §3.4.3 isolated packing: choose server configurations with an ILP.

For one (component, task class) pair, y_b in Z>=0 is the number of servers running batch size b
with the pair's dominant configuration (b, k_max(b)) (configs.py). Coverage is written
sum_b y_b k_max(b) >= K with the robots then split exactly over the chosen servers (each gets at
most k_max(b), evenly). This is the paper's eq. (3) (sum_p y_p a_p = |R| over every (b, k)) with
the dominated configurations folded in: since a server feasible with k_max streams is feasible
with fewer, an exact cover with (b, k <= k_max) exists iff the >= cover with (b, k_max) does, and
the ILP has one variable per batch size instead of one per (b, k) - small enough to solve at every
step of the rate search. test_factory_packing.py checks the equivalence against brute-force
enumeration of all (b, k) multisets.

The objective is the paper's tie-break: servers first, then measured mean latency (relative to
the SLO) at full configuration load. The ILP is scipy.optimize.milp (HiGHS).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp

from physai_ros.scheduler.factory.configs import LatencyTable, Pair, ServerConfig, Stream

# Latency enters the objective scaled well below one server, so it only breaks ties.
LATENCY_TIE_BREAK = 1e-3


@dataclass(frozen=True)
class PlannedServer:
    """One server of a plan: the component and model it hosts, its batch and the streams it serves."""

    component: str
    model: str
    batch: int
    streams: tuple[Stream, ...]

    @property
    def load_hz(self) -> float:
        return sum(s.rate_hz for s in self.streams)

    def classes(self) -> set[str]:
        return {s.class_name for s in self.streams}


def split_counts(caps: list[int], n: int) -> list[int]:
    """Split n streams over servers with these capacities as evenly as the capacities allow."""
    order = sorted(range(len(caps)), key=lambda i: caps[i])
    counts = [0] * len(caps)
    remaining = n
    for pos, i in enumerate(order):
        left = len(order) - pos
        counts[i] = min(caps[i], -(-remaining // left))
        remaining -= counts[i]
    if remaining > 0:
        raise ValueError(f"capacities {caps} cannot hold {n} streams")
    return counts


def servers_for(pair: Pair, chosen: list[ServerConfig]) -> list[PlannedServer]:
    """Exact split of the pair's robots over the chosen configurations (routes)."""
    counts = split_counts([c.k_max for c in chosen], len(pair.robot_ids))
    out, start = [], 0
    for cfg, k in zip(chosen, counts):
        if k == 0:
            continue  # a configuration the split left empty is not a server
        out.append(PlannedServer(pair.component, cfg.model, cfg.batch, pair.streams(pair.robot_ids[start:start + k])))
        start += k
    return out


def solve_ilp(configs: list[ServerConfig], n_streams: int, slo_s: float, budget: int | None = None) -> list[int] | None:
    """min sum_b y_b (1 + eps * mean_b / SLO) s.t. sum_b y_b k_b >= n [, sum_b y_b <= budget]."""
    if not configs:
        return None
    k = np.array([c.k_max for c in configs], dtype=float)
    cost = np.array([1.0 + LATENCY_TIE_BREAK * min(c.mean_at_k_max_s / slo_s, 10.0) for c in configs])
    rows = [LinearConstraint(k[None, :], lb=n_streams, ub=np.inf)]
    if budget is not None:
        rows.append(LinearConstraint(np.ones((1, len(configs))), lb=0, ub=budget))
    upper = np.array([math.ceil(n_streams / c.k_max) for c in configs], dtype=float)
    res = milp(cost, constraints=rows, integrality=np.ones(len(configs)), bounds=Bounds(np.zeros(len(configs)), upper))
    if res.status != 0 or res.x is None:
        return None
    return [int(round(v)) for v in res.x]


def pack_pair(table: LatencyTable, pair: Pair, budget: int | None = None) -> list[PlannedServer] | str:
    """Isolated packing of one pair: its servers, or why no packing exists."""
    if not pair.robot_ids:
        return []
    if not table.has(pair.model):
        return f"no profile for model {pair.model!r} on {table.hardware!r} ({pair.component}, class {pair.class_name})"
    if not table.fits(pair.model):
        return f"model {pair.model!r} ({pair.component}) does not fit in {table.memory_gb} GB"
    configs = table.configs(pair)
    if not configs:
        return (f"{pair.component} (model {pair.model!r}, class {pair.class_name}): no batch size meets the "
                f"{pair.slo_s * 1e3:.0f} ms SLO for one robot at {pair.rate_hz:.3g} Hz")
    y = solve_ilp(configs, len(pair.robot_ids), pair.slo_s, budget)
    if y is None:
        return f"{pair.component} (class {pair.class_name}): no packing within {budget} servers"
    chosen = [cfg for cfg, n in zip(configs, y) for _ in range(n)]
    # Bigger configurations first so the even split fills them; the split order is stable.
    chosen.sort(key=lambda c: (-c.k_max, c.batch))
    return servers_for(pair, chosen)


def resplit(table: LatencyTable, pair: Pair, servers: list[PlannedServer]) -> list[PlannedServer] | None:
    """Re-split a pair's robots over these servers' batch sizes (after adding one): None if
    the capacities no longer cover the robots."""
    caps = []
    for s in servers:
        cfg = next((c for c in table.configs(pair) if c.batch == s.batch), None)
        caps.append(cfg.k_max if cfg else 0)
    if sum(caps) < len(pair.robot_ids):
        return None
    chosen = [ServerConfig(pair.model, s.batch, c, 0.0) for s, c in zip(servers, caps)]
    return servers_for(pair, chosen)
