"""Is a class-rate vector f feasible? ROSA §3.4.2 Steps 2.1-2.3 and §3.4.3's ILP-heuristic check.

For each task class c at rate f_c, every goal-coupled component becomes a Pair (System 1 at f_c
per robot, System 2 at f_c / H) packed in isolation by the ILP (packing.py). For a homogeneous
fleet this is eq. (3) exactly: its constraints couple the models only through the shared server
count, so the joint ILP is feasible iff the per-model minimum-server ILPs sum to <= |S_goal|
(their latency tie-break is then applied to the spare servers, below). If the packings use
more servers than the goal budget, compaction (compaction.py) tries cross-class sharing. Servers
the packing leaves spare are not idle capacity to throw away: they are added one at a time where
they shorten the slowest class's loop most (the latency tie-break of Step 2.2, done greedily).
Step 2.3 then checks eq. (4) per robot with the profile's mean latencies:
f_c <= 1 / (t_act + l_S1 + l_S2 / H).
"""
from __future__ import annotations

import math
from typing import Mapping

from physai_ros.scheduler.factory.compaction import compact
from physai_ros.scheduler.factory.configs import LatencyTable, Pair, ServerConfig, quantile_column
from physai_ros.scheduler.factory.packing import PlannedServer, pack_pair, servers_for, split_counts
from physai_ros.scheduler.factory.types import FactoryProblem, TaskClass


def goal_pairs(cls: TaskClass, f: float, table: LatencyTable) -> list[Pair] | str:
    """The class's System 1 / System 2 pairs at rate f, with eq. (4)'s mean-latency caps."""
    if not cls.robot_ids:
        return []
    s1, s2 = cls.component("system1"), cls.component("system2")
    h = max(1, cls.system2_ratio)
    budget = math.inf if f <= 0 else 1.0 / f - cls.action_period_s  # latency eq. (4) leaves
    if budget <= 0:
        return f"class {cls.name}: {f:.4g} Hz exceeds 1/t_act = {cls.f_max():.4g} Hz"
    pairs = []
    if s1 is not None:
        cap = budget - (table.min_mean(s2.model) / h if s2 is not None else 0.0)
        pairs.append(Pair("system1", cls.name, s1.model, cls.robot_ids, f, s1.slo_s,
                          quantile_column(s1.slo_quantile), cap))
    if s2 is not None:
        cap = (budget - (table.min_mean(s1.model) if s1 is not None else 0.0)) * h
        pairs.append(Pair("system2", cls.name, s2.model, cls.robot_ids, f / h, s2.slo_s,
                          quantile_column(s2.slo_quantile), cap))
    for p in pairs:
        if p.mean_cap_s <= 0:
            return f"class {cls.name}: at {f:.4g} Hz eq. (4) leaves no latency for {p.component}"
    return pairs


def loop_times(problem: FactoryProblem, table: LatencyTable, servers: list[PlannedServer]) -> dict[str, float]:
    """Per class, the slowest robot's closed-loop period t_act + l_S1 + l_S2 / H (eq. 4)."""
    lat: dict[tuple[str, str], float] = {}
    for s in servers:
        mean = table.latency(s.model, s.batch, s.load_hz, "mean")
        for st in s.streams:
            lat[(st.robot_id, s.component)] = mean
    out = {}
    for cls in problem.classes:
        h = max(1, cls.system2_ratio)
        worst = 0.0
        for r in cls.robot_ids:
            worst = max(worst, lat.get((r, "system1"), 0.0) + lat.get((r, "system2"), 0.0) / h)
        out[cls.name] = cls.action_period_s + worst
    return out


