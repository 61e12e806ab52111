"""The multi-step task's planner ground truth and its scripted expert.

place_in_order (sim.tasks.PlaceInOrderTask): "place the red cube then the blue cube on the green
pad" (or blue then red: the prompt sets the order). A perfect System 2 planner splits it into
single-object instructions of the kind the
action policy's prompts already are ("pick up the blue cube and place it on the green pad"), one
at a time; `subgoal_text` is that answer for any state, and the expert solves the task subgoal
by subgoal with the single-object ScriptedExpert, so its recordings are per-subgoal
demonstrations (the prompt a System 1 policy would be given is subgoal_text of each frame).

For single-object tasks the planner's answer is the task's own prompt (nothing to split).
"""
from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Optional

import numpy as np

from physai_ros.sim.expert import ExpertConfig, ScriptedExpert
from physai_ros.sim.tasks import SceneConfig, make_task
from physai_ros.sim.world import SimWorld, WorldSnapshot

DONE_SUBGOAL = "done"


def pick_and_place_instruction(object_name: str) -> str:
    """One subgoal, worded like the single-object task's prompt."""
    return f"pick up the {object_name} and place it on the green pad"


def subgoal_text(snap: WorldSnapshot) -> str:
    """What a perfect System 2 planner answers now: the next single-object instruction, "done"
    once the task's success test held; the task prompt for single-object tasks."""
    if len(snap.objects) <= 1:
        return make_task(snap.task).prompt
    if snap.success:
        return DONE_SUBGOAL
    if snap.held >= 0 and snap.held > snap.next_cube >= 0:
        # The gripper holds a cube the task only wants later (a policy picked the wrong one): the
        # planner names the one to move now (the expert, told so, puts the wrong one down first),
        # it does not tell System 1 to carry on with its mistake. A held cube otherwise is the one
        # being placed (it stays named until released, even as the pad's test already holds).
        idx = snap.next_cube
    else:  # snap.object_pos is the held cube, else the task's next one (SimWorld.focus_index)
        idx = snap.held if snap.held >= 0 else _index_of(snap, snap.object_pos)
    return pick_and_place_instruction(snap.object_names[idx])


def subgoal_sequence(task: str, prompt: str | None = None) -> tuple[str, ...]:
    """The planner's answers over a successful episode, in order (for the task run with
    `prompt`: place_in_order's order is the prompt's)."""
    t = make_task(task, prompt)
    if len(t.object_names) <= 1:
        return (t.prompt,)
    return tuple(pick_and_place_instruction(n) for n in t.object_names) + (DONE_SUBGOAL,)


def _index_of(snap: WorldSnapshot, pos: np.ndarray) -> int:
    return int(np.argmin([float(np.linalg.norm(p - pos)) for p in snap.objects]))


def _relation(a, b) -> str:
    dx, dy = float(a[0] - b[0]), float(a[1] - b[1])
    if abs(dy) >= abs(dx):
        return "left of" if dy > 0 else "right of"
    return "behind" if dx > 0 else "in front of"


def scene_text(snap: WorldSnapshot, scene: SceneConfig, pad_side: str) -> str:
    """Scene description with several cubes, each in the narration's template: "red cube on the
    green pad; blue cube in the gripper; pad on the left"."""
    parts = []
    half = scene.object_size / 2
    for i, (p, name) in enumerate(zip(snap.objects, snap.object_names)):
        if i == snap.held:
            parts.append(f"{name} in the gripper")
            continue
        below = [j for j, q in enumerate(snap.objects)
                 if j != i and j != snap.held and np.all(np.abs(p[:2] - q[:2]) < scene.object_size)
                 and 0 < p[2] - q[2] <= scene.object_size + 0.01]
        if below:
            parts.append(f"{name} on the {snap.object_names[below[0]]}")
        elif p[2] < 0:
            parts.append(f"{name} off the table")
        elif (np.linalg.norm(p[:2] - snap.goal[:2]) <= scene.place_tolerance
              and p[2] <= scene.goal_height + half + 0.01):
            parts.append(f"{name} on the green pad")
        else:
            parts.append(f"{name} {_relation(p, snap.goal)} the green pad")
    return "; ".join(parts + [f"pad {pad_side}"])


