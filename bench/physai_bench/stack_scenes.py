"""Stacks of place_in_order's two cubes as the policy's cameras see them (bench/view_resolution.py,
bench/stack_offset_probe.py): the red cube on the pad, the blue one resting on it, moved by an
offset; both views rendered at the size the training data was recorded at."""
from __future__ import annotations

import dataclasses

import numpy as np
import torch

from physai_ros.sim.render import Renderer
from physai_ros.sim.world import SimWorld

RECORDED_PX = 224  # the frames the training data holds (docs/training.md)
TIP_OFF_M = 0.02  # half a cube: an upper cube further off on an axis tips off (SimWorld._tip_off)


def stack_views(seed: int, lower_offset=(0.0, 0.0), upper_offset=(0.0, 0.0), views: int = 2) -> list[torch.Tensor]:
    """The views (uint8 [3, H, W] each) of seed's scene with the lower cube lower_offset (m) off the
    pad centre and the upper cube upper_offset off the lower one; the arm at its home pose."""
    world = SimWorld(task="place_in_order", seed=seed)
    snap = world.snapshot()
    size = world.scene.object_size
    lower = np.array([*(snap.goal[:2] + np.asarray(lower_offset)), snap.goal[2] + size / 2])
    upper = lower + np.array([*upper_offset, size])
    snap = dataclasses.replace(snap, objects=(lower, upper), object_pos=upper, held=-1)
    renderer = Renderer(world.arm.cfg, num_views=views, width=RECORDED_PX, height=RECORDED_PX)
    return [torch.from_numpy(v).permute(2, 0, 1).contiguous() for v in renderer.render(snap)]
