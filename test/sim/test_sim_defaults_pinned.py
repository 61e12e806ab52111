"""Issue 23 added events, several cubes and a task to the simulator; a default cell must still
move, sense and render exactly as before (recorded datasets, trained policies and the pinned
training/engine tests rely on it). The digests were taken from the simulator before that change
(commit 3e9fb7a): expert trajectories (joint positions, cube, wrench with its seeded noise) and
the three camera views every 0.2 s of three seeded cells. The render digest depends on OpenCV's
rasteriser: a different OpenCV build may need it re-taken from that commit, the trajectory one not."""
from __future__ import annotations

import hashlib

import numpy as np

from physai_ros.sim.expert import ScriptedExpert
from physai_ros.sim.render import Renderer
from physai_ros.sim.world import SimWorld

TRAJECTORY_SHA256 = "8deeaa9ad3736db66cf39641c82b77d479dbae07b7da9f9e871ced83c3b7795a"
RENDER_SHA256 = "f3401c331c4326b311672bd5f07234ef46a2d816888034e87db7eee022d3be96"


def _digests() -> tuple[str, str]:
    traj, imgs = hashlib.sha256(), hashlib.sha256()
    for task, seed in (("pick_and_place", 0), ("reach", 1), ("pick_and_place", 5)):
        w = SimWorld(task=task, seed=seed)
        r = Renderer(w.arm.cfg, num_views=3)
        ex = ScriptedExpert(w)
        for n in range(480 * 6):
            if n % 8 == 0:
                w.set_command(ex.act(w.snapshot(), 8 / 480))
            w.step(1 / 480)
            if n % 96 == 0:
                s = w.snapshot()
                for a in (s.positions, s.object_pos, s.wrench):
                    traj.update(np.ascontiguousarray(a).tobytes())
                for img in r.render(s):
                    imgs.update(img.tobytes())
    return traj.hexdigest(), imgs.hexdigest()


def test_default_cells_are_unchanged_by_issue_23():
    traj, imgs = _digests()
    assert traj == TRAJECTORY_SHA256
    assert imgs == RENDER_SHA256
