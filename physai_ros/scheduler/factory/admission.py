"""ROSA §3.4.4: runtime adaptation - placement-preserving admission, hot-standby failover, release.

admit() keeps every server's model placement and routes the new robot to existing servers of each
component its class needs (the one left with the most SLO slack; obligation components answered by
one model go together to one server of that model, colocation.py), possibly changing those
servers' batch sizes and lowering the class's action rate f_c (never below F_c^min / K_c); every
server the class touches is re-checked against the SLOs of all robots on it, and every class
against eq. (4). A full re-solve with the robot added (global rescheduling) is returned as
`proposed` when this fails or when it is notably better (NOTABLY_BETTER on eq. (1)).

failover() moves a failed server's routes to its hot standby without searching for a new
schedule; release() removes a robot's routes.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping

from physai_ros.scheduler.factory.colocation import (
    merged_label, obligation_groups, part_of, pool_key, pooled_label, pooled_stream,
)
from physai_ros.scheduler.factory.configs import LatencyTable, Stream
from physai_ros.scheduler.factory.feasibility import loop_times
from physai_ros.scheduler.factory.homogeneous import floor_rate
from physai_ros.scheduler.factory.packing import PlannedServer
from physai_ros.scheduler.factory.schedule import assemble, servers_from_schedule, stream_for
from physai_ros.scheduler.factory.solver import solve
from physai_ros.scheduler.factory.types import (
    GOAL_COUPLED, OBLIGATION, FactoryProblem, FactorySchedule, ModelProfile, Route,
)

# The re-solve is proposed over an admitted schedule when eq. (1) improves by more than this.
NOTABLY_BETTER = 0.10
# Relative tolerance of the search for the class's lowered rate.
RATE_TOLERANCE = 0.01


@dataclass(frozen=True)
class AdmissionDecision:
    admitted: bool
    schedule: FactorySchedule  # updated when admitted, the old one otherwise
    reason: str
    proposed: FactorySchedule | None = None  # global rescheduling with the robot added


def _rate_for(cls, component: str, f: float) -> float:
    if component == "system1":
        return f
    if component == "system2":
        return f / max(1, cls.system2_ratio)
    return float(cls.component(component).freq_hz)


def _robot_streams(problem: FactoryProblem, cls, robot_id: str, f: float) -> list[tuple[str, str, Stream]]:
    """(server label, model, stream) of each server the new robot needs: one per goal-coupled
    component, one per model of its obligation components (pooled, colocation.py)."""
    out = [(spec.component, spec.model, stream_for(problem, cls.name, robot_id, spec.component,
                                                   _rate_for(cls, spec.component, f)))
           for spec in cls.components if spec.component in GOAL_COUPLED]
    for model, specs in obligation_groups(cls):
        parts = tuple(part_of(spec, _rate_for(cls, spec.component, f)) for spec in specs)
        out.append((pooled_label(spec.component for spec in specs), model, pooled_stream(cls.name, robot_id, parts)))
    return out


def _place(problem: FactoryProblem, table: LatencyTable, indexed: list[tuple[int, PlannedServer]],
           cls, robot_id: str, f: float) -> list[tuple[int, PlannedServer]] | str:
    """The servers with class `cls` at rate f and the new robot routed; or why that fails."""
    out = []
    for i, s in indexed:  # the class's goal-coupled streams follow its (possibly lowered) rate
        streams = tuple(replace(st, rate_hz=_rate_for(cls, s.component, f))
                        if st.class_name == cls.name and s.component in GOAL_COUPLED else st for st in s.streams)
        out.append((i, replace(s, streams=streams)))
    for label, model, new in _robot_streams(problem, cls, robot_id, f):
        best = None
        for pos, (i, s) in enumerate(out):
            if pool_key(s.component, s.model) != pool_key(label, model):
                continue
            fit = table.best_batch(s.model, s.streams + (new,))
            if fit is None:
                continue
            slack = min(st.slo_s - table.latency(s.model, fit[0], s.load_hz + new.rate_hz, st.quantile)
                        for st in s.streams + (new,))
            if best is None or slack > best[0]:
                best = (slack, pos, fit[0])
        if best is None:
            return f"no {label} server (model {model}) has SLO headroom for one more robot at {f:.4g} Hz"
        _, pos, batch = best
        i, s = out[pos]
        out[pos] = (i, replace(s, component=merged_label(s.component, label), batch=batch, streams=s.streams + (new,)))
    for pos, (i, s) in enumerate(out):  # servers whose rates changed: keep the batch if it still holds
        if any(st.class_name == cls.name for st in s.streams) and not _meets(table, s, s.batch):
            fit = table.best_batch(s.model, s.streams)
            if fit is None:
                return f"server {i} ({s.component}) misses an SLO at {f:.4g} Hz"
            out[pos] = (i, replace(s, batch=fit[0]))
    return out


def _meets(table: LatencyTable, s: PlannedServer, batch: int) -> bool:
    return all(table.latency(s.model, batch, s.load_hz, st.quantile) <= st.slo_s * (1 + 1e-9) for st in s.streams)


def _check(problem: FactoryProblem, table: LatencyTable, placed, rates: Mapping[str, float]) -> str | None:
    for i, s in placed:
        if not _meets(table, s, s.batch):
            return f"server {i} ({s.component}) misses an SLO"
    loops = loop_times(problem, table, [s for _, s in placed])
    for c in problem.classes:
        if c.robot_ids and rates.get(c.name, 0.0) * loops[c.name] > 1 + 1e-9:
            return f"class {c.name}: eq. (4) allows {1 / loops[c.name]:.4g} Hz < {rates[c.name]:.4g} Hz"
    return None


def admit(schedule: FactorySchedule, problem: FactoryProblem, profiles: Mapping[tuple[str, str], ModelProfile],
          task_class: str, robot_id: str, *, resolve: bool = True, time_budget_s: float = 10.0) -> AdmissionDecision:
    cls = next((c for c in problem.classes if c.name == task_class), None)
    if cls is None:
        return AdmissionDecision(False, schedule, f"unknown task class {task_class!r}")
    if any(r.robot_id == robot_id for r in schedule.routes):
        return AdmissionDecision(False, schedule, f"robot {robot_id!r} is already routed")
    other = next((c.name for c in problem.classes if robot_id in c.robot_ids and c.name != task_class), None)
    if other is not None:
        return AdmissionDecision(False, schedule, f"robot {robot_id!r} belongs to class {other!r}")
    # A robot the problem already lists without routes (released earlier) is admitted back as is.
    bigger = problem if robot_id in cls.robot_ids else problem.with_robot(task_class, robot_id)
    cls = next(c for c in bigger.classes if c.name == task_class)
    proposed = solve(bigger, profiles, time_budget_s=time_budget_s) if resolve else None
    table = LatencyTable(profiles, problem.servers.hardware, problem.servers.memory_gb)
    for c in cls.components:
        if c.component in OBLIGATION and not c.freq_hz:
            return AdmissionDecision(False, schedule, f"{c.component} has no freq_hz", proposed)
    if not schedule.feasible:
        return AdmissionDecision(False, schedule, f"the current schedule is infeasible ({schedule.reason})", proposed)
    indexed = servers_from_schedule(schedule, problem)

    def attempt(f: float):
        placed = _place(bigger, table, indexed, cls, robot_id, f)
        if isinstance(placed, str):
            return placed
        rates = {**schedule.action_rate_hz, task_class: f}
        return _check(bigger, table, placed, rates) or placed

    f_now = schedule.action_rate_hz.get(task_class, 0.0)
    f_floor = floor_rate(cls)
    # A class without robots so far has no rate to keep: its first robot gets the best it can.
    f_top = f_now if f_now > 0 else cls.f_max()
    got = attempt(f_top) if f_top >= f_floor else "the class's rate is below its floor"
    f = f_top
    if isinstance(got, str):
        low = attempt(f_floor) if f_floor <= f_top else got
        if isinstance(low, str):
            why = (f"placement-preserving admission failed: {low}"
                   + (f" (even at F_min/K = {f_floor:.4g} Hz)" if cls.min_throughput > 0 else ""))
            return AdmissionDecision(False, schedule, why, proposed)
        lo, hi, got = f_floor, f_top, low
        while hi - lo > RATE_TOLERANCE * hi:  # the largest rate the fixed placement still carries
            mid = (lo + hi) / 2
            probe = attempt(mid)
            if isinstance(probe, str):
                hi = mid
            else:
                lo, got = mid, probe
        f = lo
    standbys = [a for a in schedule.assignments if a.standby_for is not None]
    rates = {**schedule.action_rate_hz, task_class: f}
    new = assemble(bigger, table, got, standbys, rates,
                   reason=f"admitted {robot_id} to {task_class} at {f:.4g} Hz (placement kept)")
    better = proposed is not None and proposed.feasible and \
        proposed.weighted_objective > (1 + NOTABLY_BETTER) * new.weighted_objective
    reason = f"admitted at {f:.4g} Hz" + (f" (lowered from {f_now:.4g} Hz)" if f < f_now else "")
    if better:
        reason += f"; a re-solve reaches {proposed.weighted_objective:.4g} vs {new.weighted_objective:.4g}"
    return AdmissionDecision(True, new, reason, proposed if better else None)


def failover(schedule: FactorySchedule, failed_server: int) -> FactorySchedule:
    """Redirect the failed server's streams to its hot standby (no re-solve). Without a standby the
    result is infeasible with the reason (the caller keeps the old schedule and re-solves)."""
    failed = next((a for a in schedule.assignments if a.server == failed_server and a.standby_for is None), None)
    if failed is None:
        return replace(schedule, feasible=False, reason=f"server {failed_server} is not a serving server")
    standby = next((a for a in schedule.assignments if a.standby_for == failed_server), None)
    if standby is None:
        return replace(schedule, feasible=False, reason=f"server {failed_server} has no hot standby")
    promoted = replace(failed, server=standby.server, standby_for=None)
    assignments = tuple(promoted if a is standby else a for a in schedule.assignments if a is not failed)
    routes = tuple(replace(r, server=standby.server) if r.server == failed_server else r for r in schedule.routes)
    return replace(schedule, assignments=assignments, routes=routes,
                   reason=f"{schedule.reason}; server {failed_server} failed over to standby {standby.server}")


def release(schedule: FactorySchedule, robot_id: str, problem: FactoryProblem | None = None) -> FactorySchedule:
    """Remove a robot's routes. Server loads drop by its rates; latency predictions are kept (they
    were made at the higher load, so they stay upper bounds). With the problem the objective
    subtracts v_c f_c of the robot's class; without it, the System 1 rate at the average weight."""
    mine = [r for r in schedule.routes if r.robot_id == robot_id]
    if not mine:
        raise ValueError(f"robot {robot_id!r} has no routes in the schedule")
    drop: dict[int, float] = {}
    for r in mine:
        drop[r.server] = drop.get(r.server, 0.0) + r.rate_hz
    assignments = tuple(replace(a, robot_ids=tuple(x for x in a.robot_ids if x != robot_id),
                                load_hz=max(0.0, a.load_hz - drop[a.server])) if a.server in drop else a
                        for a in schedule.assignments)
    cls = next((c for c in problem.classes if robot_id in c.robot_ids), None) if problem else None
    if cls is not None:
        f = schedule.action_rate_hz.get(cls.name, 0.0)
        d_thr, d_obj = f, cls.value_weight * f
    else:
        s1: Route | None = next((r for r in mine if r.component == "system1"), None)
        d_thr = s1.rate_hz if s1 else 0.0
        d_obj = d_thr * (schedule.weighted_objective / schedule.factory_throughput if schedule.factory_throughput else 1.0)
    return replace(schedule, assignments=assignments, routes=tuple(r for r in schedule.routes if r.robot_id != robot_id),
                   factory_throughput=schedule.factory_throughput - d_thr,
                   weighted_objective=schedule.weighted_objective - d_obj)

