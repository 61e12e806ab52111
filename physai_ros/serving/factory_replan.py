"""Rescheduling a running factory plan (ROSA §3.4.4, "global rescheduling"): solve again for
the robots and instances there are now, and apply the result live.

One solve runs at a time, in the background (a solve can take seconds; the serving core keeps
serving the current plan meanwhile). A trigger that arrives during a solve is remembered and
solved for next, with every reason that came in. A plan is applied only when it still holds
every robot the running plan holds (a robot admitted during the solve sends it round again).
Applying it is FactoryRuntime.adopt: new roles on the usable instances (a standby may become a
serving instance when one was lost), new routes, batch caps and rate caps; the serving core
moves queued rounds to their new instances (serving.plan_binding) and robots hear their new rate
and routes at their next registration (every 2 s). With `apply_reschedules` off the plan is only
kept as the operator's proposal.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, replace
from typing import Any

from physai_ros.scheduler.factory.types import FactoryProblem, FactorySchedule

SYSTEM1 = "system1"
# A refused robot retries every few seconds; one not heard from for this long is not planned for
# (a plan must not keep capacity for a robot that tried once and went away).
NEWCOMER_TTL_S = 30.0


@dataclass(frozen=True)
class PlanChange:
    """One applied plan: when, why, and what it changed."""

    at: float  # wall time (s since the epoch)
    reason: str
    throughput_before: float  # actions/s planned
    throughput_after: float
    roles: str  # instance -> component after the change

    def line(self) -> str:
        return (f"{time.strftime('%H:%M:%S', time.localtime(self.at))} {self.reason}: "
                f"{self.throughput_before:.2f} -> {self.throughput_after:.2f} actions/s planned; {self.roles}")


class Replanner:
    def __init__(self, runtime: Any, apply: bool = True, time_budget_s: float = 10.0):
        self.rt, self.apply, self.time_budget_s = runtime, apply, time_budget_s
        self.configured_servers = runtime.problem.servers.num_servers
        self.configured_standby = runtime.problem.servers.standby
        self.last: FactorySchedule | None = None  # the latest solve's result, applied or not
        self.solves = 0
        self.changes: deque[PlanChange] = deque(maxlen=64)
        self._lock = threading.Lock()
        self._reasons: list[str] = []
        self._newcomers: dict[str, tuple[str, float]] = {}  # refused robots to plan for: robot -> (task, last seen)
        self._measured = False
        self._thread: threading.Thread | None = None

    def request(self, reason: str, newcomer: tuple[str, str] | None = None, measured: bool = False) -> None:
        """Solve again (in the background) because of `reason`; `newcomer` (robot, task): a robot
        to plan for that the running plan does not hold; measured: plan System 1 on the service
        times measured while serving."""
        with self._lock:
            self._reasons.append(reason)
            if newcomer is not None:
                self._newcomers[newcomer[0]] = (newcomer[1], time.monotonic())
            self._measured |= measured
            if self._thread is not None and self._thread.is_alive():
                return  # the running solve's loop picks it up
            self._thread = threading.Thread(target=self._loop, name="factory_replan", daemon=True)
            self._thread.start()

    def seen(self, robot_id: str) -> None:
        """A refused robot registered again: keep planning for it."""
        with self._lock:
            if robot_id in self._newcomers:
                self._newcomers[robot_id] = (self._newcomers[robot_id][0], time.monotonic())

    def wait(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                t = self._thread
                idle = t is None or not t.is_alive()
            if idle or time.monotonic() > deadline:
                return idle
            t.join(max(0.0, min(0.5, deadline - time.monotonic())))

    def _loop(self) -> None:
        while True:
            with self._lock:
                if not self._reasons:
                    self._thread = None
                    return
                reasons, self._reasons = self._reasons, []
                now = time.monotonic()
                self._newcomers = {r: v for r, v in self._newcomers.items() if now - v[1] <= NEWCOMER_TTL_S}
                newcomers = {r: task for r, (task, _) in self._newcomers.items()}
                measured, self._measured = self._measured, False
            self._solve_and_apply("; ".join(dict.fromkeys(reasons)), newcomers, measured)

    def _solve_and_apply(self, reason: str, newcomers: dict[str, str], measured: bool) -> None:
        from physai_ros.scheduler.factory.solver import solve

        rt = self.rt
        with rt.lock:
            problem, profiles = rt.problem, dict(rt.profiles)
            for robot, task in newcomers.items():
                problem = problem.with_robot(task, robot)
            instances = rt.usable_instances()
            service = rt.online.medians() if measured else None
        if measured and service:
            profiles.update(self._measured_profiles(problem, service))
        standby = min(self.configured_standby, max(0, len(instances) - 1))
        pool = replace(problem.servers, num_servers=min(self.configured_servers, len(instances) - standby),
                       standby=standby)
        problem = replace(problem, servers=pool)
        schedule = solve(problem, profiles, time_budget_s=self.time_budget_s) if pool.num_servers > 0 else \
            FactorySchedule(False, "no usable engine instance left")
        with rt.lock:
            self.last, self.solves = schedule, self.solves + 1
            missing = rt.problem.robot_ids() - problem.robot_ids()
            if missing:  # admitted while solving: plan for them too
                rt.events.append(f"re-plan after {reason}: {', '.join(sorted(missing))} joined meanwhile, solving again")
                with self._lock:
                    self._reasons.append(reason)
                return
            if not schedule.feasible:
                rt.events.append(f"re-plan after {reason}: infeasible ({schedule.reason}); the running plan stays")
                return
            if not self.apply:
                rt.events.append(f"re-plan after {reason}: {schedule.factory_throughput:.2f} actions/s proposed "
                                 "(factory.reschedule: propose)")
                return
            before = rt.schedule.factory_throughput
            serving = [(iid, False) for iid, _ in instances[:pool.num_servers]]
            spare = [(iid, True) for iid, _ in instances[pool.num_servers:]]
            if measured and service:
                rt.profiles.update(profiles)
                rt.online.rebase(service)
            rt.adopt(schedule, problem, serving + spare)
            with self._lock:
                for robot in problem.robot_ids():
                    self._newcomers.pop(robot, None)
            change = PlanChange(time.time(), reason, before, schedule.factory_throughput,
                                ", ".join(f"{iid} {r.component}" + (f" (standby for {r.standby_for})"
                                                                    if r.standby_for else "")
                                          for iid, r in sorted(rt.roles.items())))
            self.changes.append(change)
            rt.events.append(f"plan applied: {change.line()}")
        if rt.on_applied is not None:
            rt.on_applied(change)
        if rt.on_change is not None:
            rt.on_change()

    @staticmethod
    def _measured_profiles(problem: FactoryProblem, service: dict[int, float]) -> dict:
        from physai_ros.scheduler.factory.profiling import profile_from_service_times

        out = {}
        for cls in problem.classes:
            for c in cls.components:
                if c.component == SYSTEM1 and (c.model, problem.servers.hardware) not in out:
                    out[(c.model, problem.servers.hardware)] = profile_from_service_times(
                        c.model, problem.servers.hardware, service, requests=1000,
                        note="System 1 measured while serving")
        return out
