"""config/fleet_pipeline.yaml end to end as real processes: physai-fleet runs one robot
of each pipeline task (pick and place with a monitor; place_in_order with planner, safety and
monitor) on the tiny random preset, every component is asked over ROS and answered by the
server's backbone, the tiny model's garbage answers are counted errors (never a crash), the robot
clients publish PipelineEvents, the summary and its JSON carry the per-component counters, and
every process exits cleanly. Plus the plain-data report on a hand-made status."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from physai_ros.monitoring.pipeline_report import (EventTally, dashboard_lines, fleet_totals, format_pipeline,
                                                   pipeline_fields, with_pipeline_lines)

REPO = Path(__file__).resolve().parents[2]
FLEET = REPO / "config" / "fleet_pipeline.yaml"
# Parse errors of the tiny model's answers (pipeline/answers.py): a label or subgoal it cannot be.
GARBAGE = {"unknown_label", "bad_charset", "empty", "too_long"}


def test_the_shipped_pipeline_fleet_loads_with_both_task_shapes():
    from physai_ros.fleet.plan import fleet_plan
    from physai_ros.config.fleet import load_fleet

    cfg = load_fleet(FLEET)
    comps = {t.name: sorted(c for c in ("system2", "safety", "monitor") if getattr(t.pipeline, c) is not None)
             for t in cfg.tasks.values()}
    assert comps == {"pick_place_monitored": ["monitor"], "place_in_order": ["monitor", "safety", "system2"],
                     "place_in_order_blue_first": ["monitor", "safety", "system2"]}
    # the blue-first task is place_in_order's pipeline told the other order; the planner reads it
    blue, red = cfg.tasks["place_in_order_blue_first"], cfg.tasks["place_in_order"]
    assert blue.prompt != red.prompt and blue.pipeline.system2 == red.pipeline.system2
    assert "{task}" in red.pipeline.system2.prompt
    assert [r.task.name for r in cfg.robots].count("place_in_order_blue_first") == 1
    assert all(getattr(t.pipeline, c).model == "vla" for t in cfg.tasks.values()
               for c in ("system2", "safety", "monitor") if getattr(t.pipeline, c) is not None)
    two = cfg.with_num_robots(2)
    assert [(r.task.name, r.sim["task"]) for r in two.robots] == [("pick_place_monitored", "pick_and_place"),
                                                                 ("place_in_order", "place_in_order")]
    assert all(r.sim["intruder_rate_per_min"] > 0 and r.sim["drop_prob"] > 0 for r in cfg.robots)
    assert len(fleet_plan(two)) == 1 + 2 * 3


def _status(errors=None):
    c = {"asked": 4, "answered": 1, "on_time": 3, "late": 1, "slo_misses": 1, "stale": 0, "skipped": 2,
         "errors": errors or {"unknown_label": 2}, "consecutive_violations": 2, "slo_attainment": 0.75}
    return {"pipeline": {"started": True, "escalated": "3 consecutive SLO violations of monitor",
                         "components": {"monitor": c}, "safety_stops": 1, "replans": 2, "total_retries": 1,
                         "tasks_done": 0, "episodes": 2, "escalations": 1, "system1_predictions": 5,
                         "queries_sent": 4, "answers_refused": 0}}


def test_the_report_counts_components_events_and_renders_lines():
    tally = EventTally()
    for kind, source in (("hold", "monitor"), ("hold", "safety"), ("escalate", "monitor")):
        tally.add("robot_0", kind, source, kind == "escalate")
    doc = pipeline_fields(_status(), tally.doc("robot_0"), 20.0, task="pick_place_monitored")["pipeline"]
    m = doc["components"]["monitor"]
    assert (m["asked_per_s"], m["answered_per_s"], m["errors_total"]) == (0.2, 0.05, 2)
    assert doc["events"] == {"total": 3, "by_kind": {"escalate": 1, "hold": 2},
                             "by_source": {"escalate/monitor": 1, "hold/monitor": 1, "hold/safety": 1}}
    assert pipeline_fields({"state": "running"}, tally.doc("robot_9"), 20.0) == {}  # no pipeline
    serving = [{"id": "robot_0", "task": "pick_and_place", "pipeline": doc}, {"id": "robot_1"}]
    lines = format_pipeline(serving)
    assert lines[0].startswith("  robot_0 pipeline: safety stops 1, replans 2, retries 1")
    assert "latched: 3 consecutive" in lines[0] and "events 3 (escalate 1, hold 2)" in lines[0]
    assert "monitor: asked 4 (0.20/s), answered 1 (0.05/s)" in lines[1] and "SLO attainment 75%" in lines[1]
    assert "errors unknown_label 2" in lines[1] and len(lines) == 2
    totals = fleet_totals(serving)
    assert totals["components"] == {"pick_place_monitored.monitor": {"asked": 4, "answered": 1, "on_time": 3,
                                                                      "slo_misses": 1, "errors_total": 2}}
    assert dashboard_lines(serving[0])[-1].endswith("LATCHED") and dashboard_lines(serving[1]) == []
    rows = [("robot_0", [(0.0, None), (1.0, None)]), ("robot_1", [(0.0, None)])]
    caps = with_pipeline_lines(None, rows, serving)
    assert caps[0][0] == [] and caps[0][1] == dashboard_lines(serving[0]) and caps[1] == [[]]
    assert with_pipeline_lines(None, rows, [{"id": "robot_0"}]) is None
    # The PNG dashboard's table gets the same text per robot (monitoring.report).
    from physai_ros.monitoring.run_summary import parse_summary

    run = parse_summary({"robots": serving})
    assert run.robots[0].pipeline == "; ".join(dashboard_lines(serving[0])) and run.robots[1].pipeline == ""
    with pytest.raises(ValueError, match=r"robots\[0\]\.pipeline: not a pipeline block"):
        parse_summary({"robots": [{"id": "r", "pipeline": {"components": 3}}]})


BLUE_FIRST = "note: the blue cube goes first, then place the red cube on top of it on the green pad"


def _tiny_copy(tmp_path: Path) -> Path:
    """fleet_pipeline.yaml with the tiny random preset (starts in seconds), its first two robots,
    no latency profile, and component SLOs with room for a loaded 2-core machine."""
    doc = yaml.safe_load(FLEET.read_text())
    doc["server"]["model"] = {"preset": "tiny", "tokenizer": "package://physai_ros/assets/tokenizer.json",
                              "max_token_len": 48, "seed": 0}
    doc["server"]["profile"] = False
    doc["robots"] = doc["robots"][:2]
    # The other order, in free text that rcl's YAML would not read as a string: the sim robot
    # follows the task's prompt (robot_params.sim_params) and must start with it.
    doc["tasks"]["place_in_order"]["prompt"] = BLUE_FIRST
    for task in doc["tasks"].values():
        for name, comp in task["components"].items():
            comp["slo_ms"] = 5000
    path = tmp_path / "fleet_pipeline_tiny.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.ros
@pytest.mark.slow
def test_the_pipeline_fleet_runs_asks_every_component_and_counts_garbage(tmp_path):
    summary, logs = tmp_path / "summary.json", tmp_path / "logs"
    cmd = [sys.executable, "-m", "physai_ros.fleet", "--fleet", str(_tiny_copy(tmp_path)), "--robots", "2",
           "--duration", "20", "--summary-json", str(summary), "--contact-sheet", str(tmp_path / "sheet.png"),
           "--log-dir", str(logs)]
    # Start-up (torch import, tiny engine) is not counted in --duration; on a busy 2-core machine
    # it has taken a minute, and 7 processes take seconds more to stop.
    out = subprocess.run(cmd, capture_output=True, timeout=280, env=dict(os.environ), cwd=tmp_path)
    text = out.stdout.decode(errors="replace") + out.stderr.decode(errors="replace")
    assert out.returncode == 0, text[-4000:]
    assert "processes ended abnormally" not in text and "exited with" not in text, text[-4000:]
    for log in logs.glob("*.log"):  # nothing crashed on the way, the garbage answers included
        assert "Traceback" not in log.read_text(errors="replace"), (log.name, log.read_text()[-3000:])
    sim_log = (logs / "robot_1__sim_robot.log").read_text(errors="replace")
    assert "task place_in_order (order: blue cube, then red cube)" in sim_log, sim_log[-2000:]
    report = json.loads(summary.read_text())
    robots = {r["id"]: r for r in report["robots"]}
    want = {"robot_0": ("pick_place_monitored", {"monitor"}),
            "robot_1": ("place_in_order", {"system2", "safety", "monitor"})}
    for rid, (task, comps) in want.items():
        p = robots[rid]["pipeline"]
        assert p["task"] == task and p["started"], (rid, p)
        assert set(p["components"]) >= comps, (rid, p["components"])
        for name in comps:
            c = p["components"][name]
            # Asked over ROS and answered by the server (valid or not): answers on time or late.
            assert c["asked"] > 0 and c["on_time"] + c["late"] > 0, (rid, name, c)
        # PipelineEvents arrived on /<ns>/pipeline_event (the first hold at least), as many as the
        # client says it published by its last status (its later ones may still be in flight).
        assert p["events"]["total"] > 0 and p["events"]["by_kind"].get("hold", 0) > 0, (rid, p)
        assert p["events"]["total"] >= sum(p["events_published"].values()) > 0, (rid, p)
    # The random model's labels are garbage: counted by reason, the processes alive (above).
    labelled = [robots["robot_0"]["pipeline"]["components"]["monitor"],
                robots["robot_1"]["pipeline"]["components"]["safety"],
                robots["robot_1"]["pipeline"]["components"]["monitor"]]
    assert sum(c["errors_total"] for c in labelled) > 0, labelled
    assert all(set(c["errors"]) <= GARBAGE | {"backend_error"} for c in labelled), labelled
    assert report["pipelines"]["components"]["place_in_order.safety"]["asked"] > 0
    # The printed summary has the operator's lines.
    assert "  robot_1 pipeline: safety stops" in text and "      safety: asked" in text, text[-4000:]
    assert "physai-fleet: pipelines:" in text


def _run_one_robot(fleet: Path, duration_s: int, tmp_path: Path, tag: str) -> dict:
    """`physai_ros.fleet` on a one-robot fleet file for duration_s: it exits 0, no node logged a
    traceback; returns the robot's block of the summary."""
    summary, logs = tmp_path / f"summary{tag}.json", tmp_path / f"logs{tag}"
    cmd = [sys.executable, "-m", "physai_ros.fleet", "--fleet", str(fleet), "--duration", str(duration_s),
           "--summary-json", str(summary), "--log-dir", str(logs)]
    out = subprocess.run(cmd, capture_output=True, timeout=280, env=dict(os.environ), cwd=tmp_path)
    text = out.stdout.decode(errors="replace") + out.stderr.decode(errors="replace")
    assert out.returncode == 0, text[-4000:]
    for log in logs.glob("*.log"):
        assert "Traceback" not in log.read_text(errors="replace"), (log.name, log.read_text()[-3000:])
    (robot,) = json.loads(summary.read_text())["robots"]
    return robot


