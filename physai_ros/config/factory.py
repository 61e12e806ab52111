"""fleet.yaml's `factory:` block (ROSA Figure 3 Parts 1-2, §3.4; docs/factory.md): the server
cluster to plan for, the profiles to plan with, how many robots run each task, and the factory
objective's weights (eq. 1). `factory_problem` turns it and the tasks' pipelines into the
scheduler's FactoryProblem (physai_ros.scheduler.factory.types).

    factory:
      servers: 8                 # serving servers (GPUs, engine instances); standbys extra
      hardware: H100             # the profiles' hardware key
      standby: 1                 # hot standbys kept loaded and off the routes (§3.4.4)
      memory_gb: 80              # per server (optional)
      profiles: profiles.json    # ModelProfile list (bench/physai_bench/factory/profiles.py writes one)
      models: {system1: pi0, system2: qwen2.5-vl-7b, safety: qwen2.5-vl-3b, monitor: qwen2.5-vl-7b}
      robots: {pick_place_monitored: 16, place_in_order: 16}   # default: the robots list
      value_weights: {place_in_order: 2.0}                     # v_c, default 1
      min_action_throughput: {pick_place_monitored: 20}        # F_c^min, actions/s, default 0
      apply: false               # true: the policy server plans at start-up and runs the plan
      reschedule: apply          # a re-solved plan (robots join or leave, an instance is lost,
                                 # System 1's measured times drift) is applied; propose: only shown
      profile_drift: 0.5         # how far (a fraction) measured System 1 times may drift from the plan's
      queues: per_instance       # each System 1 instance serves only its planned robots; shared: any
                                 # System 1 instance takes any robot's round (work-conserving)

A task's t_act is its pipeline's `action_period_ms` (ROSA line 44), which factory planning needs
for every planned task; System 2's ratio H is `system2_to_system1_call_ratio`.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from physai_ros.config_fields import FleetConfigError, boolean, integer, mapping, no_unknown, number, required, string
from physai_ros.scheduler.factory.types import (COMPONENTS, ComponentSpec, FactoryProblem, ModelProfile,
                                                ServerPool, TaskClass)

FACTORY_KEYS = {"servers", "hardware", "standby", "memory_gb", "profiles", "models", "robots", "value_weights",
                "min_action_throughput", "slo_quantile", "apply", "reschedule", "profile_drift", "queues"}
RESCHEDULE = ("apply", "propose")
QUEUES = ("per_instance", "shared")


@dataclass(frozen=True)
class FactoryConfig:
    servers: int
    hardware: str
    standby: int = 0
    memory_gb: float = math.inf
    profiles: str | None = None  # as written; resolved against the fleet file's directory
    models: Mapping[str, str] = field(default_factory=dict)  # component -> profile model
    robots: Mapping[str, int] = field(default_factory=dict)  # task -> planned robot count
    value_weights: Mapping[str, float] = field(default_factory=dict)
    min_action_throughput: Mapping[str, float] = field(default_factory=dict)
    slo_quantile: float = 0.99
    # The policy server plans at start-up and runs the plan on its engine instances
    # (serving.factory_runtime); false: the block is for `physai-fleet plan` only.
    apply: bool = False
    reschedule: str = "apply"  # RESCHEDULE: what the running server does with a re-solved plan
    profile_drift: float = 0.5
    queues: str = "per_instance"  # QUEUES: whether the plan's routes decide where rounds run


def parse_factory(d: Any, task_names: set[str]) -> FactoryConfig | None:
    if d is None:
        return None
    p = "factory"
    d = mapping(d, p)
    no_unknown(d, FACTORY_KEYS, p)

    def per_task(key: str, conv) -> dict:
        v = mapping(d.get(key, {}), f"{p}.{key}")
        for t in v:
            if t not in task_names:
                raise FleetConfigError(f"{p}.{key}.{t}: no such task (tasks: {', '.join(sorted(task_names))})")
        return {str(t): conv(x, f"{p}.{key}.{t}") for t, x in v.items()}

    models = mapping(d.get("models", {}), f"{p}.models")
    for c in models:
        if c not in COMPONENTS:
            raise FleetConfigError(f"{p}.models.{c}: expected one of {', '.join(COMPONENTS)}")
    quantile = number(d.get("slo_quantile", 0.99), f"{p}.slo_quantile")
    if quantile >= 1:
        raise FleetConfigError(f"{p}.slo_quantile: expected a fraction below 1 (0.99 for p99), got {quantile}")
    return FactoryConfig(
        servers=integer(required(d, "servers", p), f"{p}.servers", lo=1),
        hardware=string(required(d, "hardware", p), f"{p}.hardware"),
        standby=integer(d.get("standby", 0), f"{p}.standby", lo=0),
        memory_gb=number(d["memory_gb"], f"{p}.memory_gb") if "memory_gb" in d else math.inf,
        profiles=string(d["profiles"], f"{p}.profiles") if "profiles" in d else None,
        models={str(c): string(m, f"{p}.models.{c}") for c, m in models.items()},
        robots=per_task("robots", lambda v, path: integer(v, path, lo=0)),
        value_weights=per_task("value_weights", lambda v, path: number(v, path)),
        min_action_throughput=per_task("min_action_throughput", lambda v, path: number(v, path, allow_zero=True)),
        slo_quantile=quantile,
        apply=boolean(d.get("apply", False), f"{p}.apply"),
        reschedule=string(d.get("reschedule", "apply"), f"{p}.reschedule", RESCHEDULE),
        profile_drift=number(d.get("profile_drift", 0.5), f"{p}.profile_drift"),
        queues=string(d.get("queues", "per_instance"), f"{p}.queues", QUEUES),
    )


def load_profiles(path: Path) -> dict[tuple[str, str], ModelProfile]:
    """A JSON profile file: {"profiles": [ModelProfile.to_dict(), ...]} (or the bare list)."""
    try:
        doc = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise FleetConfigError(f"factory.profiles: {path}: no such file") from None
    except (OSError, ValueError) as e:
        raise FleetConfigError(f"factory.profiles: {path}: not a readable JSON file ({e})") from None
    items = doc.get("profiles") if isinstance(doc, dict) else doc
    if not isinstance(items, list) or not items:
        raise FleetConfigError(f"factory.profiles: {path}: expected a non-empty 'profiles' list")
    out = {}
    for i, item in enumerate(items):
        try:
            prof = ModelProfile.from_dict(item)
        except (TypeError, KeyError) as e:
            raise FleetConfigError(f"factory.profiles: {path}: profiles[{i}]: not a ModelProfile ({e})") from None
        out[(prof.model, prof.hardware)] = prof
    return out


def _component_model(factory: FactoryConfig, component: str, written: str, task: str) -> str:
    """The profile model serving a component: factory.models wins (the model it will run on the
    planned cluster); otherwise the model as the task writes it."""
    m = factory.models.get(component)
    if m:
        return m
    if written in ("", "vla"):
        raise FleetConfigError(f"factory.models.{component}: required to plan tasks.{task} (its {component} "
                               f"is {written or 'the served VLA'!r}; name the profile model that serves it)")
    return written


def factory_problem(fleet: Any, factory: FactoryConfig | None = None) -> FactoryProblem:
    """The FactoryProblem of a FleetConfig with a `factory:` block. Robot ids: the listed robots
    of each task, then <task>_<k> up to factory.robots[task]."""
    factory = factory if factory is not None else getattr(fleet, "factory", None)
    if factory is None:
        raise FleetConfigError(f"{fleet.source}: no factory: block (servers, hardware, profiles; docs/factory.md)")
    listed: dict[str, list[str]] = {}
    for r in fleet.robots:
        listed.setdefault(r.task.name, []).append(r.id)
    classes = []
    for name, task in fleet.tasks.items():
        ids = list(listed.get(name, []))
        want = factory.robots.get(name, len(ids))
        ids = ids[:want] + [f"{name}_{k}" for k in range(len(ids), want)]
        if not ids:
            continue
        pipe = task.pipeline
        if pipe is None or pipe.action_period_ms is None:
            raise FleetConfigError(f"tasks.{name}.pipeline.action_period_ms: required to plan the factory "
                                   "(ROSA's t_act, the execution time of one System 1 prediction)")
        comps = [ComponentSpec("system1", _component_model(factory, "system1", "", name), task.slo_ms / 1e3,
                               slo_quantile=factory.slo_quantile)]
        for c in pipe.vlm_components:
            written = c.model if isinstance(c.model, str) else Path(c.model.path).name
            comps.append(ComponentSpec(c.name, _component_model(factory, c.name, written, name), c.slo_s,
                                       freq_hz=c.freq_hz, slo_quantile=factory.slo_quantile))
        classes.append(TaskClass(name=name, robot_ids=tuple(ids), components=tuple(comps),
                                 action_period_s=pipe.action_period_ms / 1e3,
                                 system2_ratio=pipe.system2_to_system1_call_ratio or 1,
                                 value_weight=factory.value_weights.get(name, 1.0),
                                 min_throughput=factory.min_action_throughput.get(name, 0.0)))
    if not classes:
        raise FleetConfigError("factory.robots: no robot to plan for (every task has 0 robots)")
    return FactoryProblem(classes=tuple(classes),
                          servers=ServerPool(num_servers=factory.servers, hardware=factory.hardware,
                                             standby=factory.standby, memory_gb=factory.memory_gb))


def check_profiles(problem: FactoryProblem, profiles: Mapping[tuple[str, str], ModelProfile]) -> None:
    """Every (model, hardware) the problem needs has a profile (FleetConfigError naming them)."""
    hw = problem.servers.hardware
    missing = sorted({c.model for cls in problem.classes for c in cls.components if (c.model, hw) not in profiles})
    if missing:
        have = ", ".join(sorted(f"{m}@{h}" for m, h in profiles)) or "none"
        raise FleetConfigError(f"factory.profiles: no profile for {', '.join(m + '@' + hw for m in missing)} "
                               f"(the file has {have})")
