"""Scripted expert for the sim tasks: the "built-in scripted motion" of the demo and the teacher
the trained sim policy is distilled from (training/).

It is reactive: the phase (approach, descend, grasp, lift, carry, place, retreat) is re-derived
from the observed state at every call, so it recovers from missed grasps and from chunks that were
cut short. Motion is a Cartesian carrot that moves from the last commanded tool position towards
the phase's waypoint at a bounded speed; joint targets come from inverse kinematics seeded with
the last command (no branch flips).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np

from physai_ros.sim.robot import inverse_kinematics, tool_point
from physai_ros.sim.world import SimWorld, WorldSnapshot


@dataclass(frozen=True)
class ExpertConfig:
    speed: float = 0.25  # m/s of the carrot
    hover: float = 0.12  # travel height of the tool point above the table
    align_tol: float = 0.006  # horizontal alignment before descending
    height_tol: float = 0.004
    # place_in_order (MultiStepExpert): the first cube's target off the pad centre, m. The pad
    # counts a cube within 4 cm as on it; demonstrations that stack on a first cube placed off
    # the centre show where the second cube goes: onto the cube, wherever it is.
    first_place_offset: tuple[float, float] = (0.0, 0.0)


class ScriptedExpert:
    def __init__(self, world_like: SimWorld, cfg: ExpertConfig | None = None):
        self.arm_cfg = world_like.arm.cfg
        self.scene = world_like.scene
        self.task = world_like.task.name
        self.cfg = cfg or ExpertConfig()

    def _waypoint(self, s: WorldSnapshot) -> tuple[np.ndarray, float]:
        """Where the tool should head now and the gripper command."""
        c, sc = self.cfg, self.scene
        g_open, g_closed = self.arm_cfg.gripper_max_width, 0.0
        tool = s.tool
        if self.task == "reach":
            return s.goal, g_open
        if s.success:
            return np.array([tool[0], tool[1], c.hover]), g_open
        half = sc.object_size / 2

        def travel(xy: np.ndarray, low_z: float, grip: float) -> tuple[np.ndarray, float] | None:
            """Go up, across at hover height, then down; None once aligned above xy."""
            off = np.linalg.norm(tool[:2] - xy)
            if off > c.align_tol:
                if tool[2] < c.hover - 0.02 and off > 0.03:
                    return np.array([tool[0], tool[1], c.hover]), grip
                return np.array([xy[0], xy[1], c.hover if off > 0.03 else max(low_z, min(tool[2], c.hover))]), grip
            return None

        if s.grasped:
            place_z = sc.goal_height + half + 0.004
            step = travel(s.goal[:2], place_z, g_closed)
            if step is not None:
                return step
            if tool[2] > place_z + c.height_tol:
                return np.array([s.goal[0], s.goal[1], place_z]), g_closed
            return np.array([s.goal[0], s.goal[1], place_z]), g_open

        obj = s.object_pos
        at_grasp = np.linalg.norm(tool[:2] - obj[:2]) <= c.align_tol * 2 and abs(tool[2] - obj[2]) <= c.height_tol * 2
        width = s.positions[-1]
        if at_grasp:
            if width < sc.object_size - 0.005:  # closed on nothing: open and back off
                return np.array([tool[0], tool[1], c.hover]), g_open
            return obj.copy(), g_closed
        if width < sc.object_size + 0.01:  # fingers not open: open them before approaching
            return np.array([tool[0], tool[1], max(tool[2], obj[2] + sc.object_size)]), g_open
        step = travel(obj[:2], obj[2], g_open)
        if step is not None:
            return step
        return obj.copy(), g_open

    def act(self, s: WorldSnapshot, dt: float) -> np.ndarray:
        """Next joint-position command (joints then gripper) for a step of dt seconds."""
        target, grip = self._waypoint(s)
        q_cmd = s.command[:-1]
        carrot = tool_point(self.arm_cfg, q_cmd)
        delta = target - carrot
        dist = float(np.linalg.norm(delta))
        max_step = self.cfg.speed * dt
        if dist > max_step:
            delta *= max_step / dist
        q = inverse_kinematics(self.arm_cfg, carrot + delta, q_cmd)
        return np.concatenate([q, [grip]])

    def rollout(self, world: SimWorld, num_actions: int, dt: float, substeps: int = 2,
                in_place: bool = False) -> np.ndarray:
        """A chunk of num_actions commands dt apart, planned on a copy of `world` (or on `world`
        itself with in_place) assuming the robot tracks the way the simulator does."""
        sim = world if in_place else copy.deepcopy(world)
        actions = np.empty((num_actions, sim.arm.dim))
        for k in range(num_actions):
            a = self.act(sim.snapshot(), dt)
            sim.set_command(a)
            for _ in range(substeps):
                sim.step(dt / substeps, wrench=False)
            actions[k] = a
        return actions
