"""Task pipelines for the pipeline tests, written as fleet.yaml task mappings and parsed by the
real parser, so the tests exercise what a user writes."""
from __future__ import annotations

import copy
from typing import Any

from physai_ros.pipeline.backend import ComponentAnswer
from physai_ros.pipeline.config import TaskLevel, TaskPipelineConfig, parse_task_pipeline

# ROSA Figure 3's inspection task, with short SLOs in seconds that are easy to step over.
INSPECT: dict[str, Any] = {
    "pipeline": {"action_period_ms": 500, "system2_to_system1_call_ratio": 2},
    "task_retry": {"max_task_retries": 2, "on_max_task_retries": "stop_and_call_human"},
    "safety_and_slo_violation": {"max_consecutive_safety_replan": 2, "max_consecutive_slo_violation": 3,
                                 "on_max_violation": "stop_and_call_human"},
    "components": {
        "system1": {"model": "vla", "prompt": "inspect the package", "slo_ms": 500, "fallback": "stop_and_resend"},
        "system2": {"model": "vla", "prompt": "next subgoal for: {task}", "slo_ms": 1000,
                    "fallback": "use_last_plan"},
        "safety": {"model": {"hf": "/models/qwen", "device": "cpu"}, "prompt": "is the workcell safe?",
                   "freq_hz": 2, "slo_ms": 400, "fallback": "stop_and_replan"},
        "monitor": {"model": "vla", "prompt": "ongoing, done, or failed?", "freq_hz": 0.5, "slo_ms": 1000,
                    "fallback": "stop_and_resend"},
    },
}
NO_LEVEL = TaskLevel(None, None, None, None, None)


def task(**changes: Any) -> dict[str, Any]:
    """INSPECT with changes: a key "components.safety.fallback" sets a nested value, None removes it."""
    d = copy.deepcopy(INSPECT)
    for dotted, v in changes.items():
        *parents, last = dotted.split(".")
        node = d
        for p in parents:
            node = node[p]
        if v is None:
            node.pop(last, None)
        else:
            node[last] = v
    return d


def pipeline_config(**changes: Any) -> TaskPipelineConfig:
    cfg = parse_task_pipeline(task(**{k.replace("__", "."): v for k, v in changes.items()}), "tasks.t", NO_LEVEL)
    assert cfg is not None
    return cfg


def ok(text: str) -> ComponentAnswer:
    return ComponentAnswer(text=text)


def err(message: str) -> ComponentAnswer:
    return ComponentAnswer(error=message)
