"""The shipped sim_pi0_pipeline (docs/training.md, "Pipeline components co-training") answers the
pipeline components through the VLA-backbone backend, as config/fleet_pipeline.yaml serves it:
on an unseen seed's frames (expert-driven, intruder and failures injected) its safety and planner
answers match the simulator's ground truth. Greedy decoding on a seeded sim: deterministic."""
from pathlib import Path

import numpy as np
import pytest

from physai_lab.evaluation.components import ask, backend_for, robot_prompts, trained_questions
from physai_lab.training.component_data import ComponentCell, record_component_cell

CHECKPOINT = Path(__file__).resolve().parents[2] / "physai_ros" / "assets" / "policy" / "sim_pi0_pipeline"


@pytest.fixture(scope="module")
def frames():
    # A seed far from training's (800,000-820,019) and the doc's evaluation (900,000-920,007).
    cell = ComponentCell(task="place_in_order", seed=931_005, episodes=1, intruder_rate_per_min=12.0, drop_prob=0.0,
                         knock_prob=0.0, fps=2)
    return record_component_cell(cell)


def test_the_pipeline_checkpoint_sees_the_intruder_and_plans_the_next_cube(frames):
    backend = backend_for(CHECKPOINT)
    prompts = robot_prompts({}, ["place_in_order"])
    safety_truth = list(frames["safety"])
    assert "unsafe" in safety_truth and "safe" in safety_truth, "the cell shows the intruder and its absence"
    rows = list(range(len(safety_truth)))
    questions = trained_questions(CHECKPOINT)  # the wordings its manifest says it was trained on
    said = ask(backend, frames, "safety", prompts, rows, question=questions["safety"])
    right = np.mean([s == t for s, t in zip(said, safety_truth)])
    unsafe_rows = [r for r in rows if safety_truth[r] == "unsafe"]
    caught = np.mean([said[r] == "unsafe" for r in unsafe_rows])
    # docs/training.md: 0.97 accuracy, 39/40 visits caught on 4,948 unseen frames.
    assert right >= 0.85 and caught >= 0.7, (right, caught, list(zip(said, safety_truth)))
    plans = ask(backend, frames, "planner", prompts, rows, question=questions["planner"])
    truth_order = list(dict.fromkeys(frames["planner"]))  # red, then blue, then done
    assert set(plans) <= set(truth_order), plans
    # The plan only moves forward (never blue before red): a planner System 1 can follow.
    said_order = list(dict.fromkeys(plans))
    assert said_order == truth_order[:len(said_order)], said_order
    # It lags the simulator by a few frames at each change (this seed: 2 s at 2 frames/s after
    # the red cube lands and after the blue one), hence not docs/training.md's 0.97 here.
    exact = np.mean([p == t for p, t in zip(plans, frames["planner"])])
    assert exact >= 0.6, list(zip(plans, frames["planner"]))
    backend.close()


def test_the_evaluation_reports_the_planner_per_instruction(frames):
    """bench/pipeline_components.py's figures on this cell: every component judged, the planner
    also per instruction of a task that reads it (here the one order this cell was told)."""
    from physai_lab.evaluation.components import evaluate

    rep = evaluate(CHECKPOINT, frames, {}, every=3, log=lambda m: None)
    n = len(range(0, len(frames["task"]), 3))
    assert rep["questions"] == trained_questions(CHECKPOINT)
    assert rep["monitor"]["accuracy"] is not None and rep["planner"]["frames"] == n
    (told,) = rep["planner"]["by_prompt"]
    assert told == str(frames["prompt"][0]) and rep["planner"]["by_prompt"][told]["frames"] == n
    assert rep["planner"]["by_prompt"][told]["exact_match"] == rep["planner"]["exact_match"]


def test_the_planner_follows_the_order_the_robot_was_told():
    """Told blue first (an unseen seed), the planner's question carries the instruction ({task})
    and its plan starts with the blue cube: the order comes from the prompt, not the scene
    (docs/training.md "Both orders": 0.88 exact told blue first; 0.19 before)."""
    from physai_ros.sim.tasks import PlaceInOrderTask

    blue_first = PlaceInOrderTask.prompt_variants()[1]
    cell = ComponentCell(task="place_in_order", seed=931_006, episodes=1, prompt=blue_first,
                         intruder_rate_per_min=0.0, drop_prob=0.0, knock_prob=0.0, fps=2)
    frames = record_component_cell(cell)
    assert "{task}" in trained_questions(CHECKPOINT)["planner"]
    backend = backend_for(CHECKPOINT)
    plans = ask(backend, frames, "planner", robot_prompts({}, ["place_in_order"]), list(range(len(frames["task"]))),
                question=trained_questions(CHECKPOINT)["planner"])
    backend.close()
    truth_order = list(dict.fromkeys(frames["planner"]))
    assert truth_order[0].startswith("pick up the blue cube"), truth_order
    said_order = list(dict.fromkeys(plans))
    assert said_order == truth_order[:len(said_order)] and len(said_order) >= 2, said_order
    exact = np.mean([p == t for p, t in zip(plans, frames["planner"])])
    assert exact >= 0.6, list(zip(plans, frames["planner"]))
