"""ROSA §4.1's baseline serving systems, written as FactorySchedule objects for the same
FactoryProblem the ROSA solver gets, so bench/physai_bench/factory/sim.py replays all of them alike.

Dedicated serving (a GPU belongs to one robot):
  Baseline 1 - one GPU per robot: all of the robot's components on its GPU, time-shared (the
               simulator serves such a server FIFO, one request at a time).
  Baseline 2 - one GPU per model component of the robot.
  Robots are admitted round-robin over the task classes until the next one does not fit in the
  pool; the rest are not served (robots_served < robots_total), as in ROSA §4.2 ("a
  one-GPU-per-model baseline supports only up to 2 robots for the four-component P4 pipeline").
Shared pool (every robot shares the pool; GPUs split between components once):
  Baseline 3 - GPUs partitioned equally across the model components the fleet uses (P4 on 8
               GPUs: 2:2:2:2, ROSA Table 3);
  Baseline 4 - GPUs proportional to the components' model sizes (P4 on 8: 1:3:1:3, Table 3);
  both: System 1 at batch size 1, continuous batching for the VLMs, robots spread round-robin over
  a component's servers.
No baseline caps a robot's rate (ROSA §4.1: "all baselines issue requests as soon as a robot
receives an observation"): goal-coupled routes carry rate_hz = inf. Obligation routes carry the
task's freq_hz. Baselines make no latency prediction (NaN).
"""
from __future__ import annotations

import math
from typing import Mapping

from physai_ros.scheduler.factory.types import (COMPONENTS, FactoryProblem,
                                                FactorySchedule, Route, ServerAssignment)

NAN = math.nan


def _rate(spec) -> float:
    return spec.freq_hz if spec.component not in ("system1", "system2") and spec.freq_hz else math.inf


def _round_robin(problem: FactoryProblem) -> list[tuple[object, str]]:
    """(class, robot id) interleaved over the classes, so a dedicated pool is shared fairly."""
    queues = [[(c, r) for r in c.robot_ids] for c in problem.classes]
    out = []
    for i in range(max((len(q) for q in queues), default=0)):
        out.extend(q[i] for q in queues if i < len(q))
    return out


def _assign(server: int, spec, robots: tuple[str, ...]) -> ServerAssignment:
    return ServerAssignment(server, spec.component, spec.model, 1, robots, NAN, NAN, NAN)


def _schedule(reason: str, assignments, routes) -> FactorySchedule:
    return FactorySchedule(True, reason, tuple(assignments), tuple(routes))


def dedicated_per_robot(problem: FactoryProblem) -> FactorySchedule:
    """Baseline 1: robot i gets GPU i for all its components."""
    assignments, routes = [], []
    admitted = _round_robin(problem)[:problem.servers.num_servers]
    for server, (cls, robot) in enumerate(admitted):
        for spec in cls.components:
            assignments.append(_assign(server, spec, (robot,)))
            routes.append(Route(robot, spec.component, server, _rate(spec)))
    return _schedule(f"baseline 1: one GPU per robot, {len(admitted)} robots served", assignments, routes)


def dedicated_per_model(problem: FactoryProblem) -> FactorySchedule:
    """Baseline 2: one GPU per model component per robot, until the pool runs out."""
    assignments, routes = [], []
    server, served = 0, 0
    for cls, robot in _round_robin(problem):
        if server + len(cls.components) > problem.servers.num_servers:
            break
        for spec in cls.components:
            assignments.append(_assign(server, spec, (robot,)))
            routes.append(Route(robot, spec.component, server, _rate(spec)))
            server += 1
        served += 1
    return _schedule(f"baseline 2: one GPU per model per robot, {served} robots served", assignments, routes)


def _components_used(problem: FactoryProblem) -> dict[str, str]:
    """component -> model, in COMPONENTS order (one model per component across the classes)."""
    used: dict[str, str] = {}
    for comp in COMPONENTS:
        for cls in problem.classes:
            spec = cls.component(comp)
            if spec is not None:
                used.setdefault(comp, spec.model)
    return used


def _largest_remainder(weights: Mapping[str, float], total: int) -> dict[str, int]:
    """Integer split of `total` proportional to `weights` (largest remainder), at least 1 each:
    P4's 6.6 : 16.6 : 7.5 : 16.6 GB on 8 GPUs -> 1 : 3 : 1 : 3, ROSA Table 3's weighted partition."""
    names = list(weights)
    if total < len(names):
        raise ValueError(f"{total} GPUs cannot host {len(names)} components one each")
    s = sum(weights.values())
    quota = {n: total * weights[n] / s for n in names}
    out = {n: max(1, int(math.floor(quota[n]))) for n in names}
    by_remainder = sorted(names, key=lambda n: (-(quota[n] - math.floor(quota[n])), names.index(n)))
    while sum(out.values()) < total:
        for n in by_remainder:
            if sum(out.values()) < total:
                out[n] += 1
    while sum(out.values()) > total:  # the minimum of 1 overshot: take from the largest
        big = max((n for n in names if out[n] > 1), key=lambda n: (out[n] - quota[n], out[n]))
        out[big] -= 1
    return out


def _partitioned(problem: FactoryProblem, split: Mapping[str, int], label: str) -> FactorySchedule:
    assignments, routes = [], []
    server = 0
    for comp, n in split.items():
        servers = list(range(server, server + n))
        server += n
        members: dict[int, list[str]] = {s: [] for s in servers}
        k = 0
        for cls in problem.classes:
            spec = cls.component(comp)
            if spec is None:
                continue
            for robot in cls.robot_ids:
                s = servers[k % n]
                k += 1
                members[s].append(robot)
                routes.append(Route(robot, comp, s, _rate(spec)))
        model = _components_used(problem)[comp]
        assignments.extend(ServerAssignment(s, comp, model, 1, tuple(members[s]), NAN, NAN, NAN) for s in servers)
    ratio = ":".join(str(n) for n in split.values())
    return _schedule(f"{label}: {'/'.join(split)} = {ratio}, System 1 batch 1, uncapped", assignments, routes)


def equal_partition(problem: FactoryProblem) -> FactorySchedule:
    """Baseline 3: equal GPUs per component; the remainder goes to components in pipeline order."""
    used = _components_used(problem)
    g = problem.servers.num_servers
    base, extra = divmod(g, len(used))
    if base == 0:
        raise ValueError(f"{g} GPUs cannot host {len(used)} components one each")
    split = {c: base + (1 if i < extra else 0) for i, c in enumerate(used)}
    return _partitioned(problem, split, "baseline 3: equal partition")


def weighted_partition(problem: FactoryProblem, weights_gb: Mapping[str, float]) -> FactorySchedule:
    """Baseline 4: GPUs proportional to each component's model size (weights_gb by model key)."""
    used = _components_used(problem)
    split = _largest_remainder({c: weights_gb[m] for c, m in used.items()}, problem.servers.num_servers)
    return _partitioned(problem, split, "baseline 4: size-weighted partition")


def all_baselines(problem: FactoryProblem, weights_gb: Mapping[str, float]) -> dict[str, FactorySchedule]:
    return {"B1 GPU/robot": dedicated_per_robot(problem), "B2 GPU/model/robot": dedicated_per_model(problem),
            "B3 equal": equal_partition(problem), "B4 weighted": weighted_partition(problem, weights_gb)}
