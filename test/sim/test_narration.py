"""sim.narration: the subtask and scene answers the policy is co-trained on, from ground truth."""
from __future__ import annotations

import dataclasses

import numpy as np

from physai_ros.sim.expert import ScriptedExpert
from physai_ros.sim.narration import (DONE, DROP_WINDOW_S, DROPPED, GRASP, PLACE, REACH_CUBE, REACH_MARKER,
                                      SUBTASKS, SubtaskTracker, scene_description, subtask_label)
from physai_ros.sim.world import SimWorld


def _run_expert(task: str, seed: int, seconds: float = 20.0, every: int = 6):
    """Labels of one expert episode at 10 Hz (expert at 60 Hz, physics at 480 Hz)."""
    world = SimWorld(task=task, seed=seed)
    expert, tracker, labels, scenes = ScriptedExpert(world), SubtaskTracker(world.scene), [], []
    for step in range(int(seconds * 60)):
        snap = world.snapshot()
        if step % every == 0:
            labels.append(tracker.observe(snap))
            scenes.append(scene_description(snap, world.scene))
        if snap.success and labels[-1] == DONE:
            break
        world.set_command(expert.act(snap, 1 / 60))
        for _ in range(8):
            world.step(1 / 480)
    return labels, scenes


def _collapse(xs):
    return [x for i, x in enumerate(xs) if i == 0 or xs[i - 1] != x]


def test_an_expert_pick_and_place_goes_through_the_subtasks_in_order():
    labels, scenes = _run_expert("pick_and_place", seed=3)
    assert _collapse(labels) == [REACH_CUBE, GRASP, PLACE, DONE]
    assert set(labels) <= set(SUBTASKS["pick_and_place"])
    assert scenes[0].startswith("blue cube ") and "green pad" in scenes[0]
    assert any(s.startswith("blue cube in the gripper; pad ") for s in scenes)
    assert scenes[-1].startswith("blue cube on the green pad; pad ")


def test_reach_says_reach_the_marker_then_done():
    labels, scenes = _run_expert("reach", seed=4)
    assert _collapse(labels) == [REACH_MARKER, DONE]
    assert all(s.startswith("red marker ") and s.endswith(" it") for s in scenes)


def _snap(world: SimWorld, **changes):
    return dataclasses.replace(world.snapshot(), **changes)


def test_a_drop_away_from_the_pad_is_reported_for_the_window_only():
    world = SimWorld(task="pick_and_place", seed=1)
    tracker = SubtaskTracker(world.scene)
    goal = np.array([0.35, 0.2, world.scene.goal_height])
    held = np.array([0.35, -0.2, 0.12])
    assert tracker.observe(_snap(world, grasped=True, object_pos=held, goal=goal, episode_time=1.0)) == PLACE
    falling = _snap(world, grasped=False, object_pos=held - [0, 0, 0.05], goal=goal, episode_time=1.1)
    assert tracker.observe(falling) == DROPPED
    assert subtask_label(falling, world.scene) != DROPPED  # one snapshot alone cannot know
    later = dataclasses.replace(falling, object_pos=held * [1, 1, 0] + [0, 0, 0.02], tool=held)
    assert tracker.observe(dataclasses.replace(later, episode_time=1.1 + DROP_WINDOW_S - 0.05)) == DROPPED
    assert tracker.observe(dataclasses.replace(later, episode_time=1.1 + DROP_WINDOW_S + 0.05)) == REACH_CUBE

    # Letting go at table height away from the pad is setting the cube down, not dropping it.
    tracker = SubtaskTracker(world.scene)
    low = held * [1, 1, 0] + [0, 0, world.scene.object_size / 2 + 0.01]
    tracker.observe(_snap(world, grasped=True, object_pos=low, tool=low, goal=goal, episode_time=1.5))
    assert tracker.observe(_snap(world, grasped=False, object_pos=low - [0, 0, 0.01], tool=low, goal=goal,
                                 episode_time=1.6)) == GRASP

    # Letting go just above the pad is placing, not dropping; a new episode forgets the past.
    tracker = SubtaskTracker(world.scene)
    tracker.observe(_snap(world, grasped=True, object_pos=goal + [0, 0, 0.028], goal=goal, episode_time=2.0))
    assert tracker.observe(_snap(world, grasped=False, object_pos=goal + [0, 0, 0.026], goal=goal,
                                 episode_time=2.1)) != DROPPED
    tracker.observe(_snap(world, grasped=True, object_pos=held, goal=goal, episode_time=3.0))
    fresh = _snap(world, grasped=False, object_pos=held * [1, 1, 0] + [0, 0, 0.02], goal=goal,
                  episode=world.episode + 1, episode_time=0.0)
    assert tracker.observe(fresh) != DROPPED


def test_scene_words_follow_the_robot_frame():
    """+y is the robot's left, +x away from it; the relation uses the larger offset."""
    world = SimWorld(task="pick_and_place", seed=2)
    goal = np.array([0.38, -0.25, world.scene.goal_height])  # bearing -0.58 rad: on the right
    for cube, rel in (([0.38, 0.05], "left of"), ([0.38, -0.45], "right of"), ([0.55, -0.2], "behind"),
                      ([0.2, -0.3], "in front of")):
        snap = _snap(world, grasped=False, object_pos=np.array([*cube, 0.02]), goal=goal)
        assert scene_description(snap, world.scene) == f"blue cube {rel} the green pad; pad on the right"
    snap = _snap(world, grasped=True, object_pos=np.array([0.3, 0.0, 0.1]), goal=goal * [1, -1, 1])
    assert scene_description(snap, world.scene) == "blue cube in the gripper; pad on the left"
    reach = SimWorld(task="reach", seed=2)
    snap = _snap(reach, goal=np.array([0.4, 0.0, 0.25]), object_pos=np.array([0.4, -0.2, 0.02]))
    assert scene_description(snap, reach.scene) == "red marker high in the middle; blue cube right of it"
