"""fleet.yaml's task pipeline keys (ROSA Figure 3; docs/pipelines.md "fleet.yaml"): `pipeline`,
`task_retry`, `safety_and_slo_violation` and `components`, as frozen dataclasses.

`parse_task_pipeline` is called by config.fleet for each task. System 1's SLO, fallback,
prompt and violation policy may be written at task level or in the pipeline keys; config.fleet
passes the task-level values in (`TaskLevel`) and `parse_task_pipeline` reconciles them, so there
is one value of each, and a conflict names both key paths.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping, Union

from physai_ros.config_fields import (FleetConfigError, integer, join_key, mapping, no_unknown, number, required,
                                      string)
from physai_ros.pipeline.grasp_watch import GRASP_LOST_ACTIONS, GraspWatchConfig
from physai_ros.protocol.component import COMPONENTS

PIPELINE_KEYS = ("pipeline", "task_retry", "safety_and_slo_violation", "components")
ESCALATION_POLICIES = ("stop_and_call_human",)
HF_DEVICES = ("cpu", "cuda", "auto")
# Which fallbacks make sense where (docs/pipelines.md): `use_last_plan` needs a plan (System 1's
# chunk, System 2's subgoal); `stop_and_replan` is the pipeline's, System 1's are the robot
# client's (control/deadline.py). The first entry is the default.
FALLBACKS_BY_COMPONENT: Mapping[str, tuple[str, ...]] = {
    "system1": ("hold", "stop_and_resend", "use_last_plan"),
    "system2": ("use_last_plan", "stop_and_replan", "hold", "stop_and_resend"),
    "safety": ("stop_and_replan", "hold", "stop_and_resend"),
    "monitor": ("stop_and_resend", "hold"),
}
PERIODIC = ("safety", "monitor")
VLA_MODEL = "vla"


@dataclass(frozen=True)
class HfModel:
    """A Hugging Face transformers VLM in a local directory (kept as written in fleet.yaml)."""

    path: str
    device: str = "auto"  # cpu | cuda | auto (CUDA where present)


TASK_SLOT = "{task}"  # in a component's prompt: the robot's task prompt, filled in before asking


def fill_task(prompt: str, task_prompt: str) -> str:
    """The question a component is asked: its prompt with {task} replaced by the task's prompt."""
    return prompt.replace(TASK_SLOT, task_prompt)


ModelSpec = Union[str, HfModel]  # "vla": the served VLA's backbone via the language stream


@dataclass(frozen=True)
class ComponentConfig:
    name: str  # system1 | system2 | safety | monitor
    model: ModelSpec
    prompt: str  # may hold "{task}", replaced by the task's prompt when asked
    slo_ms: float
    fallback: str
    freq_hz: float | None = None  # safety and monitor only

    @property
    def slo_s(self) -> float:
        return self.slo_ms / 1e3

    @property
    def period_s(self) -> float | None:
        return None if self.freq_hz is None else 1.0 / self.freq_hz

    def question(self, task_prompt: str) -> str:
        return fill_task(self.prompt, task_prompt)


@dataclass(frozen=True)
class TaskPipelineConfig:
    system1: ComponentConfig
    system2: ComponentConfig | None = None
    safety: ComponentConfig | None = None
    monitor: ComponentConfig | None = None
    action_period_ms: float | None = None  # ROSA t_act
    system2_to_system1_call_ratio: int | None = None  # set exactly when system2 is
    max_task_retries: int = 3
    on_max_task_retries: str = "stop_and_call_human"
    grasp_watch: GraspWatchConfig | None = GraspWatchConfig()  # None: `task_retry.grasp_watch: off`
    max_consecutive_safety_replan: int = 10
    max_consecutive_slo_violation: int = 3
    on_max_violation: str = "stop_and_call_human"

    def component(self, name: str) -> ComponentConfig | None:
        return getattr(self, name) if name in COMPONENTS else None

    @property
    def vlm_components(self) -> tuple[ComponentConfig, ...]:
        """The configured System 2, safety and monitor, in that order."""
        return tuple(c for c in (self.system2, self.safety, self.monitor) if c is not None)


@dataclass(frozen=True)
class TaskLevel:
    """System 1's values as written at task level (None: not written there)."""

    prompt: str | None
    slo_ms: float | None
    fallback: str | None
    max_consecutive_slo_violation: int | None
    on_max_violation: str | None


def has_pipeline_keys(task: Mapping[str, Any]) -> bool:
    return any(k in task for k in PIPELINE_KEYS)


