"""A shift with the task pipeline against the same shift with System 1 alone, through
the robot client's own pipeline logic (ClientPipeline) in lockstep time. System 1 is the scripted
expert and the components are an oracle reading the sim's ground truth, so what is tested is the
loop: a truthful monitor's resets end failed episodes early (more tasks completed per shift), a
truthful safety checker stops the arm while an intruder is in the workcell, an escalation is
acknowledged by the simulated operator."""
from __future__ import annotations

import dataclasses

import pytest

from physai_ros.config.fleet import default_fleet_path, load_fleet
from physai_lab.evaluation.lockstep import LockstepConfig
from physai_lab.evaluation.pipeline_shift import ShiftConfig, run_shifts, summarise, system1_only
from physai_lab.evaluation.servers import ExpertServer
from physai_lab.scripted_backend import ScriptedBackend

FLEET = default_fleet_path().parent / "fleet_pipeline.yaml"


def _robot(**sim):
    cfg = load_fleet(FLEET)
    r = next(r for r in cfg.robots if r.task.name == "pick_place_monitored")
    small = {**r.sim, "camera_rate_hz": 10.0, **sim}
    return dataclasses.replace(r, sim=small, image_height=48, image_width=48)


def _oracle(slots_by_id, robot_ids):
    """Answers from the sim's ground truth; slots_by_id is filled by the run's slot hook."""
    b = ScriptedBackend()

    def truth(component):
        def fn(q):
            w = slots_by_id[q.robot_id].runtime.world
            return ("unsafe" if w.snapshot().intruder_present else "safe") if component == "safety" \
                else w.progress()[0]
        return fn

    for rid in robot_ids:
        b.respond_with(rid, "monitor", truth("monitor")).respond_with(rid, "safety", truth("safety"))
    return b


def _shift(robot, seeds, pipeline: bool, shift_s: float, backend=None, **kw):
    slots = {}
    server = ExpertServer(lambda rid: slots[rid].runtime.world, chunk_size=8)
    backend = backend or (_oracle(slots, [robot.id]) if pipeline else None)
    robot = robot if pipeline else system1_only(robot)

    def hook(ss):
        slots.update({s.robot.id: s for s in ss})

    cfg = ShiftConfig(shift_s=shift_s, lockstep=LockstepConfig(latency_s=0.05), **kw)
    return run_shifts(server, backend, [robot], seeds, cfg, "pipeline" if pipeline else "system1",
                      slot_hook=hook), backend


def test_a_truthful_monitor_resets_failed_episodes_and_completes_more():
    robot = _robot(knock_prob=0.3, drop_prob=0.0, intruder_rate_per_min=0.0)
    base, _ = _shift(robot, [5], pipeline=False, shift_s=45.0)
    pipe, backend = _shift(robot, [5], pipeline=True, shift_s=45.0)
    (b,), (p,) = base, pipe
    assert b.setting == "system1" and p.setting == "pipeline" and b.seed == p.seed == 5
    assert b.shift_s == pytest.approx(45.0, abs=0.01) and p.shift_s == pytest.approx(45.0, abs=0.01)
    # System 1 alone waits out a knocked cube's 20 s time limit; the monitor resets it.
    assert b.timeouts >= 1 and b.resets == 0 and b.pipeline == {}
    assert p.resets >= 1 and p.resets_not_failed == 0
    assert set(p.reset_reasons) <= {"knocked", "timeout"} and sum(p.reset_reasons.values()) >= 1, p.reset_reasons
    assert p.completed > b.completed, (b, p)
    assert p.pipeline["components"]["monitor"]["answered"] > 0
    # A truthful monitor's dones are true (per answer and per attempt); alone, none is said.
    assert p.false_dones == p.false_done_attempts == 0 and b.dones == 0
    assert {q.component for q in backend.asked} == {"monitor"}
    totals = summarise(base + pipe)
    assert totals["pipeline"]["pick_and_place"]["completed"] == p.completed
    assert totals["pipeline"]["pick_and_place"]["reset_reasons"] == p.reset_reasons
    assert totals["system1"]["pick_and_place"]["completed_per_min"] < totals["pipeline"]["pick_and_place"]["completed_per_min"]
    # One cube: nothing to tip off. The totals add the sim's own tip-off counts up per task.
    assert b.tip_offs == p.tip_offs == 0
    tipped = summarise([dataclasses.replace(p, tip_offs=2), dataclasses.replace(p, seed=6, tip_offs=1)])
    assert tipped["pipeline"]["pick_and_place"]["tip_offs"] == 3


