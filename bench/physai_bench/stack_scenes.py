"""Stacks of place_in_order's two cubes as the policy's cameras see them (bench/view_resolution.py,
bench/stack_offset_probe.py): the red cube on the pad, the blue one resting on it, moved by an
offset, or held that offset off it in the gripper above it, about to be let go; both views
rendered at the size the training data was recorded at."""
from __future__ import annotations

import dataclasses

import numpy as np
import torch

from physai_ros.sim.render import Renderer
from physai_ros.sim.robot import inverse_kinematics
from physai_ros.sim.world import SimWorld, WorldSnapshot

RECORDED_PX = 224  # the frames the training data holds (docs/training.md)
TIP_OFF_M = 0.02  # half a cube: an upper cube further off on an axis tips off (SimWorld._tip_off)
# The benches' random stacks: the lower cube up to this far off the pad centre on each axis (a
# policy's first placements), the upper one up to this far off the lower one.
LOWER_OFF_M = 0.03
UPPER_OFF_M = 0.035


def stack_snapshot(seed: int, lower_offset=(0.0, 0.0), upper_offset=(0.0, 0.0),
                   held_lift: float | None = None) -> tuple[WorldSnapshot, SimWorld]:
    """seed's place_in_order scene with the lower cube lower_offset (m) off the pad centre and the
    upper cube upper_offset off the lower one: resting on it with the arm at its home pose, or
    (held_lift, m) held that high above its resting place, the arm posed to hold it (the tool
    point is a held cube's centre) with the gripper closed on it. The world is the scene's own
    (its arm and scene configuration); the snapshot is the stack, not the world's state."""
    world = SimWorld(task="place_in_order", seed=seed)
    snap = world.snapshot()
    size = world.scene.object_size
    lower = np.array([*(snap.goal[:2] + np.asarray(lower_offset)), snap.goal[2] + size / 2])
    upper = lower + np.array([*upper_offset, size + (held_lift or 0.0)])
    changes = dict(objects=(lower, upper), object_pos=upper, held=-1)
    if held_lift is not None:
        q = inverse_kinematics(world.arm.cfg, upper, world.arm.cfg.home())
        changes.update(held=1, grasped=True, tool=upper, positions=np.array([*q, size]))
    return dataclasses.replace(snap, **changes), world


def stack_views(seed: int, lower_offset=(0.0, 0.0), upper_offset=(0.0, 0.0), views: int = 2,
                held_lift: float | None = None) -> list[torch.Tensor]:
    """The views (uint8 [3, H, W] each) of stack_snapshot's scene."""
    snap, world = stack_snapshot(seed, lower_offset, upper_offset, held_lift)
    return [torch.from_numpy(v).permute(2, 0, 1).contiguous() for v in render(snap, world, views)]


def render(snap: WorldSnapshot, world: SimWorld, views: int = 2) -> list[np.ndarray]:
    """The snapshot's views as the robots' cameras record them (uint8 [H, W, 3] each)."""
    renderer = Renderer(world.arm.cfg, num_views=views, width=RECORDED_PX, height=RECORDED_PX,
                        object_size=world.scene.object_size, goal_radius=world.scene.goal_radius)
    return renderer.render(snap)
