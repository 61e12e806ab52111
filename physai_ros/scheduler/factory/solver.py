"""ROSA §3.4.2-§3.4.3 steady-state solver: FactoryProblem + profiles -> FactorySchedule.

1. Obligation models (safety, monitor) get the minimum feasible footprint (obligations.py, eq. 2);
   obligation components answered by one model share that model's servers (colocation.py).
2. The remaining servers S_goal serve the goal-coupled models; the action rate is searched:
   one class -> binary search on f (homogeneous.py), several -> adaptive frontier search on the
   class-rate vector maximizing eq. (1) (heterogeneous.py). Each probe packs configurations with
   an ILP (packing.py), compacts across classes when over budget (compaction.py) and checks the
   closed loop, eq. (4) (feasibility.py).
3. The schedule numbers the servers, routes every robot x component, and adds hot standbys
   (schedule.py). An infeasible problem returns feasible=False and a reason naming what did not fit.
"""
from __future__ import annotations

import time
from dataclasses import replace
from typing import Mapping

from physai_ros.scheduler.factory.configs import LatencyTable
from physai_ros.scheduler.factory.feasibility import RateChecker
from physai_ros.scheduler.factory.heterogeneous import frontier_search
from physai_ros.scheduler.factory.homogeneous import binary_search
from physai_ros.scheduler.factory.obligations import provision_obligations
from physai_ros.scheduler.factory.schedule import build_schedule
from physai_ros.scheduler.factory.types import (
    COMPONENTS, GOAL_COUPLED, FactoryProblem, FactorySchedule, ModelProfile,
)


def validate(problem: FactoryProblem) -> str | None:
    if not problem.classes:
        return "no task classes"
    if problem.servers.num_servers < 0 or problem.servers.standby < 0:
        return "negative server counts"
    seen: set[str] = set()
    for cls in problem.classes:
        if cls.action_period_s <= 0:
            return f"class {cls.name}: action_period_s must be > 0"
        for spec in cls.components:
            if spec.component not in COMPONENTS:
                return f"class {cls.name}: unknown component {spec.component!r}"
        dup = seen.intersection(cls.robot_ids)
        if dup or len(set(cls.robot_ids)) != len(cls.robot_ids):
            return f"class {cls.name}: robot ids repeat ({sorted(dup) or 'within the class'})"
        seen.update(cls.robot_ids)
    return None


def solve(problem: FactoryProblem, profiles: Mapping[tuple[str, str], ModelProfile], *,
          rate_tolerance: float = 0.01, time_budget_s: float = 10.0) -> FactorySchedule:
    t0 = time.monotonic()
    # Relative to the rate bound being refined; a zero tolerance would bisect to float precision.
    rate_tolerance = max(float(rate_tolerance), 1e-9)

    def infeasible(reason: str) -> FactorySchedule:
        return FactorySchedule(False, reason, solver_time_s=time.monotonic() - t0)

    bad = validate(problem)
    if bad:
        return infeasible(bad)
    pool = problem.servers
    table = LatencyTable(profiles, pool.hardware, pool.memory_gb)
    try:
        obligations, why = provision_obligations(problem, table)
    except ValueError as e:
        return infeasible(str(e))
    if why:
        return infeasible(why)
    goal_budget = pool.num_servers - len(obligations)
    needs_goal = any(c.component(m) is not None and c.robot_ids for c in problem.classes for m in GOAL_COUPLED)
    if needs_goal and goal_budget <= 0:
        return infeasible(f"obligations use {len(obligations)} of {pool.num_servers} servers; "
                          "none is left for the goal-coupled models")
    checker = RateChecker(problem, table, goal_budget)
    deadline = t0 + time_budget_s
    search = binary_search if problem.homogeneous else frontier_search
    found = search(checker, rate_tolerance, deadline)
    if isinstance(found, str):
        return infeasible(found)
    rates, goal = found
    summary = (", ".join(f"{n}: {f:.4g} Hz" for n, f in rates.items())
               + f"; {len(goal)} goal + {len(obligations)} obligation servers of {pool.num_servers}"
               + f"; {checker.checks} feasibility checks")
    sched = build_schedule(problem, table, goal + obligations, rates, reason=summary)
    return replace(sched, solver_time_s=time.monotonic() - t0)
