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
- admission: a robot the plan does not know is admitted placement-preserving when it fits
  (scheduler.factory.admission), or refused with the reason; either way a background
  rescheduling is proposed (kept in diagnostics, never applied behind the operator's back).
System 1 requests of robots routed to different System 1 instances share the scheduler's queue:
any System 1 instance takes any of them (for equal configurations that is never slower than a
fixed route; the plan's per-server loads are what the queue balances to).
"""
from __future__ import annotations

import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, Sequence

from physai_ros.config_fields import FleetConfigError
from physai_ros.scheduler.factory.schedule import hosted_components
from physai_ros.scheduler.factory.types import FactoryProblem, FactorySchedule, ModelProfile

SYSTEM1 = "system1"


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


def with_robot(problem: FactoryProblem, task: str, robot_id: str) -> FactoryProblem:
    """The problem with one more robot in class `task` (unchanged when it is listed already)."""
    classes = tuple(replace(c, robot_ids=c.robot_ids + (robot_id,))
                    if c.name == task and robot_id not in c.robot_ids else c for c in problem.classes)
    return replace(problem, classes=classes)


def without_robot(problem: FactoryProblem, robot_id: str) -> FactoryProblem:
    """The problem with `robot_id` gone from every class."""
    classes = tuple(replace(c, robot_ids=tuple(r for r in c.robot_ids if r != robot_id)) for c in problem.classes)
    return replace(problem, classes=classes)


class FactoryRuntime:
    """The applied schedule and its run-time adaptation (placement-preserving admission)."""

    def __init__(self, problem: FactoryProblem, profiles: Mapping[tuple[str, str], ModelProfile],
                 schedule: FactorySchedule, instances: Sequence[tuple[str, bool]]):
        if not schedule.feasible:
            raise FleetConfigError(f"factory: no feasible schedule for this server: {schedule.reason}")
        self.problem, self.profiles = problem, profiles
        self.schedule = schedule
        self.roles = bind_servers(schedule, instances)
        self._server_instance = {r.server: iid for iid, r in self.roles.items()}
        self._lock = threading.Lock()
        self.admissions: Counter = Counter()  # planned / admitted / refused / released
        self._admitted: set[str] = set()  # robots admitted beyond the plan, still routed
        self._seen: set[str] = set()  # robots that registered under this plan
        self.proposed: FactorySchedule | None = None  # a background rescheduling, for the operator
        self.proposals_done = 0
        self._proposers: list[threading.Thread] = []
        self._proposed_for: dict[str, FactoryProblem] = {}  # robot -> the problem last solved for it
        self.events: deque[str] = deque(maxlen=32)

    # ---- placement and batching (read by the serving core under its lock) -----------------

    def action_instances(self, usable: Callable[[str], bool]) -> set[str]:
        """Instances that take System 1 batches now: its planned hosts, and a standby of one
        that is down (§3.4.4: the route moves to the warm standby, no new schedule)."""
        out = set()
        for iid, r in self.roles.items():
            if r.component != SYSTEM1:
                continue
            if r.standby_for is None or not usable(r.standby_for):
                out.add(iid)
        return out

    def instances_hosting(self, components: Sequence[str]) -> list[str]:
        """Serving instances hosting any of `components`, in the plan's server order."""
        return [iid for _, iid in sorted((r.server, iid) for iid, r in self.roles.items() if r.standby_for is None
                                         and set(hosted_components(r.component)) & set(components))]

    def route_instance(self, robot_id: str, component: str) -> str | None:
        """The instance the plan routes this robot's `component` requests to (None: no route)."""
        with self._lock:
            r = self.schedule.route(robot_id, component)
            return self._server_instance.get(r.server) if r is not None else None

    def batch_cap(self, instance_id: str) -> int | None:
        r = self.roles.get(instance_id)
        return r.batch if r is not None and r.component == SYSTEM1 else None

    # ---- robots ---------------------------------------------------------------------------

    def register(self, robot_id: str, task: str) -> PlanAdmission:
        with self._lock:
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
                bigger = with_robot(self.problem, task, robot_id)
                if self._proposed_for.get(robot_id) != bigger:  # a refused robot retries every few seconds
                    self._proposed_for[robot_id] = bigger
                    self._propose(bigger, robot_id)
                if not decision.admitted:
                    self.admissions["refused"] += 1
                    self.events.append(f"refused {robot_id} ({task}): {decision.reason}")
                    return PlanAdmission(False, f"factory_schedule: {decision.reason}")
                self.schedule = decision.schedule
                self.problem = with_robot(self.problem, task, robot_id)
                self._admitted.add(robot_id)
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
        """A robot admitted beyond the plan left (or its registration was refused after the plan
        admitted it): its routes and load go, so the next newcomer finds the room. The planned
        robots keep theirs: the plan is the steady state they return to."""
        from physai_ros.scheduler.factory.admission import release

        with self._lock:
            if robot_id not in self._admitted:
                return False
            self._admitted.discard(robot_id)
            self.schedule = release(self.schedule, robot_id, self.problem)
            self.problem = without_robot(self.problem, robot_id)
            self.admissions["released"] += 1
            self.events.append(f"released {robot_id}")
            return True

    def _propose(self, problem: FactoryProblem, robot_id: str) -> None:
        """Solve the bigger problem in the background and keep it as the operator's proposal
        (never applied here: moving models between instances is the operator's call)."""
        def run():
            from physai_ros.scheduler.factory.solver import solve

            proposal = solve(problem, self.profiles)
            with self._lock:
                self.proposed = proposal
                self.proposals_done += 1
                self.events.append(f"rescheduling proposed after {robot_id}: "
                                   + (f"{proposal.factory_throughput:.2f} actions/s" if proposal.feasible
                                      else f"infeasible ({proposal.reason})"))

        t = threading.Thread(target=run, name="factory_reschedule", daemon=True)
        # Finished solves are dropped: a long-running server meets many newcomers.
        self._proposers = [p for p in self._proposers if p.is_alive()] + [t]
        t.start()

    def wait_for_proposals(self, timeout_s: float) -> bool:
        """Tests and shutdown: wait for the background reschedulings started so far."""
        for t in list(self._proposers):
            t.join(timeout_s)
        return not any(t.is_alive() for t in self._proposers)

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
        with self._lock:
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
                "events": list(self.events)[-5:],
            }


def measured_profiles(core: Any, measured: Sequence[str], model: str,
                      hardware: str) -> dict[tuple[str, str], ModelProfile]:
    """System 1's L(b, lambda) from the start-up latency-vs-batch measurement of the local
    engines (workers.profiling; the slowest instance's per batch size), queueing simulated
    (scheduler.factory.profiling). {} when nothing was measured."""
    from physai_ros.scheduler.factory.profiling import profile_from_service_times

    service: dict[int, float] = {}
    for iid in measured:
        slot = core.engines[iid]
        for b, t in zip(slot.profile.batch_sizes, slot.profile.latencies_s):
            service[int(b)] = max(service.get(int(b), 0.0), float(t))
    if not service:
        return {}
    return {(model, hardware): profile_from_service_times(
        model, hardware, service, note="System 1 measured at this server's start-up")}


def measured_component_profiles(core: Any, fleet: Any, problem: FactoryProblem, hardware: str,
                                batch_sizes: Sequence[int] = (1, 2, 4)) -> dict[tuple[str, str], ModelProfile]:
    """The VLM components the served model's backbone answers (`model: vla`): their batch service
    times timed on a local engine at start-up (own prefill, a blank frame per camera, the
    component's own question, up to 8 answer tokens), queueing simulated. {} without a local engine."""
    import numpy as np

    from physai_ros.pipeline.backend import ComponentQuery
    from physai_ros.pipeline.vla_backend import VLABackboneBackend
    from physai_ros.scheduler.factory.profiling import profile_from_service_times
    from physai_ros.scheduler.factory.types import CONTINUOUS

    local = [iid for iid, slot in core.engines.items() if not slot.remote]
    if not local:
        return {}
    backend = VLABackboneBackend.from_core(core, instance_id=local[0], attach=False)
    out: dict[tuple[str, str], ModelProfile] = {}
    for cls in problem.classes:
        task = fleet.tasks[cls.name]
        robot = next((r for r in fleet.robots if r.task.name == cls.name), None)
        views, hw = (robot.num_views, (robot.image_height, robot.image_width)) if robot else (1, (224, 224))
        for comp in (task.pipeline.vlm_components if task.pipeline is not None else ()):
            spec = cls.component(comp.name)
            if comp.model != "vla" or spec is None or (spec.model, hardware) in out:
                continue
            q = ComponentQuery("__profile__", comp.name, comp.prompt.replace("{task}", task.prompt), task.prompt,
                               tuple(np.zeros((*hw, 3), np.uint8) for _ in range(views)), None, 8)
            backend.answer([q])  # warm-up
            service = {}
            for b in batch_sizes:
                t0 = time.perf_counter()
                backend.answer([q] * b)
                service[b] = time.perf_counter() - t0
            out[(spec.model, hardware)] = profile_from_service_times(
                spec.model, hardware, service, batching=CONTINUOUS,
                note=f"{comp.name} on the served backbone, measured at this server's start-up")
    backend.close()
    return out


def apply_factory(core: Any, fleet: Any, measured: Sequence[str] = (),
                  time_budget_s: float = 10.0) -> FactoryRuntime | None:
    """Plan with fleet.yaml's factory block (profiles from its file; with the start-up measurement
    of the `measured` instances, System 1's and the backbone-answered components' replaced by
    this server's own) and apply the plan to `core`. None without `factory.apply`."""
    factory = getattr(fleet, "factory", None)
    if factory is None or not factory.apply:
        return None
    from physai_ros.scheduler.factory.solver import solve

    from physai_ros.config.fleet import fleet_dir, resolve_package_path
    from physai_ros.config.factory import check_profiles, factory_problem, load_profiles

    problem = factory_problem(fleet)
    profiles = load_profiles(resolve_package_path(factory.profiles, fleet_dir(fleet))) if factory.profiles else {}
    s1_model = next(c.model for c in problem.classes[0].components if c.component == SYSTEM1)
    profiles.update(measured_profiles(core, measured, s1_model, factory.hardware))
    if measured:  # server.profile on: the components the backbone answers are measured too
        profiles.update(measured_component_profiles(core, fleet, problem, factory.hardware))
    check_profiles(problem, profiles)
    schedule = solve(problem, profiles, time_budget_s=time_budget_s)
    instances = [(iid, slot.standby) for iid, slot in core.engines.items()]
    runtime = FactoryRuntime(problem, profiles, schedule, instances)
    core.apply_factory(runtime)
    return runtime