def first_pipeline_key(task: Mapping[str, Any]) -> str:
    return next(k for k in PIPELINE_KEYS if k in task)


GRASP_WATCH_NUMBERS = ("min_object", "open_width", "lost_by", "still", "settle_s", "carried")


def _grasp_watch(v: Any, path: str) -> GraspWatchConfig | None:
    """`task_retry.grasp_watch`: off (YAML false) or a mapping of GraspWatchConfig's fields."""
    if v is False:
        return None
    d = mapping(v, path)
    no_unknown(d, {"on_lost", "gripper_index", *GRASP_WATCH_NUMBERS}, path)
    dflt = GraspWatchConfig()
    kw: dict[str, Any] = {k: number(d[k], join_key(path, k)) for k in GRASP_WATCH_NUMBERS if k in d}
    if "on_lost" in d:
        kw["on_lost"] = string(d["on_lost"], join_key(path, "on_lost"), GRASP_LOST_ACTIONS)
    if "gripper_index" in d:
        gi = d["gripper_index"]
        if isinstance(gi, bool) or not isinstance(gi, int):
            raise FleetConfigError(f"{join_key(path, 'gripper_index')}: expected an integer index into the joint "
                                   f"positions (-1: the last), got {gi!r}")
        kw["gripper_index"] = gi
    try:
        return GraspWatchConfig(**{**dflt.__dict__, **kw})
    except ValueError as e:
        raise FleetConfigError(f"{path}: {e}") from None


def _model(v: Any, path: str, component: str) -> ModelSpec:
    if isinstance(v, str):
        if v != VLA_MODEL:
            raise FleetConfigError(f"{path}: expected 'vla' or a mapping {{hf: <directory>, device: cpu|cuda|auto}}, "
                                   f"got {v!r}")
        return v
    d = mapping(v, path)
    if component == "system1":
        raise FleetConfigError(f"{path}: System 1 is the served VLA (server.model); expected 'vla', got {dict(d)!r}")
    no_unknown(d, {"hf", "device"}, path)
    return HfModel(path=string(required(d, "hf", path), join_key(path, "hf")),
                   device=string(d.get("device", "auto"), join_key(path, "device"), HF_DEVICES))


def _component(name: str, v: Any, path: str) -> ComponentConfig:
    """One entry of `components`; System 1's prompt and slo_ms may be absent here (merged later:
    "" and 0.0 stand for "not written")."""
    d = mapping(v, path)
    periodic = name in PERIODIC
    if "freq_hz" in d and not periodic:
        how = ("is asked once per pipeline.system2_to_system1_call_ratio System 1 predictions" if name == "system2"
               else "is asked by the robot client's trigger (the task's action timing)")
        raise FleetConfigError(f"{join_key(path, 'freq_hz')}: not periodic: {name} {how}")
    no_unknown(d, {"model", "prompt", "slo_ms", "fallback"} | ({"freq_hz"} if periodic else set()), path)
    s1 = name == "system1"
    if not s1:  # System 1's may come from the task's keys instead
        for key in ("model", "prompt", "slo_ms"):
            required(d, key, path)
    model = _model(d["model"], join_key(path, "model"), name) if "model" in d else VLA_MODEL
    prompt = string(d["prompt"], join_key(path, "prompt")) if "prompt" in d else ""
    slo = number(d["slo_ms"], join_key(path, "slo_ms")) if "slo_ms" in d else 0.0
    choices = FALLBACKS_BY_COMPONENT[name]
    fallback = string(d["fallback"], join_key(path, "fallback"), choices) if "fallback" in d else ""
    freq = number(required(d, "freq_hz", path), join_key(path, "freq_hz")) if periodic else None
    return ComponentConfig(name=name, model=model, prompt=prompt, slo_ms=slo, fallback=fallback, freq_hz=freq)


def _one_value(path: str, task_value: Any, task_key: str, pipe_value: Any, pipe_key: str, default: Any) -> Any:
    """The value written at task level (`task_key`) or in the pipeline keys (`pipe_key`); written
    in both, they must agree."""
    if task_value is not None and pipe_value is not None and task_value != pipe_value:
        raise FleetConfigError(f"{join_key(path, pipe_key)}: {pipe_value!r} conflicts with "
                               f"{join_key(path, task_key)}: {task_value!r} (write it once, or the same in both)")
    if pipe_value is not None:
        return pipe_value
    if task_value is not None:
        return task_value
    if default is None:
        raise FleetConfigError(f"{join_key(path, task_key)}: missing (required here or as {join_key(path, pipe_key)})")
    return default


