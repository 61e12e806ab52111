"""Action chunks from the scripted expert, for a live sim robot (the demo's stand-in for the
policy server until it exists).

A mirror world is set from what a client can observe (joint positions; object, goal and grasp
from task_status) and the expert is rolled out on it to produce an ActionChunkData answering the
observation captured at `capture_time`.
"""
from __future__ import annotations

import numpy as np

from physai_ros.protocol.chunk import ActionChunkData
from physai_ros.sim.multi_step import make_expert
from physai_ros.sim.robot import ArmConfig
from physai_ros.sim.runtime import TaskStatus
from physai_ros.sim.tasks import make_task
from physai_ros.sim.world import SimWorld


class ScriptedChunkPlanner:
    def __init__(self, robot_id: str, task: str, num_joints: int = 4, *, num_actions: int = 50,
                 dt: float = 0.02, horizon: int = 40):
        if not 0 < horizon <= num_actions:
            raise ValueError(f"horizon must be in 1..num_actions={num_actions}, got {horizon}")
        self.robot_id = robot_id
        self.mirror = SimWorld(ArmConfig(num_joints=num_joints), task=task, seed=0)
        self.expert = make_expert(self.mirror)
        self.joint_names = self.mirror.arm.cfg.joint_names
        self.num_actions, self.dt, self.horizon = num_actions, dt, horizon
        self._last: ActionChunkData | None = None

    def _commanded_at(self, t: float) -> np.ndarray | None:
        """What the previous chunk asks for at time t (keeps the expert's carrot continuous)."""
        c = self._last
        if c is None:
            return None
        k = int(np.clip(np.floor((t - c.stamp) / c.dt), 0, c.horizon - 1))
        return c.actions[k]

    def plan(self, positions: np.ndarray, status: TaskStatus, capture_time: float, round_id: int) -> ActionChunkData:
        if status.task != self.mirror.task.name:
            raise ValueError(f"planner runs {self.mirror.task.name!r} but the robot reports {status.task!r}")
        if self.mirror.task.reads_prompt and status.prompt and status.prompt != self.mirror.task.prompt:
            # The robot's instruction sets its goal (place_in_order: the cubes' order, which is
            # also the order of status.objects): mirror that task.
            self.mirror.task = make_task(status.task, status.prompt)
            self.expert = make_expert(self.mirror)
        # Several cubes (place_in_order): the status lists them all and which one is held.
        objects = [np.asarray(p) for p in status.objects] if len(status.objects) > 1 else None
        self.mirror.set_state(positions, np.asarray(status.object_pos), status.grasped, np.asarray(status.goal),
                              command=self._commanded_at(capture_time), objects=objects,
                              held=status.held if status.held >= 0 else None)
        self.mirror.success = status.success
        actions = self.expert.rollout(self.mirror, self.num_actions, self.dt, in_place=True)
        chunk = ActionChunkData(robot_id=self.robot_id, task_id=f"{self.robot_id}/episode_{status.episode}",
                                round_id=round_id, stamp=capture_time, dt=self.dt,
                                joint_names=self.joint_names, actions=actions, horizon=self.horizon,
                                confidence=np.ones(self.num_actions))
        self._last = chunk
        return chunk
