"""Tasks: randomised initial placements, a success test, a time limit and a prompt.

Placements are sampled in the arm's comfortable workspace (an annulus in front of the base), so
every sampled episode is solvable; the sampling uses the world's seeded generator only.
"""
from __future__ import annotations

import math
import re
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
    others: tuple[np.ndarray, ...] = ()  # further cubes (multi-object tasks), in the task's order


def _sample_on_table(rng: np.random.Generator, cfg: SceneConfig) -> np.ndarray:
    r = rng.uniform(cfg.min_radius, cfg.max_radius)
    a = rng.uniform(-cfg.max_angle, cfg.max_angle)
    return np.array([r * math.cos(a), r * math.sin(a)])


class Task:
    name = "task"
    prompt = ""
    timeout_s = 20.0
    object_names: tuple[str, ...] = ("blue cube",)  # the renderer's colours, one per cube
    reads_prompt = False  # True: the task's goal depends on its prompt (make_task passes one)
    failure_reason = ""  # what wrong_order reports (multi-object tasks)

    def sample(self, rng: np.random.Generator, cfg: SceneConfig) -> Placement:
        raise NotImplementedError

    @classmethod
    def prompt_variants(cls) -> tuple[str, ...]:
        """Every instruction the task can be given that changes its goal (the task's own prompt
        first): what recordings cycle through so a model learns to read it."""
        return (cls.prompt,)

    def success(self, *, tool: np.ndarray, object_pos: np.ndarray, grasped: bool, object_resting: bool,
                goal: np.ndarray, cfg: SceneConfig) -> bool:
        raise NotImplementedError

    # Multi-object tasks (len(object_names) > 1) answer these instead of success().
    def success_all(self, *, objects: list[np.ndarray], held: int | None, resting: list[bool], goal: np.ndarray,
                    cfg: SceneConfig) -> bool:
        raise NotImplementedError

    def focus(self, objects: list[np.ndarray], goal: np.ndarray, cfg: SceneConfig) -> int:
        """The cube the task wants moved next (when none is held)."""
        return 0

    def wrong_order(self, objects: list[np.ndarray], held: int | None, goal: np.ndarray, cfg: SceneConfig) -> bool:
        """A state the task cannot succeed from without undoing something (a retry)."""
        return False


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


CUBE_NAMES = ("red cube", "blue cube")  # the renderer's cube colours (sim.render.CUBE_COLOURS)


def cube_order(prompt: str) -> tuple[str, ...]:
    """The cubes in the order a prompt first names them: "place the blue cube then the red cube
    on the green pad" -> ("blue cube", "red cube"). A colour may be named again later ("... on
    top of the red one") without changing the order. ValueError unless both cubes are named."""
    named = tuple(dict.fromkeys(f"{c} cube" for c in re.findall(r"\b(red|blue)\b", prompt.lower())))
    if sorted(named) != sorted(CUBE_NAMES):
        raise ValueError(f"place_in_order's prompt must name both cubes ({', '.join(CUBE_NAMES)}) in the "
                         f"order they go on the pad, got {prompt!r}")
    return named


def order_prompt(first: str, second: str) -> str:
    """place_in_order's instruction for one order: "place the red cube then the blue cube on the green pad"."""
    return f"place the {first} then the {second} on the green pad"


def centred_over(p: np.ndarray, below: np.ndarray, size: float) -> bool:
    """p's centre lies over the top face of the cube of side `size` at `below` (x and y only): the
    cube rests on it (SimWorld's stacking) and counts as on top (PlaceInOrderTask's success);
    beyond it, a real cube tips off."""
    return bool(abs(p[0] - below[0]) < size / 2 and abs(p[1] - below[1]) < size / 2)


class PlaceInOrderTask(Task):
    """Two cubes onto one pad in the order the prompt names them: the first on the pad, then the
    second on top of it (the stack makes the order physical). Each step is what a single-object
    prompt says (sim.multi_step.subgoal_text); the second cube on the pad first is a failure (it
    must come off again). Cube index i is the i-th in the prompt's order (object_names), whatever
    its colour; the renderer colours each by its name."""
    name = "place_in_order"
    prompt = order_prompt(*CUBE_NAMES)
    timeout_s = 40.0
    object_names = cube_order(prompt)
    failure_reason = "wrong_order"
    min_cube_separation = 0.10
    reads_prompt = True

    def __init__(self, prompt: str | None = None):
        if prompt is not None:
            self.object_names = cube_order(prompt)
            self.prompt = prompt

    @classmethod
    def prompt_variants(cls) -> tuple[str, ...]:
        return (cls.prompt, order_prompt(*reversed(CUBE_NAMES)))

    def sample(self, rng: np.random.Generator, cfg: SceneConfig) -> Placement:
        goal_xy = _sample_on_table(rng, cfg)
        cubes: list[np.ndarray] = []
        for _ in range(2):
            for _ in range(100):
                xy = _sample_on_table(rng, cfg)
                if np.linalg.norm(xy - goal_xy) >= cfg.min_separation and all(
                        np.linalg.norm(xy - c) >= self.min_cube_separation for c in cubes):
                    break
            cubes.append(xy)
        pos = [np.array([c[0], c[1], cfg.object_size / 2]) for c in cubes]
        return Placement(object_pos=pos[0], goal=np.array([goal_xy[0], goal_xy[1], cfg.goal_height]),
                         others=tuple(pos[1:]))

    @staticmethod
    def _on_pad(p: np.ndarray, goal: np.ndarray, cfg: SceneConfig) -> bool:
        """Released onto the pad itself (settling included: the expert lets go 4 mm above)."""
        return bool(np.linalg.norm(p[:2] - goal[:2]) <= cfg.place_tolerance
                    and p[2] <= cfg.goal_height + cfg.object_size / 2 + 0.01)

    @staticmethod
    def _on_top(p: np.ndarray, below: np.ndarray, cfg: SceneConfig) -> bool:
        return centred_over(p, below, cfg.object_size) and 0 < p[2] - below[2] <= cfg.object_size + 0.01

    def success_all(self, *, objects, held, resting, goal, cfg) -> bool:
        first, second = objects
        return held is None and all(resting) and self._on_pad(first, goal, cfg) and self._on_top(second, first, cfg)

    def focus(self, objects, goal, cfg) -> int:
        return 1 if self._on_pad(objects[0], goal, cfg) else 0

    def wrong_order(self, objects, held, goal, cfg) -> bool:
        return held != 1 and self._on_pad(objects[1], goal, cfg) and not self._on_pad(objects[0], goal, cfg)


TASKS: dict[str, type[Task]] = {"reach": ReachTask, "pick_and_place": PickAndPlaceTask,
                                "place_in_order": PlaceInOrderTask}
# Tasks with the green pad (drawn, touched by the wrench, the surface cubes are placed on).
PAD_TASKS = frozenset({"pick_and_place", "place_in_order"})


def make_task(name: str, prompt: str | None = None) -> Task:
    """The task `name`; `prompt` (None or "": the task's own) sets what tasks that read their
    instruction do (place_in_order: the cubes' order). Other tasks keep their own prompt."""
    try:
        cls = TASKS[name]
    except KeyError:
        raise ValueError(f"unknown task {name!r}; known: {sorted(TASKS)}") from None
    return cls(prompt or None) if cls.reads_prompt else cls()