def parse_task_pipeline(task: Mapping[str, Any], path: str, level: TaskLevel) -> TaskPipelineConfig | None:
    """The pipeline of the task mapping `task` at key path `path` (tasks.<name>); None when it has
    none of the pipeline keys (a System-1-only task)."""
    if not has_pipeline_keys(task):
        return None
    timing = mapping(task.get("pipeline", {}), join_key(path, "pipeline"))
    no_unknown(timing, {"action_period_ms", "system2_to_system1_call_ratio"}, join_key(path, "pipeline"))
    retry_path = join_key(path, "task_retry")
    retry = mapping(task.get("task_retry", {}), retry_path)
    no_unknown(retry, {"max_task_retries", "on_max_task_retries", "grasp_watch"}, retry_path)
    viol_path = join_key(path, "safety_and_slo_violation")
    viol = mapping(task.get("safety_and_slo_violation", {}), viol_path)
    no_unknown(viol, {"max_consecutive_safety_replan", "max_consecutive_slo_violation", "on_max_violation"},
               viol_path)
    comp_path = join_key(path, "components")
    comps_doc = mapping(task.get("components", {}), comp_path)
    no_unknown(comps_doc, set(COMPONENTS), comp_path)
    comps = {n: _component(n, comps_doc[n], join_key(comp_path, n)) for n in COMPONENTS if n in comps_doc}

    s1 = comps.get("system1")
    prompt = _one_value(path, level.prompt, "prompt", (s1.prompt or None) if s1 else None,
                        "components.system1.prompt", None)
    slo = _one_value(path, level.slo_ms, "slo_ms", (s1.slo_ms or None) if s1 else None,
                     "components.system1.slo_ms", None)
    fallback = _one_value(path, level.fallback, "fallback", (s1.fallback or None) if s1 else None,
                          "components.system1.fallback", FALLBACKS_BY_COMPONENT["system1"][0])
    system1 = ComponentConfig("system1", s1.model if s1 else VLA_MODEL, prompt, slo, fallback)

    vp = "safety_and_slo_violation"
    max_viol = _one_value(path, level.max_consecutive_slo_violation, "max_consecutive_slo_violation",
                          integer(viol["max_consecutive_slo_violation"],
                                  join_key(viol_path, "max_consecutive_slo_violation"), 1)
                          if "max_consecutive_slo_violation" in viol else None,
                          f"{vp}.max_consecutive_slo_violation", 3)
    on_viol = _one_value(path, level.on_max_violation, "on_max_violation",
                         string(viol["on_max_violation"], join_key(viol_path, "on_max_violation"),
                                ESCALATION_POLICIES) if "on_max_violation" in viol else None,
                         f"{vp}.on_max_violation", ESCALATION_POLICIES[0])

    ratio = timing.get("system2_to_system1_call_ratio")
    ratio_path = join_key(path, "pipeline.system2_to_system1_call_ratio")
    if "system2" in comps and ratio is None:
        raise FleetConfigError(f"{ratio_path}: missing (required with {join_key(comp_path, 'system2')})")
    if "system2" not in comps and ratio is not None:
        raise FleetConfigError(f"{ratio_path}: set without {join_key(comp_path, 'system2')} (no System 2 to call)")
    period = timing.get("action_period_ms")

    def vlm(name: str) -> ComponentConfig | None:
        c = comps.get(name)
        if c is None or c.fallback:
            return c
        return replace(c, fallback=FALLBACKS_BY_COMPONENT[name][0])

    return TaskPipelineConfig(
        system1=system1, system2=vlm("system2"), safety=vlm("safety"), monitor=vlm("monitor"),
        action_period_ms=None if period is None else number(period, join_key(path, "pipeline.action_period_ms")),
        system2_to_system1_call_ratio=None if ratio is None else integer(ratio, ratio_path, 1),
        max_task_retries=integer(retry.get("max_task_retries", 3), join_key(retry_path, "max_task_retries"), 0),
        on_max_task_retries=string(retry.get("on_max_task_retries", ESCALATION_POLICIES[0]),
                                   join_key(retry_path, "on_max_task_retries"), ESCALATION_POLICIES),
        grasp_watch=_grasp_watch(retry.get("grasp_watch", {}), join_key(retry_path, "grasp_watch")),
        max_consecutive_safety_replan=integer(viol.get("max_consecutive_safety_replan", 10),
                                              join_key(viol_path, "max_consecutive_safety_replan"), 1),
        max_consecutive_slo_violation=max_viol,
        on_max_violation=on_viol,
    )