@pytest.mark.ros
@pytest.mark.slow
def test_the_trained_checkpoint_answers_every_component_in_its_labels_over_ros(tmp_path):
    """The shipped fleet_pipeline.yaml as written (the co-trained sim_pi0_pipeline) on its
    place_in_order robot: a real model makes the pipeline's decisions over ROS. Every answer
    parses (the trained labels and subgoals: no garbage reason), and System 2's subgoals become
    System 1's prompt (set_prompt events). Whether its decisions are right is measured, not
    tested: docs/training.md and bench/pipeline_shift.py."""
    doc = yaml.safe_load(FLEET.read_text())
    doc["server"]["profile"] = False  # start-up in seconds; SLOs with room for a loaded 2-core machine
    doc["robots"] = [r for r in doc["robots"] if r["task"] == "place_in_order"][:1]
    for comp in doc["tasks"]["place_in_order"]["components"].values():
        comp["slo_ms"] = 5000
    fleet = tmp_path / "fleet_pipeline_trained.yaml"
    fleet.write_text(yaml.safe_dump(doc))
    p = _run_one_robot(fleet, 20, tmp_path, "")["pipeline"]
    assert p["task"] == "place_in_order" and p["started"], p
    for name in ("system2", "safety", "monitor"):
        c = p["components"][name]
        assert c["asked"] > 0 and c["on_time"] + c["late"] > 0, (name, c)
        assert not set(c["errors"]) & GARBAGE, (name, c)
    assert p["components"]["system2"]["answered"] > 0
    assert p["events"]["by_kind"].get("set_prompt", 0) > 0, p["events"]


