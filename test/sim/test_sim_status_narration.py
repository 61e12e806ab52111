"""The sim robot's task_status carries the narration ground truth (the language demo): the subtask
from a SubtaskTracker fed every tick (so a drop between two 2 Hz statuses is caught), the scene,
a status on every subtask change (rate-limited), and old status JSON stays readable."""
from __future__ import annotations

import dataclasses
import json

import numpy as np

from physai_ros.sim.narration import DROPPED, GRASP, PLACE, REACH_CUBE, REACH_MARKER
from physai_ros.sim.runtime import SimRobotConfig, SimRobotRuntime, TaskStatus


def test_task_status_json_round_trip_and_old_json():
    rt = SimRobotRuntime(SimRobotConfig(task="reach", seed=4))
    rt.tick(1.0)
    st = rt.status()
    assert st.subtask == REACH_MARKER and st.scene.startswith("red marker ")
    assert TaskStatus.from_json(st.to_json()) == st
    # A status from a sim robot older than the narration fields still reads, with empty ground truth.
    old = {k: v for k, v in json.loads(st.to_json()).items() if k not in ("subtask", "scene")}
    back = TaskStatus.from_json(json.dumps(old))
    assert back.subtask == "" and back.scene == "" and back.task == "reach"


class _Scripted:
    """Wraps the world's snapshot with the fields a test sets (grasped, object_pos, ...)."""

    def __init__(self, world):
        self.world, self.real, self.changes = world, world.snapshot, {}

    def __call__(self):
        return dataclasses.replace(self.real(), **self.changes)


def test_a_drop_between_two_statuses_is_published_at_once():
    rt = SimRobotRuntime(SimRobotConfig(task="pick_and_place", seed=1, physics_rate_hz=480.0, status_rate_hz=2.0))
    snap = _Scripted(rt.world)
    rt.world.snapshot = snap
    goal = np.array([0.35, 0.2, rt.world.scene.goal_height])
    held = np.array([0.35, -0.2, 0.12])
    snap.changes = dict(grasped=True, object_pos=held, goal=goal)
    statuses, t = [], 10.0
    for _ in range(100):  # 0.21 s holding the cube: the first status, then none due until 10.5 s
        t += 1 / 480
        out = rt.tick(t)
        statuses += [out.status] if out.status else []
    assert [s.subtask for s in statuses] == [PLACE]
    snap.changes = dict(grasped=False, object_pos=held - [0, 0, 0.05], goal=goal)  # let go away from the pad
    out = rt.tick(t + 1 / 480)
    assert out.status is not None and out.status.subtask == DROPPED
    assert out.status.scene.endswith("the green pad; pad on the left")
    assert rt.status().subtask == DROPPED  # the diagnostics' status says the same


def test_a_flickering_subtask_does_not_flood_the_status_topic():
    rt = SimRobotRuntime(SimRobotConfig(task="pick_and_place", seed=1, status_rate_hz=2.0,
                                        subtask_status_min_interval_s=0.1))
    snap = _Scripted(rt.world)
    rt.world.snapshot = snap
    obj = np.array([0.35, -0.2, 0.02])
    at_cube, beside = obj + [0, 0, 0.05], obj + [0.05, 0, 0.05]
    sent, t = [], 20.0
    for k in range(480):  # 1 s, the tool jumping in and out of the grasp zone every tick
        t += 1 / 480
        snap.changes = dict(grasped=False, object_pos=obj, tool=at_cube if k % 2 else beside)
        out = rt.tick(t)
        if out.status is not None:
            sent.append(out.status.subtask)
    assert set(sent) <= {GRASP, REACH_CUBE}
    # More than the 2 Hz statuses (changes are published), but no more than one per 0.1 s
    # besides the first and the 2 Hz ones: not 480.
    assert 3 < len(sent) <= 1 + 10 + 2, sent
