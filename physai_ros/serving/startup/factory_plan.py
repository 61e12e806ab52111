"""The factory plan at the policy server's start-up (docs/factory.md, "Applying a schedule"):
fleet.yaml's factory block, its profiles file, this server's own start-up measurements of
System 1 and of the components its backbone answers, the solve, and the plan bound to the
engine instances (serving.factory_runtime runs and adapts it from there)."""
from __future__ import annotations

import time
from typing import Any, Sequence

from physai_ros.scheduler.factory.types import FactoryProblem, ModelProfile
from physai_ros.serving.factory_runtime import SYSTEM1, FactoryRuntime


def measured_service(core: Any, measured: Sequence[str]) -> dict[int, float]:
    """System 1's batch service times from the start-up latency-vs-batch measurement of the
    local engines (workers.profiling; the slowest instance's per batch size)."""
    service: dict[int, float] = {}
    for iid in measured:
        slot = core.engines[iid]
        for b, t in zip(slot.profile.batch_sizes, slot.profile.latencies_s):
            service[int(b)] = max(service.get(int(b), 0.0), float(t))
    return service


def measured_profiles(service: dict[int, float], model: str, hardware: str) -> dict[tuple[str, str], ModelProfile]:
    """System 1's L(b, lambda) from its measured service times, queueing simulated
    (scheduler.factory.profiling). {} when nothing was measured."""
    from physai_ros.scheduler.factory.profiling import profile_from_service_times

    if not service:
        return {}
    return {(model, hardware): profile_from_service_times(
        model, hardware, service, note="System 1 measured at this server's start-up")}


def measured_component_profiles(core: Any, fleet: Any, problem: FactoryProblem, hardware: str,
                                batch_sizes: Sequence[int] = (1, 2, 4)) -> dict[tuple[str, str], ModelProfile]:
    """The VLM components the served model's backbone answers (`model: vla`): their batch service
    times timed on a local engine at start-up (own prefill, a blank frame per camera, the
    component's own question, up to 8 answer tokens), queueing simulated. {} without a local engine
    or without such a component (the backbone backend is then never built: an engine built
    without language decoding could not answer)."""
    import numpy as np

    from physai_ros.pipeline.backend import ComponentQuery
    from physai_ros.pipeline.vla_backend import VLABackboneBackend
    from physai_ros.scheduler.factory.profiling import profile_from_service_times
    from physai_ros.scheduler.factory.types import CONTINUOUS

    local = [iid for iid, slot in core.engines.items() if not slot.remote]
    jobs = [(cls, fleet.tasks[cls.name], comp, cls.component(comp.name)) for cls in problem.classes
            for comp in (fleet.tasks[cls.name].pipeline.vlm_components if fleet.tasks[cls.name].pipeline else ())
            if comp.model == "vla" and cls.component(comp.name) is not None]
    if not local or not jobs:
        return {}
    backend = VLABackboneBackend.from_core(core, instance_id=local[0], attach=False)
    out: dict[tuple[str, str], ModelProfile] = {}
    for cls, task, comp, spec in jobs:
        if (spec.model, hardware) in out:
            continue
        robot = next((r for r in fleet.robots if r.task.name == cls.name), None)
        views, hw = (robot.num_views, (robot.image_height, robot.image_width)) if robot else (1, (224, 224))
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
    service = measured_service(core, measured)
    profiles.update(measured_profiles(service, s1_model, factory.hardware))
    if measured:  # server.profile on: the components the backbone answers are measured too
        profiles.update(measured_component_profiles(core, fleet, problem, factory.hardware))
    check_profiles(problem, profiles)
    schedule = solve(problem, profiles, time_budget_s=time_budget_s)
    instances = [(iid, slot.standby) for iid, slot in core.engines.items()]
    runtime = FactoryRuntime(problem, profiles, schedule, instances, apply_reschedules=factory.reschedule == "apply",
                             planned_service=service or None, drift_threshold=factory.profile_drift,
                             per_instance_queues=factory.queues == "per_instance")
    core.apply_factory(runtime)
    return runtime