def test_a_truthful_safety_checker_stops_the_arm_while_an_intruder_is_there():
    robot = _robot(knock_prob=0.0, drop_prob=0.0, intruder_rate_per_min=12.0, intruder_duration_s=3.0)
    robot = dataclasses.replace(robot, task=_with_safety(robot.task))
    (b,), _ = _shift(robot, [9], pipeline=False, shift_s=30.0)
    (p,), backend = _shift(robot, [9], pipeline=True, shift_s=30.0)
    # The intruder's schedule is the same in both (drawn on sim time, not from what the robot does).
    assert b.intruder_s == pytest.approx(p.intruder_s, abs=0.05) and b.intruder_s > 3.0
    assert b.moving_with_intruder_s > 1.0
    # Stopped within the answer latency (0.25 s) plus a hold's settling, each visit.
    assert p.moving_with_intruder_s < 0.5 * b.moving_with_intruder_s, (b, p)
    assert p.pipeline["safety_stops"] >= 1 and p.held_s > 0


def test_escalation_waits_for_the_operator_who_acknowledges_and_resets():
    robot = _robot(knock_prob=1.0, drop_prob=0.0, intruder_rate_per_min=0.0)
    (p,), _ = _shift(robot, [3], pipeline=True, shift_s=30.0, operator_response_s=5.0)
    # Nearly every episode is knocked (not one grasped first): three retries, then stop_and_call_human; the operator comes 5 s later.
    # (an escalation in the last 5 s of the shift is still waiting for the operator)
    assert p.escalations >= 1 and 1 <= p.operator_resets <= p.escalations, p
    assert p.pipeline["retries"] >= 0 and p.pipeline["total_retries"] >= 3
    assert p.held_s >= 5.0 * p.operator_resets - 0.5, p


def _with_safety(task):
    """pick_place_monitored plus place_in_order's safety component (asked at 2 Hz)."""
    pio = next(t for t in load_fleet(FLEET).tasks.values() if t.name == "place_in_order")
    safety = dataclasses.replace(pio.pipeline.safety, freq_hz=2.0)
    return dataclasses.replace(task, pipeline=dataclasses.replace(task.pipeline, safety=safety))


def test_a_monitor_that_says_done_before_the_task_is_done_is_counted():
    robot = _robot(knock_prob=0.0, drop_prob=0.0, intruder_rate_per_min=0.0)
    eager = ScriptedBackend().default(robot.id, "monitor", "done")
    (p,), _ = _shift(robot, [4], pipeline=True, shift_s=12.0, backend=eager)
    # Asked every 2 s from the start: most answers come long before the expert's first success.
    assert p.dones >= 4 and p.false_dones >= p.dones - p.completed >= 3, p
    # Counted per attempt too: the sim's episodes that had one, never more than it started.
    assert 1 <= p.false_done_attempts <= min(p.false_dones, p.episodes + 1), p


def test_shift_config_is_checked():
    with pytest.raises(ValueError, match="shift_s"):
        ShiftConfig(shift_s=0)
    with pytest.raises(ValueError, match="component_latency_s"):
        ShiftConfig(component_latency_s=-1)
    with pytest.raises(ValueError, match="component backend"):
        run_shifts(None, None, [_robot()], [1])