@pytest.mark.ros
@pytest.mark.slow
def test_a_slip_is_seen_from_the_joint_states_over_ros_and_drops_the_plan(tmp_path):
    """fleet_pipeline.yaml's pick-and-place robot with the shipped checkpoint, a drop injected
    into every episode, `on_lost: replan`: over DDS the robot client's grasp watch sees the slip in
    the sim robot's own joint states, publishes a grasp_lost PipelineEvent from the monitor and
    drops the plan (a drop_plan event, the give-up hold chunk). Waits for the first slip by running
    until the fleet's summary has one (each run is a fixed --duration: 40 s, then up to twice more)."""
    doc = yaml.safe_load(FLEET.read_text())
    doc["server"]["profile"] = False
    robot = next(r for r in doc["robots"] if r["task"] == "pick_place_monitored")
    robot["sim"].update(drop_prob=1.0, knock_prob=0.0, intruder_rate_per_min=0.0)
    doc["robots"] = [robot]
    task = doc["tasks"]["pick_place_monitored"]
    task["task_retry"]["grasp_watch"] = {"on_lost": "replan"}
    for comp in task["components"].values():
        comp["slo_ms"] = 5000
    fleet = tmp_path / "fleet_pipeline_drops.yaml"
    fleet.write_text(yaml.safe_dump(doc))
    for attempt in range(3):
        p = _run_one_robot(fleet, 40, tmp_path, str(attempt))["pipeline"]
        if p["grasp_losses"]:
            break
    assert p["grasp_losses"] >= 1, p
    by_source = p["events"]["by_source"]
    assert by_source.get("grasp_lost/monitor", 0) >= 1 and by_source.get("drop_plan/monitor", 0) >= 1, p["events"]