class RateChecker:
    """Feasibility of rate vectors for one problem; caches isolated packings between calls."""

    def __init__(self, problem: FactoryProblem, table: LatencyTable, goal_budget: int):
        self.problem, self.table, self.budget = problem, table, goal_budget
        self._packs: dict[Pair, list[PlannedServer] | str] = {}
        self.checks = 0

    def _pack(self, pair: Pair) -> list[PlannedServer] | str:
        if pair not in self._packs:
            self._packs[pair] = pack_pair(self.table, pair)
        return self._packs[pair]

    def check(self, rates: Mapping[str, float]) -> list[PlannedServer] | str:
        """The goal-coupled servers for these class rates, or why they are infeasible."""
        self.checks += 1
        pairs: list[Pair] = []
        for cls in self.problem.classes:
            got = goal_pairs(cls, rates.get(cls.name, 0.0), self.table)
            if isinstance(got, str):
                return got
            pairs.extend(got)
        servers: list[PlannedServer] = []
        for pair in pairs:
            packed = self._pack(pair)
            if isinstance(packed, str):
                return packed
            servers.extend(packed)
        if len(servers) > self.budget:
            isolated = len(servers)
            servers = compact(self.table, servers, self.budget)
            if len(servers) > self.budget:
                return (f"goal-coupled models need {len(servers)} servers after compaction ({isolated} isolated), "
                        f"{self.budget} left after obligations")
        else:
            servers = self._spread(pairs, servers, rates)
        loops = loop_times(self.problem, self.table, servers)
        for cls in self.problem.classes:
            f = rates.get(cls.name, 0.0)
            if cls.robot_ids and f * loops[cls.name] > 1 + 1e-9:
                return f"class {cls.name}: eq. (4) closed loop allows {1 / loops[cls.name]:.4g} Hz < {f:.4g} Hz"
        return servers

    def _spread(self, pairs: list[Pair], servers: list[PlannedServer], rates: Mapping[str, float]) -> list[PlannedServer]:
        """Give spare servers to the pair that most shortens the slowest class's loop."""
        spare = self.budget - len(servers)
        if spare <= 0 or not pairs:
            return servers
        caps = {p: {c.batch: c for c in self.table.configs(p)} for p in pairs}
        batches: dict[Pair, list[int]] = {p: [] for p in pairs}
        for p in pairs:  # isolated packing: each server belongs to exactly one pair
            batches[p] = [s.batch for s in servers if s.component == p.component
                          and s.streams and s.streams[0].class_name == p.class_name]
        by_class: dict[str, list[Pair]] = {}
        for p in pairs:
            by_class.setdefault(p.class_name, []).append(p)
        classes = {c.name: c for c in self.problem.classes}

        def pair_latency(p: Pair, bs: list[int]) -> tuple[float, float]:
            """(slowest server's mean latency, sum over robots of their mean latency)."""
            counts = split_counts([caps[p][b].k_max for b in bs], len(p.robot_ids))
            lat = [(self.table.latency(p.model, b, k * p.rate_hz, "mean"), k) for b, k in zip(bs, counts) if k]
            return max(m for m, _ in lat), sum(m * k for m, k in lat)

        def loop(name: str, override: tuple[Pair, list[int]] | None = None) -> tuple[float, float]:
            """The class's eq. (4) period at its slowest robot, then its robots' total latency:
            one more server may not lower the slowest (9 robots per server stays 9) yet still
            lower the total, and a few such steps lower the slowest too."""
            cls = classes[name]
            worst, total = cls.action_period_s, 0.0
            for p in by_class[name]:
                bs = override[1] if override and override[0] == p else batches[p]
                scale = max(1, cls.system2_ratio) if p.component == "system2" else 1
                w, t = pair_latency(p, bs)
                worst, total = worst + w / scale, total + t / scale
            return worst, total

        def better(a: tuple[float, float], b: tuple[float, float]) -> bool:
            return a[0] < b[0] - 1e-12 or (a[0] <= b[0] + 1e-12 and a[1] < b[1] - 1e-12)

        done: set[str] = set()
        while spare > 0:
            open_ = [n for n in by_class if n not in done]
            if not open_:
                break
            # The class closest to its eq. (4) bound: f_c times its slowest loop, 1.0 = binding.
            name = max(open_, key=lambda n: rates.get(n, 0.0) * loop(n)[0])
            current = loop(name)
            best = None
            for p in by_class[name]:
                if len(batches[p]) >= len(p.robot_ids):
                    continue  # one robot per server already
                for b in caps[p]:
                    t = loop(name, (p, batches[p] + [b]))
                    if better(t, current) and (best is None or better(t, best[0])):
                        best = (t, p, b)
            if best is None:
                done.add(name)
                continue
            batches[best[1]].append(best[2])
            spare -= 1
        out: list[PlannedServer] = []
        for p in pairs:
            chosen = sorted((caps[p][b] for b in batches[p]), key=lambda c: (-c.k_max, c.batch))
            out.extend(servers_for(p, [ServerConfig(c.model, c.batch, c.k_max, c.mean_at_k_max_s) for c in chosen]))
        return out
