"""fleet.yaml's tasks: what a robot does, its SLO and fallback, its horizon policy, its chunk
merge, language stream and pipeline (each section parsed by its own module, checked here)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from physai_ros.config.chunk_merge import ChunkMergeConfig, parse_chunk_merge
from physai_ros.config.language import TaskLanguageConfig, parse_task_language
from physai_ros.config_fields import (FleetConfigError, integer, join_key, mapping, no_unknown, number, required,
                                      string)
from physai_ros.pipeline.config import PIPELINE_KEYS, TaskLevel, TaskPipelineConfig, first_pipeline_key, \
    parse_task_pipeline

FALLBACKS = ("hold", "stop_and_resend", "use_last_plan")
ESCALATIONS = ("stop_and_call_human",)
BUILTIN_HORIZON_POLICIES = ("static", "confidence")
TASK_MODES = ("chunked", "streaming")  # ActionChunk answers | TrajectorySegment stream


@dataclass(frozen=True)
class TaskConfig:
    name: str
    prompt: str
    action_rate_hz: float
    horizon_policy: str
    horizon_params: tuple[float, ...]
    slo_ms: float
    fallback: str
    max_consecutive_slo_violation: int
    on_max_violation: str
    trigger_margin_s: float
    mode: str = "chunked"  # "streaming": TrajectorySegments from the server's streams
    # Misses within this long of the robot's first request run the fallback but do not count
    # toward max_consecutive_slo_violation (control/deadline.py).
    slo_startup_grace_s: float = 60.0
    segment_rate_hz: float = 60.0  # streaming: TrajectorySegment messages per second (at most)
    # How consecutive chunks join: off (replace) | crossfade | rtc (config.chunk_merge, docs/rtc.md).
    chunk_merge: ChunkMergeConfig = ChunkMergeConfig()
    # The language stream (config.language): what its robots are asked; None: nothing.
    language: TaskLanguageConfig | None = None
    # The task pipeline (pipeline.config, docs/pipelines.md): System 2, safety, monitor, retry
    # and violation policies; None: System 1 only (a task without the pipeline keys).
    pipeline: TaskPipelineConfig | None = None
    # The flow sampler's starting noise is drawn from N(0, noise_scale^2) (serving.starting_noise):
    # 1 samples the policy as trained (LeRobot's sampler); below 1 trades the spread of the
    # chunks for precision (docs/pipelines.md, "Where the policy lets go").
    noise_scale: float = 1.0

    @property
    def action_period_s(self) -> float:
        return 1.0 / self.action_rate_hz


def parse_horizon_policy(v: Any, path: str) -> tuple[str, tuple[float, ...]]:
    v = mapping(v, path)
    no_unknown(v, {"name", "params"}, path)
    name = string(required(v, "name", path), join_key(path, "name"))
    if name not in BUILTIN_HORIZON_POLICIES and ":" not in name:
        raise FleetConfigError(
            f"{path}.name: expected 'static', 'confidence' or 'package.module:Class', got {name!r}")
    params = v.get("params", [])
    if not isinstance(params, list) or not all(
            isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in params):
        raise FleetConfigError(f"{path}.params: expected a list of finite numbers, got {params!r}")
    if name == "static" and (len(params) != 1 or params[0] < 1 or params[0] != int(params[0])):
        raise FleetConfigError(f"{path}.params: static expects [H] with integer H >= 1, got {params!r}")
    if name == "confidence" and (len(params) != 2 or params[0] < 0 or params[1] < 1):
        raise FleetConfigError(
            f"{path}.params: confidence expects [t >= 0, H_min >= 1], got {params!r}")
    return name, tuple(float(x) for x in params)


def parse_task(name: str, d: Any) -> TaskConfig:
    path = f"tasks.{name}"
    d = mapping(d, path)
    no_unknown(d, {"prompt", "action_rate_hz", "horizon_policy", "slo_ms", "fallback",
                    "max_consecutive_slo_violation", "on_max_violation", "trigger_margin_s", "mode",
                    "segment_rate_hz", "chunk_merge", "language", "slo_startup_grace_s", "noise_scale",
                    *PIPELINE_KEYS}, path)
    hp, hparams = parse_horizon_policy(required(d, "horizon_policy", path), join_key(path, "horizon_policy"))
    mode = string(d.get("mode", "chunked"), join_key(path, "mode"), TASK_MODES)
    # System 1's prompt, SLO, fallback and violation policy: at task level, or (a task with a
    # pipeline) in its pipeline keys, or both when equal (pipeline.config, docs/pipelines.md).
    level = TaskLevel(
        prompt=string(d["prompt"], join_key(path, "prompt")) if "prompt" in d else None,
        slo_ms=number(d["slo_ms"], join_key(path, "slo_ms")) if "slo_ms" in d else None,
        fallback=string(d["fallback"], join_key(path, "fallback"), FALLBACKS) if "fallback" in d else None,
        max_consecutive_slo_violation=integer(d["max_consecutive_slo_violation"],
                                              join_key(path, "max_consecutive_slo_violation"), 1)
        if "max_consecutive_slo_violation" in d else None,
        on_max_violation=string(d["on_max_violation"], join_key(path, "on_max_violation"), ESCALATIONS)
        if "on_max_violation" in d else None)
    pipeline = parse_task_pipeline(d, path, level)
    if pipeline is None:
        required(d, "prompt", path)
        required(d, "slo_ms", path)
        s1_prompt, s1_slo = level.prompt, level.slo_ms
        s1_fallback = level.fallback or "hold"
        max_viol = level.max_consecutive_slo_violation or 3
        on_viol = level.on_max_violation or "stop_and_call_human"
    else:
        if mode == "streaming":
            raise FleetConfigError(
                f"{join_key(path, first_pipeline_key(d))}: a streaming task cannot have a pipeline (the streaming "
                "action expert keeps no prefix cache for text and takes no subgoal prompts); use mode: chunked "
                "(docs/pipelines.md)")
        s1_prompt, s1_slo, s1_fallback = pipeline.system1.prompt, pipeline.system1.slo_ms, pipeline.system1.fallback
        max_viol, on_viol = pipeline.max_consecutive_slo_violation, pipeline.on_max_violation
    noise_scale = _parse_noise_scale(d.get("noise_scale", 1.0), join_key(path, "noise_scale"), mode)
    return TaskConfig(
        name=name,
        prompt=s1_prompt,
        action_rate_hz=number(d.get("action_rate_hz", 50.0), join_key(path, "action_rate_hz")),
        horizon_policy=hp,
        horizon_params=hparams,
        slo_ms=s1_slo,
        fallback=s1_fallback,
        max_consecutive_slo_violation=max_viol,
        on_max_violation=on_viol,
        trigger_margin_s=number(d.get("trigger_margin_s", 0.02), join_key(path, "trigger_margin_s"),
                              allow_zero=True),
        mode=mode,
        slo_startup_grace_s=number(d.get("slo_startup_grace_s", 60.0), join_key(path, "slo_startup_grace_s"),
                                   allow_zero=True),
        segment_rate_hz=number(d.get("segment_rate_hz", 60.0), join_key(path, "segment_rate_hz")),
        chunk_merge=parse_chunk_merge(d.get("chunk_merge"), join_key(path, "chunk_merge")),
        language=parse_task_language(d.get("language"), join_key(path, "language")),
        pipeline=pipeline,
        noise_scale=noise_scale,
    )


def _parse_noise_scale(v: Any, path: str, mode: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1:
        # Above 1 only widens the spread of what the policy was trained to sample; a typo such
        # as 5 would make a robot move erratically, so it is refused rather than clamped.
        raise FleetConfigError(f"{path}: expected a number from 0 to 1 (1: the policy's own sampler), got {v!r}")
    if mode == "streaming" and v != 1:
        raise FleetConfigError(f"{path}: the streaming action expert draws its own noise tokens; "
                               "noise_scale applies to chunked tasks (mode: chunked)")
    return float(v)
