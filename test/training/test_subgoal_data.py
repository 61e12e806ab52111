"""Place_in_order expert episodes cut into the planner's subgoals (System 1's training
data for executing a plan), and the per-task weights of the action batches."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from physai_ros.config.fleet import default_fleet_path
from physai_ros.engine.processor.tokenizer import PromptTokenizer
from physai_ros.sim.multi_step import DONE_SUBGOAL, subgoal_sequence
from physai_ros.sim.robot import ArmConfig
from physai_lab.training.dataset import EncodedEpisode, load_dataset, write_dataset
from physai_lab.training.expert_data import RecordConfig, record_cell
from physai_lab.training.subgoal_data import split_by_subgoal
from physai_lab.training.train import BatchMaker, ModelSize, TrainConfig

TOKENIZER = str(default_fleet_path().parents[1] / "physai_ros" / "assets" / "tokenizer.json")
TINY = ModelSize(image_size=28, patch_size=14, vision_width=32, vision_depth=1, vlm_width=32, expert_width=32,
                 depth=1, heads=2, head_dim=16, chunk_size=4)


@pytest.fixture(scope="module")
def episode():
    (ep,) = record_cell(RecordConfig(task="place_in_order", seed=4, episodes=1, image_width=48, image_height=32,
                                     fps=10))
    assert ep.success  # the multi-step expert finishes place_in_order (docs/sim_events.md: 40/40 seeds)
    return ep


def test_an_episode_is_cut_where_the_planners_answer_changes(episode):
    steps = split_by_subgoal(episode)
    plan = [s for s in subgoal_sequence("place_in_order") if s != DONE_SUBGOAL]
    assert [s.prompt for s in steps] == plan
    # one task name per prompt and step (train.BatchMaker gives a task's frames one prompt)
    assert [s.task for s in steps] == ["place_in_order.step1.red", "place_in_order.step2.blue"]
    # every frame kept once, in order; the "done" frames rest with the last step
    assert sum(len(s) for s in steps) == len(episode)
    assert np.array_equal(np.concatenate([np.stack(s.state) for s in steps]), np.stack(episode.state))
    assert set(steps[0].subgoal) == {plan[0]} and set(steps[1].subgoal) == {plan[1], DONE_SUBGOAL}
    assert steps[1].subgoal[-1] == DONE_SUBGOAL and steps[0].success and steps[1].success  # both kept by the loader
    assert all(len(s.images) == len(s.action) == len(s.subtask) == len(s) for s in steps)


def test_only_the_steps_asked_for_are_kept(episode):
    """--keep-steps 2: the stack on the first cube without the first placement (whose target,
    with --first-offset-cm, is an offset the picture does not show)."""
    every = split_by_subgoal(episode)
    (second,) = split_by_subgoal(episode, keep_steps=(2,))
    assert second.task == every[1].task and np.array_equal(np.stack(second.state), np.stack(every[1].state))
    assert [s.task for s in split_by_subgoal(episode, keep_steps=(1, 2))] == [s.task for s in every]


@pytest.mark.parametrize("bad", ["two", "0", "1,x"])
def test_a_bad_step_list_is_a_usage_error(bad, capsys):
    from physai_lab.training.subgoal_data import main

    with pytest.raises(SystemExit) as exit_:
        main(["--out", "unused", "--keep-steps", bad])
    assert exit_.value.code == 2 and "--keep-steps" in capsys.readouterr().err


def test_task_weights_set_the_share_of_action_batches(episode, tmp_path):
    steps = [EncodedEpisode.encode(s) for s in split_by_subgoal(episode)]
    write_dataset(tmp_path / "d", steps, fps=10, joint_names=ArmConfig().joint_names)
    data = load_dataset(tmp_path / "d", image_size=TINY.image_size)
    tok = PromptTokenizer(TOKENIZER, 48)
    gen = np.random.default_rng(0)
    even = BatchMaker(data, TrainConfig(size=TINY), tok, {}, gen)
    assert even.task_probs is None  # no weights: drawn as before weights existed
    # each step keeps its own prompt (a task's frames share one)
    assert {t: ps[0] for t, ps in even.prompts_used.items()} == {s.task: s.prompt for s in steps}
    tc = TrainConfig(size=TINY, task_weights={"place_in_order.step1.red": 3.0})
    weighted = BatchMaker(data, tc, tok, {}, gen)
    assert dict(zip(weighted.by_task, weighted.task_probs)) == pytest.approx(
        {"place_in_order.step1.red": 0.75, "place_in_order.step2.blue": 0.25})
    picks = []
    for _ in range(40):
        _, _, tokens, mask, *_ = weighted.batch(8)
        for row, m in zip(tokens.tolist(), mask.tolist()):
            picks.append(tok.decode_ids([t for t, k in zip(row, m) if k]).strip())
    share = sum(p == steps[0].prompt for p in picks) / len(picks)
    assert 0.62 < share < 0.88, share
    with pytest.raises(ValueError, match="task_weights"):
        BatchMaker(data, TrainConfig(size=TINY, task_weights={"place_in_ordr.step1": 1.0}), tok, {}, gen)
    with pytest.raises(ValueError, match="task_weights"):
        BatchMaker(data, TrainConfig(size=TINY, task_weights={"place_in_order.step1.red": 0.0}), tok, {}, gen)


def test_both_orders_record_each_cube_first_and_keep_one_prompt_per_task(tmp_path):
    """--both-orders: cells alternate red first / blue first, so each cube is both the one onto the
    bare pad and the one onto the stack; the steps' task names keep the four apart. A dataset whose
    task carries two prompts is refused (it would be trained on the first prompt only)."""
    from physai_ros.sim.tasks import PlaceInOrderTask
    from physai_lab.training.subgoal_data import plan_subgoal_cells

    base = RecordConfig(task="place_in_order", episodes=1, image_width=48, image_height=32, fps=10)
    cells = plan_subgoal_cells(base, 2, 4, both_orders=True)
    assert [c.prompt for c in cells] == list(PlaceInOrderTask.prompt_variants())
    assert [c.seed for c in cells] == [4, 5] and plan_subgoal_cells(base, 2, 4)[1].prompt == ""
    (blue_first,) = record_cell(cells[1])
    assert blue_first.success and blue_first.prompt == PlaceInOrderTask.prompt_variants()[1]
    steps = split_by_subgoal(blue_first)
    assert [(s.task, s.prompt) for s in steps] == [
        ("place_in_order.step1.blue", "pick up the blue cube and place it on the green pad"),
        ("place_in_order.step2.red", "pick up the red cube and place it on the green pad")]
    # the same episode under one task name for both steps: two prompts, refused
    mixed = [EncodedEpisode.encode(dataclasses.replace(s, task="place_in_order.step")) for s in steps]
    write_dataset(tmp_path / "m", mixed, fps=10, joint_names=ArmConfig().joint_names)
    data = load_dataset(tmp_path / "m", image_size=TINY.image_size)
    with pytest.raises(ValueError, match="2 prompts"):
        BatchMaker(data, TrainConfig(size=TINY), PromptTokenizer(TOKENIZER, 48), {}, np.random.default_rng(0))


def test_cells_can_place_the_first_cube_off_the_pad_centre():
    """--first-offset-cm: a seeded offset per cell within the bound, none by default; the expert
    of such a cell records a successful episode with its first cube there."""
    from physai_lab.training.subgoal_data import plan_subgoal_cells

    base = RecordConfig(task="place_in_order", episodes=1, image_width=48, image_height=32, fps=10)
    assert {c.first_place_offset for c in plan_subgoal_cells(base, 3, 7)} == {(0.0, 0.0)}
    cells = plan_subgoal_cells(base, 3, 7, first_offset_m=0.025)
    offsets = np.array([c.first_place_offset for c in cells])
    assert np.all(np.abs(offsets) <= 0.025) and len({tuple(o) for o in offsets}) == 3
    assert [c.first_place_offset for c in plan_subgoal_cells(base, 3, 7, first_offset_m=0.025)] == \
        [c.first_place_offset for c in cells]
    (episode,) = record_cell(cells[0])
    assert episode.success
