"""Planned servers <-> FactorySchedule (ROSA §3.4.1's four decisions as plain data).

build_schedule numbers the serving servers 0..n-1 (goal-coupled first), gives every stream a
Route, predicts each server's mean and p99 latency from the profile at its load, and adds the hot
standbys of §3.4.4: copies (component, model, batch) of the busiest servers, goal-coupled first,
that carry no routes. servers_from_schedule goes back, so admission can re-check a schedule.
An obligation server may host several components of one model (colocation.py): its `component`
is their "+"-joined label, each component keeps its own Route and rate, the predicted SLO
attainment stays per component name, and hosted_components() lists what a server answers.
"""
from __future__ import annotations

import math
from typing import Mapping

from physai_ros.scheduler.factory.colocation import (
    hosted_components, part_of, pooled_stream, stream_components,
)
from physai_ros.scheduler.factory.configs import LatencyTable, Part, Stream, quantile_column
from physai_ros.scheduler.factory.packing import PlannedServer
from physai_ros.scheduler.factory.types import (
    GOAL_COUPLED, OBLIGATION, FactoryProblem, FactorySchedule, Route, ServerAssignment,
)

# hosted_components(assignment) -> ("safety", "monitor"): the components a (pooled) server answers.
__all__ = ["assemble", "build_schedule", "hosted_components", "servers_from_schedule", "stream_for", "utilization"]


def utilization(table: LatencyTable, server: PlannedServer) -> float:
    curve_max = table.rate_cap(server.model, server.batch, math.inf, "p99")
    return server.load_hz / curve_max if curve_max > 0 else math.inf


def assignment_for(table: LatencyTable, index: int, s: PlannedServer) -> ServerAssignment:
    return ServerAssignment(index, s.component, s.model, s.batch, tuple(st.robot_id for st in s.streams), s.load_hz,
                            table.latency(s.model, s.batch, s.load_hz, "mean"),
                            table.latency(s.model, s.batch, s.load_hz, "p99"))


def assemble(problem: FactoryProblem, table: LatencyTable, indexed: list[tuple[int, PlannedServer]],
             standbys: list[ServerAssignment], rates: Mapping[str, float], *, reason: str = "",
             solver_time_s: float = 0.0) -> FactorySchedule:
    """The schedule of these (index, server) pairs: routes, predictions, rates and objective."""
    assignments, routes = [], []
    hits: dict[str, list[bool]] = {}
    for i, s in indexed:
        assignments.append(assignment_for(table, i, s))
        for st in s.streams:
            # A pooled obligation stream routes each of its components with the component's own
            # rate, and is reported against each component's own SLO (per component name).
            for part in stream_components(st, s.component):
                routes.append(Route(st.robot_id, part.component, i, part.rate_hz))
                hits.setdefault(part.component, []).append(
                    table.latency(s.model, s.batch, s.load_hz, part.quantile) <= part.slo_s * (1 + 1e-9))
    action = {c.name: float(rates.get(c.name, 0.0)) for c in problem.classes}
    throughput = sum(c.num_robots * action[c.name] for c in problem.classes)
    weighted = sum(c.value_weight * c.num_robots * action[c.name] for c in problem.classes)
    attainment = {comp: sum(v) / len(v) for comp, v in hits.items()}
    return FactorySchedule(True, reason, tuple(assignments) + tuple(standbys), tuple(routes), action, throughput,
                           weighted, attainment, solver_time_s)


def build_schedule(problem: FactoryProblem, table: LatencyTable, servers: list[PlannedServer],
                   rates: Mapping[str, float], *, reason: str = "", solver_time_s: float = 0.0) -> FactorySchedule:
    servers = sorted(servers, key=lambda s: (s.component not in GOAL_COUPLED, s.component, s.model))
    # Hot standbys (§3.4.4): mirror the busiest servers, goal-coupled first, one standby each.
    ranked = sorted(range(len(servers)), key=lambda i: (servers[i].component not in GOAL_COUPLED,
                                                        -utilization(table, servers[i]), i))
    standbys = []
    for j, i in enumerate(ranked[:problem.servers.standby]):
        s = servers[i]
        standbys.append(ServerAssignment(len(servers) + j, s.component, s.model, s.batch, (), 0.0,
                                         table.latency(s.model, s.batch, 0.0, "mean"),
                                         table.latency(s.model, s.batch, 0.0, "p99"), standby_for=i))
    return assemble(problem, table, list(enumerate(servers)), standbys, rates, reason=reason,
                    solver_time_s=solver_time_s)


def class_of(problem: FactoryProblem) -> dict[str, str]:
    return {r: c.name for c in problem.classes for r in c.robot_ids}


def stream_for(problem: FactoryProblem, class_name: str, robot_id: str, component: str, rate_hz: float) -> Stream:
    cls = next(c for c in problem.classes if c.name == class_name)
    spec = cls.component(component)
    if spec is None:
        raise ValueError(f"class {class_name!r} has no component {component!r}")
    return Stream(class_name, robot_id, rate_hz, spec.slo_s, quantile_column(spec.slo_quantile))


def part_for(problem: FactoryProblem, class_name: str, component: str, rate_hz: float) -> Part:
    cls = next(c for c in problem.classes if c.name == class_name)
    spec = cls.component(component)
    if spec is None:
        raise ValueError(f"class {class_name!r} has no component {component!r}")
    return part_of(spec, rate_hz)


def servers_from_schedule(schedule: FactorySchedule, problem: FactoryProblem) -> list[tuple[int, PlannedServer]]:
    """(index, server) of the serving servers (standbys left out) with their streams, by index.
    On an obligation server a robot's routes are one pooled stream (colocation.py)."""
    owner = class_of(problem)
    streams: dict[int, list[Stream]] = {}
    pooled: dict[int, dict[str, list[Part]]] = {}  # obligation server -> robot -> its parts, in route order
    for r in schedule.routes:
        if r.robot_id not in owner:
            raise ValueError(f"robot {r.robot_id!r} of the schedule is in no class of the problem")
        if r.component in OBLIGATION:
            part = part_for(problem, owner[r.robot_id], r.component, r.rate_hz)
            pooled.setdefault(r.server, {}).setdefault(r.robot_id, []).append(part)
        else:
            streams.setdefault(r.server, []).append(
                stream_for(problem, owner[r.robot_id], r.robot_id, r.component, r.rate_hz))
    for server, robots in pooled.items():
        streams.setdefault(server, []).extend(pooled_stream(owner[rid], rid, tuple(parts))
                                              for rid, parts in robots.items())
    return [(a.server, PlannedServer(a.component, a.model, a.batch, tuple(streams.get(a.server, ()))))
            for a in sorted(schedule.assignments, key=lambda a: a.server) if a.standby_for is None]