class _View:
    """What ScriptedExpert reads from a world: arm, scene and task name."""

    def __init__(self, arm, scene: SceneConfig):
        self.arm, self.scene = arm, scene
        self.task = SimpleNamespace(name="pick_and_place")


class MultiStepExpert(ScriptedExpert):
    """Solves place_in_order one subgoal at a time: the single-object expert on the snapshot's
    focus cube (the held one, else the task's next one), lowering onto the top of the stack when
    the pad already carries a cube. A wrong cube in the hand (only a policy gets there) is put
    back down on the table where it is. rollout() is ScriptedExpert's, over this act()."""

    def __init__(self, world_like: SimWorld, cfg: Optional[ExpertConfig] = None):
        super().__init__(world_like, cfg)
        self.arm = world_like.arm
        self.multi_task = world_like.task
        self._experts: dict[float, ScriptedExpert] = {}

    def _expert(self, surface: float) -> ScriptedExpert:
        """A single-object expert whose "pad" top is at height `surface` (it places there)."""
        if surface not in self._experts:
            scene = dataclasses.replace(self.scene, goal_height=surface)
            self._experts[surface] = ScriptedExpert(_View(self.arm, scene), self.cfg)
        return self._experts[surface]

    def act(self, s: WorldSnapshot, dt: float) -> np.ndarray:
        objs = list(s.objects)
        if s.held >= 0:
            if self.multi_task.focus(objs, s.goal, self.scene) != s.held:
                put_down = dataclasses.replace(s, goal=np.array([s.tool[0], s.tool[1], 0.0]))
                return self._expert(0.0).act(put_down, dt)
            focus = s.held
        else:
            focus = _index_of(s, s.object_pos)
        stacked = [p for i, p in enumerate(objs) if i != focus and i != s.held and p[2] >= 0
                   and np.linalg.norm(p[:2] - s.goal[:2]) <= self.scene.place_tolerance]
        stack = len(stacked)
        expert = self._expert(self.scene.goal_height + stack * self.scene.object_size)
        if (s.held < 0 and stack and np.linalg.norm(s.object_pos[:2] - s.goal[:2]) <= self.scene.place_tolerance
                and s.object_pos[2] > self.scene.goal_height + stack * self.scene.object_size):
            # Just let go onto the stack and still settling (the success test wants it resting):
            # back off open, as after a success; re-closing at once would grab it again.
            return expert.act(dataclasses.replace(s, success=True), dt)
        if stacked:
            # Place over the top cube's centre, not the pad's: the pad counts a cube within
            # place_tolerance (4 cm) of its centre as on it, but one let go half a cube (2 cm) or
            # more beside the cube below on an axis tips off (SimWorld._tip_off). Aimed at the
            # pad centre, the expert never stacked on a first cube placed 2-4 cm off it (a
            # policy's placement): it tipped the cube off, picked it up and tipped it again until
            # the time limit.
            top = max(stacked, key=lambda p: p[2])
            s = dataclasses.replace(s, goal=np.array([top[0], top[1], s.goal[2]]))
        elif any(self.cfg.first_place_offset):
            s = dataclasses.replace(s, goal=s.goal + np.array([*self.cfg.first_place_offset, 0.0]))
        return expert.act(s, dt)


def make_expert(world_like: SimWorld, cfg: Optional[ExpertConfig] = None) -> ScriptedExpert:
    """The scripted expert for any task: ScriptedExpert, or MultiStepExpert for several cubes."""
    if len(world_like.task.object_names) > 1:
        return MultiStepExpert(world_like, cfg)
    return ScriptedExpert(world_like, cfg)
