"""A factory schedule (ROSA §3.4) applied to this policy server's engine instances
(docs/factory.md, "Applying a schedule").

The plan's servers are the server's engine instances: its serving servers are the active
instances in build order (local engine_<i>, then server.remote_engines), its hot standbys the
standby ones (local standby_instances, remote entries with `standby: true`). Applying it means:
- placement: System 1 batches go only to instances hosting System 1 (and to a standby while the
  instance it stands in for is down); the VLM components answer on the instance hosting them
  (pipeline.vla_backend on that engine);
- batching: each System 1 instance's batch cap is the plan's batch size;
- rates: every robot learns its System 1 request rate cap and its routes when it registers
  (RegisterRobot's max_request_rate_hz, route_*), and its client sends no faster;
- queues: each System 1 instance has its own queue with the robots the plan routes to it
  (scheduler.routed; serving.plan_binding keeps the core's scheduler and instances in step);
- admission: a robot the plan does not know is admitted placement-preserving when it fits
  (scheduler.factory.admission), or refused with the reason;
- rescheduling (serving.factory_replan): a newcomer, an admitted robot leaving, an instance lost
  with no standby to take its streams, or System 1's measured service times drifting from the
  planned ones start a solve in the background for the robots and instances there are now; a
  feasible plan is applied live (`factory.reschedule: apply`, the default) or kept as the
  operator's proposal (`propose`). Each applied change is recorded with its reason.
"""
from __future__ import annotations

import threading
from collections import Counter, deque
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from physai_ros.config_fields import FleetConfigError
from physai_ros.scheduler.factory.schedule import hosted_components
from physai_ros.scheduler.factory.types import FactoryProblem, FactorySchedule, ModelProfile
from physai_ros.serving.factory_replan import SYSTEM1, PlanChange, Replanner
from physai_ros.serving.online_profile import OnlineServiceTimes


@dataclass(frozen=True)
class InstanceRole:
    instance_id: str
    server: int  # the plan's server index
    component: str
    model: str
    batch: int
    standby_for: str | None = None  # the instance whose streams a hot standby takes over


def bind_servers(schedule: FactorySchedule, instances: Sequence[tuple[str, bool]]) -> dict[str, InstanceRole]:
    """The plan's servers on the engine instances ((instance_id, standby) in build order)."""
    serving = sorted((a for a in schedule.assignments if a.standby_for is None), key=lambda a: a.server)
    standbys = sorted((a for a in schedule.assignments if a.standby_for is not None), key=lambda a: a.server)
    active = [iid for iid, sb in instances if not sb]
    spare = [iid for iid, sb in instances if sb]
    if len(serving) > len(active) or len(standbys) > len(spare):
        raise FleetConfigError(
            f"factory: the plan uses {len(serving)} serving server(s) and {len(standbys)} standby(s), the server "
            f"has {len(active)} active and {len(spare)} standby engine instance(s) (server.engine_instances, "
            "standby_instances, remote_engines)")
    of_server = {a.server: iid for a, iid in zip(serving, active)}
    roles = {iid: InstanceRole(iid, a.server, a.component, a.model, a.batch) for a, iid in zip(serving, active)}
    for a, iid in zip(standbys, spare):
        roles[iid] = InstanceRole(iid, a.server, a.component, a.model, a.batch, of_server.get(a.standby_for))
    return roles


@dataclass(frozen=True)
class PlanAdmission:
    """The plan's word on a registering robot."""

    accepted: bool
    reason: str = ""
    rate_hz: float = 0.0  # its System 1 request rate cap
    routes: tuple[tuple[str, str], ...] = ()  # (component, engine instance)


