"""Component frames from policy-driven episodes (training.policy_component_data): the served
policy drives with the planner's truth as its prompt, each frame keeps the views the model sees
and the components' ground truth in component_data's layout, episodes end after their outcome,
and the frames merge after an expert recording's."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from physai_ros.config.fleet import default_fleet_path, load_fleet
from physai_ros.sim.tasks import order_prompt
from physai_lab.evaluation.lockstep import LockstepConfig
from physai_lab.evaluation.sweep import scale_setting
from physai_lab.training.component_data import (TEXT_FIELDS, ComponentCell, load_components,
                                                record_component_cell)
from physai_lab.training.policy_component_data import (AFTER_END_S, EndAfterOutcome, frames_of, plan_jobs,
                                                       record, run_component_job)
from physai_lab.training.rollouts import RolloutJob

FLEET = default_fleet_path().parent / "fleet_pipeline.yaml"
BLUE_FIRST = order_prompt("blue cube", "red cube")


@pytest.fixture(scope="module")
def tiny_fleet():
    return scale_setting(load_fleet(FLEET), checkpoint=None, preset="tiny")


def test_policy_frames_carry_the_views_and_the_truth_of_the_state_reached(tiny_fleet):
    job = RolloutJob("place_in_order", "policy", (880_011,), slots=1, prompt=BLUE_FIRST)
    eps = run_component_job(job, tiny_fleet, LockstepConfig(latency_s=0.05, max_episode_s=0.65))
    assert len(eps) == 1
    ep = eps[0]
    n = len(ep["images"])
    assert 6 <= n <= 7  # a frame per 0.1 s of sim time
    assert ep["images"][0].shape == (2, 3, 96, 96) and ep["images"][0].dtype == np.uint8
    assert all(len(ep[k]) == n for k in TEXT_FIELDS + ("time",))
    assert set(ep["task"]) == {"place_in_order"} and set(ep["prompt"]) == {BLUE_FIRST}
    assert np.allclose(np.diff(ep["time"]), 0.1, atol=1e-6)
    # The truth follows the robot's instruction: told blue first, the planner's answer names blue.
    assert ep["planner"][0] == "pick up the blue cube and place it on the green pad"
    assert ep["monitor"][0] == "ongoing" and ep["safety"][0] in ("safe", "unsafe")
    # The letterboxed views are real renders, not blank frames.
    assert ep["images"][0].std() > 10


class _World:
    def __init__(self):
        self.episode_time = 0.0
        self.done = False
        self.state = ("ongoing", "")

    def progress(self):
        return self.state


def test_an_episode_ends_after_its_outcome_plus_the_monitors_window():
    slot = _slot_without_sim()
    world = slot.runtime.world
    for t in np.arange(0.0, 2.0, 0.1):
        world.episode_time = t
        assert not slot.over()
    world.state = ("failed", "dropped")
    world.episode_time = 2.0
    assert not slot.over()
    world.state = ("ongoing", "")  # the latch is the slot's: a later state does not clear it
    world.episode_time = 2.0 + AFTER_END_S - 0.01
    assert not slot.over()
    world.episode_time = 2.0 + AFTER_END_S
    assert slot.over()


def _slot_without_sim():
    slot = EndAfterOutcome(SimpleNamespace(id="r"), LockstepConfig(), "test")
    slot.outcome_at = None
    slot.runtime = SimpleNamespace(world=_World())
    return slot


def test_plan_jobs_gives_each_task_its_seed_block_and_both_orders():
    jobs = plan_jobs({"place_in_order": 3, "pick_and_place": 2}, 880_000)
    assert [(j.task, j.driver, j.prompt.split()[2] if j.prompt else "", j.seeds) for j in jobs] == [
        ("pick_and_place", "policy", "", (880_000, 880_001)),
        ("place_in_order", "policy", "red", (890_000, 890_002)),
        ("place_in_order", "policy", "blue", (890_001,))]


def test_record_merges_after_an_expert_recording_in_its_layout(tmp_path):
    cell = ComponentCell(task="pick_and_place", seed=800_001, episodes=1, camera_size=64)
    expert = record_component_cell(cell)
    base = tmp_path / "expert.npz"
    np.savez(base, **expert)
    base.with_suffix(".npz.json").write_text('{"cell_seeds": {"pick_and_place": [800001, 800002]}}')
    out = tmp_path / "merged.npz"
    jobs = plan_jobs({"pick_and_place": 1}, 880_000, slots=1)
    summary = record(out, jobs, FLEET, workers=1, merge_with=base, max_episode_s=0.35)
    merged = load_components(out)
    assert set(merged) == set(expert)
    n_expert = len(expert["images"])
    assert summary["frames"] == len(merged["images"]) == n_expert + summary["policy_frames"]
    assert summary["policy_frames"] >= 3
    np.testing.assert_array_equal(merged["images"][:n_expert], expert["images"])
    assert merged["images"].shape[1:] == expert["images"].shape[1:]
    assert set(merged["seed"][n_expert:]) == {880_000} and set(merged["episode"][n_expert:]) == {0}
    assert summary["cell_seeds"] == {"pick_and_place": [880_000, 880_001],
                                     "pick_and_place (expert)": [800_001, 800_002]}


def test_frames_of_keys_each_frame_by_its_seed():
    ep = {k: ["x"] * 2 for k in TEXT_FIELDS}
    ep.update(time=[0.0, 0.1], images=[np.zeros((1, 3, 4, 4), np.uint8)] * 2, seed=7)
    out = frames_of([ep, dict(ep, seed=8)])
    assert out["seed"].tolist() == [7, 7, 8, 8] and out["episode"].tolist() == [0] * 4
    assert out["images"].shape == (4, 1, 3, 4, 4) and out["task"].tolist() == ["x"] * 4


def test_a_typo_in_a_task_name_is_a_usage_error_that_names_the_known_tasks(tmp_path, capsys):
    from physai_lab.training.policy_component_data import main

    with pytest.raises(SystemExit) as e:
        main(["--out", str(tmp_path / "x.npz"), "--episodes", "pick_and_plase=2"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "unknown task 'pick_and_plase'" in err and "pick_and_place" in err
    assert not (tmp_path / "x.npz").exists()
