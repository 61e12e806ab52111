"""Recorded multi-step data given the planner's current wording (training.relabel_subgoals): the
step episodes' prompts and the component frames' planner answers are rewritten from each row's
own step and order; frames, actions and everything else are copied unchanged."""
from __future__ import annotations

import json

import numpy as np
import pytest

from physai_ros.sim.multi_step import pick_and_place_instruction, subgoal_sequence
from physai_ros.sim.robot import ArmConfig
from physai_ros.sim.tasks import order_prompt
from physai_lab.training.dataset import EncodedEpisode, encode_png, load_dataset, write_dataset
from physai_lab.training.relabel_subgoals import relabel_components, relabel_dataset, step_prompt

RED_FIRST = order_prompt("red cube", "blue cube")
BLUE_FIRST = order_prompt("blue cube", "red cube")


def _episode(task: str, prompt: str, n: int = 3, shade: int = 0) -> EncodedEpisode:
    img = np.full((8, 8, 3), shade, dtype=np.uint8)
    return EncodedEpisode(task, prompt, 7, True, [[encode_png(img), encode_png(img)]] * n, np.zeros((n, 5)),
                          np.zeros((n, 6)), np.arange(n * 5.0).reshape(n, 5), np.zeros(n, bool),
                          subtask=["reach the cube"] * n, scene=["s"] * n)


def test_step_names_map_to_the_current_wording():
    assert step_prompt("place_in_order.step1.red") == subgoal_sequence("place_in_order", RED_FIRST)[0]
    assert step_prompt("place_in_order.step2.blue") == "pick up the blue cube and place it on the red cube"
    assert step_prompt("place_in_order.step2.red") == subgoal_sequence("place_in_order", BLUE_FIRST)[1]
    assert step_prompt("pick_and_place") is None and step_prompt("") is None
    with pytest.raises(ValueError, match="no order"):
        step_prompt("place_in_order.step3.red")


def test_a_step_dataset_keeps_its_frames_and_takes_the_new_prompts(tmp_path):
    old = [_episode("place_in_order.step1.blue", pick_and_place_instruction("blue cube"), shade=10),
           _episode("place_in_order.step2.red", pick_and_place_instruction("red cube"), n=4, shade=200),
           _episode("pick_and_place", pick_and_place_instruction("blue cube"), n=2, shade=90)]
    write_dataset(tmp_path / "old", old, fps=10, joint_names=ArmConfig().joint_names)
    counts = relabel_dataset(tmp_path / "old", tmp_path / "new")
    assert counts == {pick_and_place_instruction("blue cube"): 2,
                      "pick up the red cube and place it on the blue cube": 1}
    before, after = (load_dataset(tmp_path / d, image_size=8) for d in ("old", "new"))
    assert after.prompts == [pick_and_place_instruction("blue cube")] * 3 + \
        ["pick up the red cube and place it on the blue cube"] * 4 + [pick_and_place_instruction("blue cube")] * 2
    assert after.sim_task == before.sim_task and after.subtask == before.subtask
    np.testing.assert_array_equal(after.images, before.images)
    np.testing.assert_array_equal(after.action, before.action)
    # tasks.jsonl and the frames' task_index agree with the episodes' prompts (LeRobot v2.1)
    tasks = [json.loads(line) for line in (tmp_path / "new" / "meta" / "tasks.jsonl").read_text().splitlines()]
    assert [t["task"] for t in tasks] == list(counts)
    with pytest.raises(FileExistsError):
        relabel_dataset(tmp_path / "old", tmp_path / "new")


def test_component_frames_rewrite_only_the_later_steps_answers(tmp_path):
    pad = pick_and_place_instruction
    rows = [("place_in_order", RED_FIRST, pad("red cube")), ("place_in_order", RED_FIRST, pad("blue cube")),
            ("place_in_order", BLUE_FIRST, pad("red cube")), ("place_in_order", BLUE_FIRST, "done"),
            ("pick_and_place", pad("blue cube"), pad("blue cube"))]
    task, prompt, planner = (np.array(c) for c in zip(*rows))
    images = np.arange(5 * 12, dtype=np.uint8).reshape(5, 12)
    np.savez(tmp_path / "c.npz", task=task, prompt=prompt, planner=planner, images=images)
    (tmp_path / "c.npz.json").write_text(json.dumps({"frames": 5, "counts": {"planner": {}}}))
    assert relabel_components(tmp_path / "c.npz", tmp_path / "d.npz") == (2, 5)
    new = np.load(tmp_path / "d.npz")
    assert new["planner"].tolist() == [pad("red cube"), "pick up the blue cube and place it on the red cube",
                                       "pick up the red cube and place it on the blue cube", "done", pad("blue cube")]
    np.testing.assert_array_equal(new["images"], images)
    meta = json.loads((tmp_path / "d.npz.json").read_text())
    assert meta["relabelled"]["planner_answers_rewritten"] == 2 and sum(meta["counts"]["planner"].values()) == 5