class FactoryRuntime:
    """The applied schedule and its run-time adaptation: placement-preserving admission at once,
    a re-solved plan applied when demand, capacity or the measured profile changes."""

    def __init__(self, problem: FactoryProblem, profiles: Mapping[tuple[str, str], ModelProfile],
                 schedule: FactorySchedule, instances: Sequence[tuple[str, bool]], *, apply_reschedules: bool = True,
                 planned_service: Mapping[int, float] | None = None, drift_threshold: float = 0.5,
                 per_instance_queues: bool = True):
        if not schedule.feasible:
            raise FleetConfigError(f"factory: no feasible schedule for this server: {schedule.reason}")
        self.problem, self.profiles = problem, dict(profiles)
        self.schedule = schedule
        # False (factory.queues: shared): the routes are advisory, any System 1 instance takes
        # any robot's round from one queue (work-conserving; the plan's loads are what it balances to).
        self.per_instance_queues = per_instance_queues
        self.instances = list(instances)  # (instance id, standby) in build order
        self.roles = bind_servers(schedule, instances)
        self._server_instance = {r.server: iid for iid, r in self.roles.items()}
        self.lock = threading.Lock()
        self.admissions: Counter = Counter()  # planned / admitted / refused / released
        self._startup_robots = problem.robot_ids()  # the plan's steady state (release keeps them)
        self._seen: set[str] = set()  # robots that registered under this plan
        self._proposed_for: dict[str, FactoryProblem] = {}  # robot -> the problem last solved for it
        self.events: deque[str] = deque(maxlen=32)
        self.version = 0  # bumped by every change of schedule (serving.plan_binding follows it)
        self.on_change: Callable[[], None] | None = None  # the core's wake-up, set by the binding
        self.on_applied: Callable[[PlanChange], None] | None = None  # the node logs each applied plan
        self.online = OnlineServiceTimes(planned_service, threshold=drift_threshold)
        self.replanner = Replanner(self, apply_reschedules)
        self._usable: frozenset[str] | None = None

    @property
    def proposed(self) -> FactorySchedule | None:
        return self.replanner.last

    @property
    def proposals_done(self) -> int:
        return self.replanner.solves

    @property
    def changes(self) -> list[PlanChange]:
        return list(self.replanner.changes)

    def wait_for_proposals(self, timeout_s: float) -> bool:
        """Tests and shutdown: wait for the background solves started so far."""
        return self.replanner.wait(timeout_s)

    # ---- placement and batching (read by the serving core under its lock) -----------------

    def action_instances(self, usable: Callable[[str], bool]) -> set[str]:
        """Instances that take System 1 batches now: its planned hosts, and a standby of one
        that is down (§3.4.4: the route moves to the warm standby, no new schedule)."""
        with self.lock:
            return {iid for iid, r in self.roles.items() if r.component == SYSTEM1
                    and (r.standby_for is None or not usable(r.standby_for))}

    def serving_lanes(self, usable: Callable[[str], bool]) -> dict[str, str]:
        """Instance -> the System 1 queue it serves: its own, or for a standby standing in, the
        queue of the instance it replaces (scheduler.routed). {} with one shared queue."""
        with self.lock:
            out = {}
            if not self.per_instance_queues:
                return out
            for iid, r in self.roles.items():
                if r.component != SYSTEM1:
                    continue
                if r.standby_for is None:
                    out[iid] = iid
                elif not usable(r.standby_for):
                    out[iid] = r.standby_for
            return out

    def lane_routes(self, usable: Callable[[str], bool]) -> dict[str, str]:
        """Robot -> its System 1 queue (the planned instance). A robot whose instance is down
        with no standby serving it goes, until the new plan is applied, to the live System 1
        instance with the fewest robots (never left without a queue anyone serves). {} with one
        shared queue."""
        with self.lock:
            if not self.per_instance_queues:
                return {}
            hosts = [iid for iid, r in sorted(self.roles.items(), key=lambda x: x[1].server)
                     if r.component == SYSTEM1 and r.standby_for is None]
            covered = {r.standby_for for iid, r in self.roles.items() if r.standby_for and usable(iid)}
            live = [iid for iid in hosts if usable(iid) or iid in covered]
            out, load = {}, Counter({iid: 0 for iid in live})
            orphans = []
            for route in self.schedule.routes:
                if route.component != SYSTEM1:
                    continue
                iid = self._server_instance.get(route.server)
                if iid in load:
                    out[route.robot_id] = iid
                    load[iid] += 1
                else:
                    orphans.append(route.robot_id)
            for robot in orphans:
                if load:
                    to = min(load, key=lambda i: (load[i], hosts.index(i)))
                    out[robot] = to
                    load[to] += 1
            return out

    def instances_hosting(self, components: Sequence[str]) -> list[str]:
        """Serving instances hosting any of `components`, in the plan's server order."""
        with self.lock:
            return [iid for _, iid in sorted((r.server, iid) for iid, r in self.roles.items() if r.standby_for is None
                                             and set(hosted_components(r.component)) & set(components))]

    def route_instance(self, robot_id: str, component: str) -> str | None:
        """The instance the plan routes this robot's `component` requests to (None: no route)."""
        with self.lock:
            r = self.schedule.route(robot_id, component)
            return self._server_instance.get(r.server) if r is not None else None

    def batch_cap(self, instance_id: str) -> int | None:
        with self.lock:
            r = self.roles.get(instance_id)
            return r.batch if r is not None and r.component == SYSTEM1 else None

    # ---- what the server sees change ------------------------------------------------------

    def instances_changed(self, usable: frozenset[str]) -> None:
        """The set of usable instances changed (serving.plan_binding): a serving instance lost
        with no standby taking it over, or capacity back that the plan could use, is a new
        plan. A standby taking over is not (§3.4.4)."""
        with self.lock:
            before, self._usable = self._usable, usable
            if before is None:
                return
            covered = {r.standby_for for iid, r in self.roles.items() if r.standby_for and iid in usable}
            lost = sorted(iid for iid, r in self.roles.items()
                          if r.standby_for is None and iid not in usable and iid not in covered)
            gained = sorted(usable - before - set(self.roles))
            serving = sum(r.standby_for is None for r in self.roles.values())
        if lost:
            self.replanner.request(f"instance {', '.join(lost)} lost with no standby to take its streams")
        elif gained and serving < self.replanner.configured_servers:
            self.replanner.request(f"instance {', '.join(gained)} usable again")

    def observe_batch(self, instance_id: str, batch: int, service_s: float) -> None:
        """A System 1 batch served: its service time goes into the online profile; a drift
        beyond the threshold re-plans with the measured times."""
        with self.lock:
            r = self.roles.get(instance_id)
            if r is None or r.component != SYSTEM1:
                return
            why = self.online.observe(batch, service_s)
            if why is not None:
                self.online.rebase(self.online.medians())  # one re-plan per drift, not per batch
        if why is not None:
            self.replanner.request(why, measured=True)

    def usable_instances(self) -> list[tuple[str, bool]]:
        """The instances a new plan may use: the usable ones (all, before any change was seen),
        active ones first, each with its standby flag."""
        usable = self._usable
        keep = [(iid, sb) for iid, sb in self.instances if usable is None or iid in usable]
        return [x for x in keep if not x[1]] + [x for x in keep if x[1]]

    def adopt(self, schedule: FactorySchedule, problem: FactoryProblem, instances: Sequence[tuple[str, bool]]) -> None:
        """Under the lock (the replanner): run `schedule` from now on."""
        self.roles = bind_servers(schedule, instances)
        self._server_instance = {r.server: iid for iid, r in self.roles.items()}
        self.schedule, self.problem = schedule, problem
        self.version += 1

    # ---- robots ---------------------------------------------------------------------------

    def register(self, robot_id: str, task: str) -> PlanAdmission:
        with self.lock:
            known = self.schedule.route(robot_id, SYSTEM1) is not None
            if not known:
                if task not in {c.name for c in self.problem.classes}:
                    self.admissions["refused"] += 1
                    return PlanAdmission(False, f"factory_schedule: task {task!r} is not in the plan "
                                                f"(planned: {', '.join(c.name for c in self.problem.classes)})")
                from physai_ros.scheduler.factory.admission import admit

                # Placement-preserving admission answers the registration now; the global
                # rescheduling with this robot runs in the background (a solve can take seconds).
                decision = admit(self.schedule, self.problem, self.profiles, task, robot_id, resolve=False)
                bigger = self.problem.with_robot(task, robot_id)
                if self._proposed_for.get(robot_id) != bigger:  # a refused robot retries every few seconds
                    self._proposed_for[robot_id] = bigger
                    self.replanner.request(f"robot {robot_id} ({task}) joined beyond the plan",
                                           newcomer=(robot_id, task))
                else:
                    self.replanner.seen(robot_id)
                if not decision.admitted:
                    self.admissions["refused"] += 1
                    self.events.append(f"refused {robot_id} ({task}): {decision.reason}")
                    return PlanAdmission(False, f"factory_schedule: {decision.reason}")
                self.schedule = decision.schedule
                self.problem = bigger
                self.version += 1
                self.admissions["admitted"] += 1
                self.events.append(f"admitted {robot_id} ({task}) placement-preserving: {decision.reason}")
            elif robot_id not in self._seen:  # keep-alive re-registrations are not counted again
                self.admissions["planned"] += 1
            self._seen.add(robot_id)
            routes = tuple((r.component, self._server_instance.get(r.server, f"server_{r.server}"))
                           for r in self.schedule.routes if r.robot_id == robot_id)
            s1 = self.schedule.route(robot_id, SYSTEM1)
            return PlanAdmission(True, "", float(s1.rate_hz) if s1 is not None else 0.0, routes)

    def release(self, robot_id: str) -> bool:
        """A robot the start-up plan did not hold left (or its registration was refused after the
        plan took it): its routes and load go at once, and a new plan for the robots left is
        solved. The start-up plan's robots keep theirs: that plan is the steady state they return to."""
        from physai_ros.scheduler.factory.admission import release

        with self.lock:
            if robot_id in self._startup_robots or self.schedule.route(robot_id, SYSTEM1) is None:
                return False
            self.schedule = release(self.schedule, robot_id, self.problem)
            self.problem = self.problem.without_robot(robot_id)
            self._proposed_for.pop(robot_id, None)
            self.version += 1
            self.admissions["released"] += 1
            self.events.append(f"released {robot_id}")
        self.replanner.request(f"robot {robot_id} left")
        return True

    def summary(self) -> str:
        s = self.schedule
        rates = ", ".join(f"{k} {v:.2f} Hz" for k, v in s.action_rate_hz.items())
        roles = ", ".join(f"{iid} {r.component}" + (f" (standby for {r.standby_for})" if r.standby_for else "")
                          for iid, r in sorted(self.roles.items()))
        return f"{roles}; action rates {rates}; {s.factory_throughput:.2f} actions/s planned"

    def role(self, instance_id: str) -> str:
        r = self.roles.get(instance_id)
        if r is None:
            return "unused by the plan"
        return f"{r.component} ({r.model}, batch {r.batch})" + (f", standby for {r.standby_for}" if r.standby_for else "")

    def diagnostics(self) -> dict[str, Any]:
        with self.lock:
            s = self.schedule
            return {
                "factory_throughput": round(s.factory_throughput, 3),
                "action_rate_hz": {k: round(v, 3) for k, v in s.action_rate_hz.items()},
                "instances": {iid: f"{r.component}:{r.model} b{r.batch}"
                              + (f" standby for {r.standby_for}" if r.standby_for else "")
                              for iid, r in sorted(self.roles.items())},
                "admissions": dict(self.admissions),
                "proposed_throughput": (round(self.proposed.factory_throughput, 3)
                                        if self.proposed is not None else None),
                "plan_changes": len(self.replanner.changes),
                "last_plan_change": self.replanner.changes[-1].line() if self.replanner.changes else "",
                "recent_plan_changes": [c.line() for c in list(self.replanner.changes)[-5:]],
                "online_service_ms": {b: round(t * 1e3, 2) for b, t in sorted(self.online.medians().items())},
                "events": list(self.events)[-5:],
            }
