"""fleet.yaml's pipeline keys: what parses, what each error names, and today's files unchanged."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from physai_ros.config.fleet import FleetConfigError, load_fleet, parse_fleet
from physai_ros.pipeline.config import ComponentConfig, HfModel, TaskPipelineConfig

from pipeline_helpers import pipeline_config, task

REPO = Path(__file__).resolve().parents[2]
FLEET = yaml.safe_load((REPO / "config" / "fleet.yaml").read_text())
BASE = {"prompt": "inspect the package", "horizon_policy": {"name": "static", "params": [10]}, "slo_ms": 500}


def fleet_with(task_doc: dict, name: str = "t") -> dict:
    doc = copy.deepcopy(FLEET)
    doc["tasks"][name] = task_doc
    return doc


def parse_task(task_doc: dict, name: str = "t"):
    return parse_fleet(fleet_with(task_doc, name)).tasks[name]


def error_of(task_doc: dict, name: str = "t") -> str:
    with pytest.raises(FleetConfigError) as e:
        parse_task(task_doc, name)
    return str(e.value)


def test_rosa_figure_3_inspection_task():
    t = parse_task({**BASE, **task()}, "inspect")
    assert t.pipeline == TaskPipelineConfig(
        system1=ComponentConfig("system1", "vla", "inspect the package", 500.0, "stop_and_resend"),
        system2=ComponentConfig("system2", "vla", "next subgoal for: {task}", 1000.0, "use_last_plan"),
        safety=ComponentConfig("safety", HfModel("/models/qwen", "cpu"), "is the workcell safe?", 400.0,
                               "stop_and_replan", 2.0),
        monitor=ComponentConfig("monitor", "vla", "ongoing, done, or failed?", 1000.0, "stop_and_resend", 0.5),
        action_period_ms=500.0, system2_to_system1_call_ratio=2, max_task_retries=2,
        on_max_task_retries="stop_and_call_human", max_consecutive_safety_replan=2,
        max_consecutive_slo_violation=3, on_max_violation="stop_and_call_human")
    # System 1's values reach the task (the robot client's deadline monitor reads these).
    assert (t.prompt, t.slo_ms, t.fallback, t.max_consecutive_slo_violation) == \
        ("inspect the package", 500.0, "stop_and_resend", 3)
    assert t.pipeline.system2.question("sort by colour") == "next subgoal for: sort by colour"
    assert t.pipeline.safety.period_s == 0.5


def test_pick_and_place_with_monitor_only_and_defaults():
    t = parse_task({**BASE, "components": {"monitor": {"model": "vla", "prompt": "ongoing, done, or failed?",
                                                       "freq_hz": 0.5, "slo_ms": 2000}}})
    p = t.pipeline
    assert p.system2 is None and p.safety is None
    assert p.monitor.fallback == "stop_and_resend" and p.system1 == ComponentConfig(
        "system1", "vla", "inspect the package", 500.0, "hold")
    assert (p.max_task_retries, p.max_consecutive_safety_replan, p.max_consecutive_slo_violation) == (3, 10, 3)
    assert p.system2_to_system1_call_ratio is None and p.action_period_ms is None


def test_system1_written_only_in_components():
    doc = {"horizon_policy": BASE["horizon_policy"], **task()}
    t = parse_task(doc)
    assert (t.prompt, t.slo_ms) == ("inspect the package", 500.0)
    doc["components"]["system1"].pop("slo_ms")
    assert error_of(doc) == "tasks.t.slo_ms: missing (required here or as tasks.t.components.system1.slo_ms)"


def test_task_level_and_component_values_must_agree():
    assert error_of({**BASE, **task(**{"components.system1.slo_ms": 400})}) == (
        "tasks.t.components.system1.slo_ms: 400.0 conflicts with tasks.t.slo_ms: 500.0 "
        "(write it once, or the same in both)")
    assert error_of({**BASE, "fallback": "hold", **task()}).startswith(
        "tasks.t.components.system1.fallback: 'stop_and_resend' conflicts with tasks.t.fallback: 'hold'")
    assert error_of({**BASE, "max_consecutive_slo_violation": 5, **task()}).startswith(
        "tasks.t.safety_and_slo_violation.max_consecutive_slo_violation: 3 conflicts with "
        "tasks.t.max_consecutive_slo_violation: 5")
    assert error_of({**BASE, "prompt": "other", **task()}).startswith(
        "tasks.t.components.system1.prompt: 'inspect the package' conflicts with tasks.t.prompt: 'other'")
    # Equal in both places is fine.
    assert parse_task({**BASE, "fallback": "stop_and_resend", "max_consecutive_slo_violation": 3,
                       **task()}).fallback == "stop_and_resend"


@pytest.mark.parametrize("changes,message", [
    ({"components.safety.freq_hz": None}, "tasks.t.components.safety.freq_hz: missing (required)"),
    ({"components.monitor.freq_hz": 0}, "tasks.t.components.monitor.freq_hz: expected a finite number > 0, got 0"),
    ({"components.system2.freq_hz": 1},
     "tasks.t.components.system2.freq_hz: not periodic: system2 is asked once per "
     "pipeline.system2_to_system1_call_ratio System 1 predictions"),
    ({"pipeline.system2_to_system1_call_ratio": None},
     "tasks.t.pipeline.system2_to_system1_call_ratio: missing (required with tasks.t.components.system2)"),
    ({"components.system2": None},
     "tasks.t.pipeline.system2_to_system1_call_ratio: set without tasks.t.components.system2 (no System 2 to call)"),
    ({"pipeline.system2_to_system1_call_ratio": 0},
     "tasks.t.pipeline.system2_to_system1_call_ratio: expected an integer >= 1, got 0"),
    ({"components.safety.fallback": "use_last_plan"},
     "tasks.t.components.safety.fallback: expected one of ['stop_and_replan', 'hold', 'stop_and_resend'], "
     "got 'use_last_plan'"),
    ({"components.monitor.fallback": "stop_and_replan"},
     "tasks.t.components.monitor.fallback: expected one of ['stop_and_resend', 'hold'], got 'stop_and_replan'"),
    ({"components.system1.fallback": "stop_and_replan"},
     "tasks.t.components.system1.fallback: expected one of ['hold', 'stop_and_resend', 'use_last_plan'], "
     "got 'stop_and_replan'"),
    ({"components.safety.colour": "red"}, "tasks.t.components.safety.colour: unknown key"),
    ({"components.planner": {}}, "tasks.t.components.planner: unknown key"),
    ({"task_retry.max_retries": 1}, "tasks.t.task_retry.max_retries: unknown key"),
    ({"safety_and_slo_violation.on_max_violation": "ignore"},
     "tasks.t.safety_and_slo_violation.on_max_violation: expected one of ['stop_and_call_human'], got 'ignore'"),
    ({"components.safety.model": "qwen"},
     "tasks.t.components.safety.model: expected 'vla' or a mapping {hf: <directory>, device: cpu|cuda|auto}"),
    ({"components.safety.model": {"device": "cpu"}}, "tasks.t.components.safety.model.hf: missing (required)"),
    ({"components.safety.model": {"hf": "/m", "device": "tpu"}},
     "tasks.t.components.safety.model.device: expected one of ['cpu', 'cuda', 'auto'], got 'tpu'"),
    ({"components.system1.model": {"hf": "/m"}}, "tasks.t.components.system1.model: System 1 is the served VLA"),
    ({"components.monitor.prompt": None}, "tasks.t.components.monitor.prompt: missing (required)"),
    ({"components.system2.slo_ms": None}, "tasks.t.components.system2.slo_ms: missing (required)"),
    ({"components.system2.model": None}, "tasks.t.components.system2.model: missing (required)"),
    ({"task_retry.max_task_retries": -1}, "tasks.t.task_retry.max_task_retries: expected an integer >= 0, got -1"),
    ({"safety_and_slo_violation.max_consecutive_safety_replan": 0},
     "tasks.t.safety_and_slo_violation.max_consecutive_safety_replan: expected an integer >= 1, got 0"),
    ({"components": "all"}, "tasks.t.components: expected a mapping, got str"),
    ({"task_retry.grasp_watch": {"on_lost": "stop"}},
     "tasks.t.task_retry.grasp_watch.on_lost: expected one of ['ignore', 'replan', 'reset'], got 'stop'"),
    ({"task_retry.grasp_watch": {"lost_by_m": 0.01}}, "tasks.t.task_retry.grasp_watch.lost_by_m: unknown key"),
    ({"task_retry.grasp_watch": {"settle_s": -1}},
     "tasks.t.task_retry.grasp_watch.settle_s: expected a finite number > 0, got -1"),
    ({"task_retry.grasp_watch": {"gripper_index": 1.5}},
     "tasks.t.task_retry.grasp_watch.gripper_index: expected an integer index into the joint positions"),
    ({"task_retry.grasp_watch": {"min_object": 0.1}},
     "tasks.t.task_retry.grasp_watch: min_object (0.1) must be under open_width (0.075)"),
    ({"task_retry.grasp_watch": "on"}, "tasks.t.task_retry.grasp_watch: expected a mapping, got str"),
])
def test_errors_name_the_key_path(changes, message):
    assert error_of({**BASE, **task(**changes)}).startswith(message)


def test_a_streaming_task_with_a_pipeline_is_refused():
    doc = {**BASE, "mode": "streaming", "task_retry": {"max_task_retries": 1}}
    assert error_of(doc).startswith("tasks.t.task_retry: a streaming task cannot have a pipeline")
    doc = {**BASE, "mode": "streaming", **task()}
    assert error_of(doc).startswith("tasks.t.pipeline: a streaming task cannot have a pipeline")


def test_any_pipeline_key_makes_a_system1_only_pipeline():
    t = parse_task({**BASE, "task_retry": {"max_task_retries": 1}})
    assert t.pipeline.vlm_components == () and t.pipeline.max_task_retries == 1
    assert t.pipeline.system1 == ComponentConfig("system1", "vla", "inspect the package", 500.0, "hold")


def test_a_task_without_pipeline_keys_still_needs_prompt_and_slo():
    doc = dict(BASE)
    doc.pop("slo_ms")
    assert error_of(doc) == "tasks.t.slo_ms: missing (required)"
    doc = dict(BASE)
    doc.pop("prompt")
    assert error_of(doc) == "tasks.t.prompt: missing (required)"


def _fleet_files() -> list[Path]:
    files = sorted(p for d in ("config", "test") for p in (REPO / d).rglob("*.y*ml"))
    return [p for p in files if isinstance(d := yaml.safe_load(p.read_text()), dict) and "tasks" in d and "robots" in d]


PIPELINE_KEYS = {"pipeline", "task_retry", "safety_and_slo_violation", "components"}


def test_todays_fleet_files_parse_unchanged():
    files = _fleet_files()
    assert REPO / "config" / "fleet.yaml" in files
    for path in files:
        cfg = load_fleet(path)
        raw = yaml.safe_load(path.read_text())["tasks"]
        for name, t in cfg.tasks.items():
            if PIPELINE_KEYS & set(raw[name]):
                assert t.pipeline is not None, (path, name)  # a pipeline fleet (fleet_pipeline.yaml)
                continue
            assert t.pipeline is None, (path, name)
            assert (t.prompt, t.slo_ms, t.fallback, t.max_consecutive_slo_violation, t.on_max_violation) == (
                raw[name]["prompt"], float(raw[name]["slo_ms"]), raw[name].get("fallback", "hold"),
                raw[name].get("max_consecutive_slo_violation", 3),
                raw[name].get("on_max_violation", "stop_and_call_human")), (path, name)


def test_the_grasp_watch_is_on_and_only_reports_unless_told():
    """task_retry.grasp_watch: absent, the watch runs with its defaults and on_lost ignore; a
    mapping sets its fields (integers for floats too); YAML false (`off`) turns it off."""
    from physai_ros.pipeline.grasp_watch import GraspWatchConfig

    assert pipeline_config().grasp_watch == GraspWatchConfig()
    told = pipeline_config(**{"task_retry__grasp_watch": {"on_lost": "replan", "gripper_index": 6, "settle_s": 1}})
    assert told.grasp_watch == GraspWatchConfig(on_lost="replan", gripper_index=6, settle_s=1.0)
    assert pipeline_config(**{"task_retry__grasp_watch": False}).grasp_watch is None
