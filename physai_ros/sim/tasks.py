"""Tasks: randomised initial placements, a success test, a time limit and a prompt.

Placements are sampled in the arm's comfortable workspace (an annulus in front of the base), so
every sampled episode is solvable; the sampling uses the world's seeded generator only.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SceneConfig:
    object_size: float = 0.04  # cube edge, m
    object_mass: float = 0.2  # kg
    goal_radius: float = 0.05  # placing pad radius, m
    goal_height: float = 0.01  # the pad stands this high on the table
    reach_tolerance: float = 0.03
    place_tolerance: float = 0.04  # object centre to pad centre, horizontally
    min_radius: float = 0.28  # placements: distance from the base
    max_radius: float = 0.48
    max_angle: float = 0.9  # placements: |bearing| from the x axis, rad
    min_separation: float = 0.15  # object to goal


@dataclass(frozen=True)
class Placement:
    object_pos: np.ndarray  # cube centre, resting on the table
    goal: np.ndarray  # reach: a point in the air; pick_and_place: centre of the pad's top face


def _sample_on_table(rng: np.random.Generator, cfg: SceneConfig) -> np.ndarray:
    r = rng.uniform(cfg.min_radius, cfg.max_radius)
    a = rng.uniform(-cfg.max_angle, cfg.max_angle)
    return np.array([r * math.cos(a), r * math.sin(a)])


class Task:
    name = "task"
    prompt = ""
    timeout_s = 20.0

    def sample(self, rng: np.random.Generator, cfg: SceneConfig) -> Placement:
        raise NotImplementedError

    def success(self, *, tool: np.ndarray, object_pos: np.ndarray, grasped: bool, object_resting: bool,
                goal: np.ndarray, cfg: SceneConfig) -> bool:
        raise NotImplementedError


class ReachTask(Task):
    name = "reach"
    prompt = "move the gripper to the red marker"
    timeout_s = 8.0

    def sample(self, rng: np.random.Generator, cfg: SceneConfig) -> Placement:
        goal_xy = _sample_on_table(rng, cfg)
        goal = np.array([goal_xy[0], goal_xy[1], rng.uniform(0.08, 0.30)])
        # The cube is a distractor: keep it away from the marker's footprint.
        for _ in range(100):
            obj_xy = _sample_on_table(rng, cfg)
            if np.linalg.norm(obj_xy - goal_xy) >= cfg.min_separation:
                break
        return Placement(object_pos=np.array([obj_xy[0], obj_xy[1], cfg.object_size / 2]), goal=goal)

    def success(self, *, tool, object_pos, grasped, object_resting, goal, cfg) -> bool:
        return bool(np.linalg.norm(tool - goal) <= cfg.reach_tolerance)


class PickAndPlaceTask(Task):
    name = "pick_and_place"
    prompt = "pick up the blue cube and place it on the green pad"
    timeout_s = 20.0

    def sample(self, rng: np.random.Generator, cfg: SceneConfig) -> Placement:
        obj_xy = _sample_on_table(rng, cfg)
        for _ in range(100):
            goal_xy = _sample_on_table(rng, cfg)
            if np.linalg.norm(obj_xy - goal_xy) >= cfg.min_separation:
                break
        return Placement(object_pos=np.array([obj_xy[0], obj_xy[1], cfg.object_size / 2]),
                         goal=np.array([goal_xy[0], goal_xy[1], cfg.goal_height]))

    def success(self, *, tool, object_pos, grasped, object_resting, goal, cfg) -> bool:
        return (not grasped) and object_resting and bool(
            np.linalg.norm(object_pos[:2] - goal[:2]) <= cfg.place_tolerance)


TASKS: dict[str, type[Task]] = {"reach": ReachTask, "pick_and_place": PickAndPlaceTask}


def make_task(name: str) -> Task:
    try:
        return TASKS[name]()
    except KeyError:
        raise ValueError(f"unknown task {name!r}; known: {sorted(TASKS)}") from None
