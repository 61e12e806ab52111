"""What a sim cell's robot should say about itself: the current subtask and a short scene
description, both from the simulator's ground truth ("a model that says something true").

The policy is co-trained to answer two fixed questions with these strings (training.text_data),
and the live sim robot can publish the same ground truth so an answer can be checked against it.

Subtasks (pick_and_place), from the observed state, as the scripted expert's phases fall into them:
  "reach the cube"     not holding the cube and not at it (approach, opening, backing off)
  "grasp"              the tool down at the cube, not holding it yet (descend, close)
  "place on the goal"  holding the cube (lift, carry, lower, release)
  "done"               the task's success test holds
  "failed: dropped"    the cube left the gripper away from the pad, above the table (more
                       than world.SET_DOWN_M), less than DROP_WINDOW_S ago; one let go at
                       table height is set down, as the world's ground truth says
reach has its own two: "reach the marker" (its target is the red marker, not the cube: saying
"reach the cube" there would be false) and "done".

A drop is an event, not a state one frame shows, so SubtaskTracker follows an episode frame by
frame; the label holds for DROP_WINDOW_S (the cube falls, the arm is still over it), then the
robot is reaching for the cube again. Positions are in the robot's base frame: +x away from the
base, +y to the robot's left, so "left"/"right" are as the robot sees the table.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

from physai_ros.sim.multi_step import scene_text
from physai_ros.sim.tasks import SceneConfig
from physai_ros.sim.world import WorldSnapshot, set_down

SUBTASK_QUESTION = "what is the current subtask?"
SCENE_QUESTION = "describe the scene."

REACH_CUBE, GRASP, PLACE, DONE, DROPPED = "reach the cube", "grasp", "place on the goal", "done", "failed: dropped"
REACH_MARKER = "reach the marker"
# The tasks the shipped policy is trained to narrate (train_policy's manifest lists these).
# place_in_order uses pick_and_place's labels, about the current subgoal's cube.
SUBTASKS = {"pick_and_place": (REACH_CUBE, GRASP, PLACE, DONE, DROPPED), "reach": (REACH_MARKER, DONE)}

DROP_WINDOW_S = 1.0
# "grasp": the tool within this of the cube horizontally and below the expert's travel height
# (ExpertConfig.hover 0.12 m minus the 2 cm it allows before it calls the tool "descended").
GRASP_XY = 0.015
GRASP_Z = 0.10
SIDE_BEARING = 0.3  # rad; placements span +-0.9 rad, so thirds
HIGH_Z = 0.19  # reach markers are placed 0.08-0.30 m high


def _side(xy) -> str:
    a = math.atan2(float(xy[1]), float(xy[0]))
    return "on the left" if a > SIDE_BEARING else "on the right" if a < -SIDE_BEARING else "in the middle"


def _relation(a, b) -> str:
    """Where a lies relative to b on the table, along the axis they differ most on."""
    dx, dy = float(a[0] - b[0]), float(a[1] - b[1])
    if abs(dy) >= abs(dx):
        return "left of" if dy > 0 else "right of"
    return "behind" if dx > 0 else "in front of"


def on_pad(snap: WorldSnapshot, scene: SceneConfig) -> bool:
    """The cube released and within the success test's reach of the pad centre (resting or
    settling onto it: the expert lets go 4 mm above the pad)."""
    return (not snap.grasped and np.linalg.norm(snap.object_pos[:2] - snap.goal[:2]) <= scene.place_tolerance
            and snap.object_pos[2] <= scene.goal_height + scene.object_size / 2 + 0.01)


def subtask_label(snap: WorldSnapshot, scene: SceneConfig = SceneConfig(), dropped: bool = False) -> str:
    """The subtask at this instant; `dropped`: the cube left the gripper away from the pad within
    DROP_WINDOW_S (SubtaskTracker knows, one snapshot cannot)."""
    if snap.success:
        return DONE
    if snap.task == "reach":
        return REACH_MARKER
    if snap.grasped:
        return PLACE
    if dropped:
        return DROPPED
    tool, obj = snap.tool, snap.object_pos
    if np.linalg.norm(tool[:2] - obj[:2]) <= GRASP_XY and tool[2] <= GRASP_Z:
        return GRASP
    return REACH_CUBE


def scene_description(snap: WorldSnapshot, scene: SceneConfig = SceneConfig()) -> str:
    """A short deterministic template of colours and coarse positions (renderer's colours:
    blue cube, green pad, red marker), e.g. "blue cube left of the green pad; pad on the right"."""
    if snap.task == "reach":
        height = "high" if snap.goal[2] > HIGH_Z else "low"
        return f"red marker {height} {_side(snap.goal)}; blue cube {_relation(snap.object_pos, snap.goal)} it"
    pad = f"pad {_side(snap.goal)}"
    if len(snap.objects) > 1:
        return scene_text(snap, scene, _side(snap.goal))
    if snap.grasped:
        return f"blue cube in the gripper; {pad}"
    if on_pad(snap, scene):
        return f"blue cube on the green pad; {pad}"
    return f"blue cube {_relation(snap.object_pos, snap.goal)} the green pad; {pad}"


class SubtaskTracker:
    """Follows one cell's snapshots in time order (any rate: a drop stays visible as a grasped ->
    released change between two calls) and labels them, drops included; a new episode clears it."""

    def __init__(self, scene: SceneConfig = SceneConfig(), window_s: float = DROP_WINDOW_S):
        self.scene, self.window_s = scene, window_s
        self._episode: Optional[int] = None
        self._was_grasped = False
        self._dropped_at: Optional[float] = None
        self._held = -1  # with several cubes: the one in the gripper at the last call
        self._carried: Optional[np.ndarray] = None  # where the held cube was at the last call

    def _set_down(self, snap: WorldSnapshot) -> bool:
        """The cube was let go low over the table or the pad beneath it (SimWorld's rule; a stack
        beside the pad is not looked at)."""
        if self._carried is None:
            return False
        p, sc = self._carried, self.scene
        below = sc.goal_height if np.linalg.norm(p[:2] - snap.goal[:2]) <= sc.goal_radius else 0.0
        return set_down(p, below, sc.object_size)

    def _released_on_goal(self, snap: WorldSnapshot) -> bool:
        if len(snap.objects) <= 1:
            return on_pad(snap, self.scene)
        # Several cubes: the one just let go (snap.object_pos is already the next one), onto
        # the pad or the stack on it.
        p = snap.objects[self._held] if 0 <= self._held < len(snap.objects) else snap.object_pos
        return bool(np.linalg.norm(p[:2] - snap.goal[:2]) <= self.scene.place_tolerance and p[2] >= 0)

    def observe(self, snap: WorldSnapshot) -> str:
        if snap.episode != self._episode:
            self._episode, self._was_grasped, self._dropped_at = snap.episode, False, None
            self._carried = None
        if self._was_grasped and not snap.grasped and not snap.success and not self._released_on_goal(snap) \
                and not self._set_down(snap):
            self._dropped_at = snap.episode_time
        self._was_grasped = snap.grasped
        self._held = snap.held
        self._carried = np.array(snap.object_pos, dtype=float) if snap.grasped else None
        if snap.grasped:
            self._dropped_at = None
        dropped = self._dropped_at is not None and snap.episode_time - self._dropped_at < self.window_s
        return subtask_label(snap, self.scene, dropped)


def narrate(tracker: SubtaskTracker, snap: WorldSnapshot) -> tuple[str, str]:
    """(subtask, scene) of a frame, the two answers a recorded frame carries."""
    return tracker.observe(snap), scene_description(snap, tracker.scene)
