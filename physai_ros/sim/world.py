"""One simulated robot cell: the arm, a table, a cube, a goal, the contact model and a task."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from physai_ros.sim.contact import GRAVITY, ContactParams, Wrench, compute_wrench, hand_points
from physai_ros.sim.robot import Arm, ArmConfig
from physai_ros.sim.tasks import SceneConfig, Task, make_task


@dataclass(frozen=True)
class WorldSnapshot:
    """Plain data describing the cell at one instant (what a renderer or an expert needs)."""
    time: float
    episode: int
    episode_time: float
    task: str
    positions: np.ndarray  # joints then gripper opening
    velocities: np.ndarray
    command: np.ndarray
    tool: np.ndarray
    object_pos: np.ndarray
    grasped: bool
    goal: np.ndarray
    wrench: np.ndarray  # fx fy fz tx ty tz
    contacts: tuple[str, ...]
    success: bool
    done: bool


class SimWorld:
    def __init__(self, arm: ArmConfig | None = None, task: str | Task = "pick_and_place", seed: int = 0,
                 scene: SceneConfig | None = None, contact: ContactParams | None = None):
        self.arm = Arm(arm or ArmConfig())
        self.task = make_task(task) if isinstance(task, str) else task
        self.scene = scene or SceneConfig()
        self.contact = contact or ContactParams()
        self.rng = np.random.default_rng(seed)
        self.time = 0.0
        self.episode = 0
        self.successes = 0
        self._prev_tool = self.arm.tool()
        self._tool_vel = np.zeros(3)
        self.reset()

    # -- episode control ---------------------------------------------------------------------
    def reset(self, seed: int | None = None, keep_arm: bool = False) -> None:
        """New episode with fresh placements. keep_arm leaves the arm where it is, which a live
        robot needs (its controller keeps commanding from the current pose)."""
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        if not keep_arm:
            self.arm.reset()
        placement = self.task.sample(self.rng, self.scene)
        self.object_pos = placement.object_pos.astype(float).copy()
        self.goal = placement.goal.astype(float).copy()
        self.grasped = False
        self._object_vz = 0.0
        self.episode += 1
        self.episode_start = self.time
        self.success = False
        self._prev_tool = self.arm.tool()
        self._tool_vel = np.zeros(3)
        self._wrench = Wrench()

    @property
    def episode_time(self) -> float:
        return self.time - self.episode_start

    @property
    def done(self) -> bool:
        return self.success or self.episode_time >= self.task.timeout_s

    def set_command(self, command: np.ndarray) -> None:
        self.arm.set_command(command)

    # -- physics -----------------------------------------------------------------------------
    def _surface_height(self, xy: np.ndarray) -> float:
        if np.linalg.norm(xy - self.goal[:2]) <= self.scene.goal_radius and self.task.name == "pick_and_place":
            return self.scene.goal_height
        return 0.0

    def object_resting(self) -> bool:
        half = self.scene.object_size / 2
        return (not self.grasped) and abs(self.object_pos[2] - (self._surface_height(self.object_pos[:2]) + half)) < 1e-3

    def step(self, dt: float, wrench: bool = True) -> None:
        """Advance by dt. wrench=False skips the contact model (planning rollouts do not need it)."""
        if dt <= 0:
            raise ValueError(f"dt must be positive, got {dt}")
        size = self.scene.object_size
        width_before = self.arm.state.gripper
        self.arm.step(dt, gripper_block=size if self.grasped else None)
        tool = self.arm.tool()
        self._tool_vel = (tool - self._prev_tool) / dt
        self._prev_tool = tool
        width = self.arm.state.gripper

        if self.grasped:
            if width > size + 0.003:
                self.grasped = False
                self._object_vz = 0.0
            else:
                self.object_pos = tool.copy()
        elif width_before > size >= width:
            # The fingers closed past the cube's width: a grasp if the cube was between them.
            d = self.object_pos - tool
            if np.hypot(d[0], d[1]) < 0.02 and abs(d[2]) < 0.02:
                self.grasped = True
                self.object_pos = tool.copy()
                self.arm.state.gripper = size

        if not self.grasped:
            self._fall(dt)

        self.time += dt
        # The wrench sees the finger inside the cube before the push resolves the overlap.
        if wrench:
            self._wrench = compute_wrench(
                self.contact, tool, self._tool_vel, gripper_width=width, object_pos=self.object_pos,
                object_size=size, object_mass=self.scene.object_mass, grasped=self.grasped, goal_xy=self.goal[:2],
                goal_radius=self.scene.goal_radius if self.task.name == "pick_and_place" else 0.0,
                goal_height=self.scene.goal_height, rng=self.rng)
        if not self.grasped:
            self._push(tool, width)
        if not self.success and self.task.success(
                tool=tool, object_pos=self.object_pos, grasped=self.grasped, object_resting=self.object_resting(),
                goal=self.goal, cfg=self.scene):
            self.success = True
            self.successes += 1

    def _fall(self, dt: float) -> None:
        rest = self._surface_height(self.object_pos[:2]) + self.scene.object_size / 2
        if self.object_pos[2] > rest:
            self._object_vz -= GRAVITY * dt
            self.object_pos[2] = max(rest, self.object_pos[2] + self._object_vz * dt)
        else:
            self.object_pos[2] = rest
            self._object_vz = 0.0

    def _push(self, tool: np.ndarray, width: float) -> None:
        """A finger moving into the cube's side slides it along the table (quasi-static)."""
        half = self.scene.object_size / 2
        r = self.contact.finger_radius
        for p in hand_points(self.contact, tool, width, self.scene.object_size):
            d = p - self.object_pos
            if np.all(np.abs(d) < half + r):
                depth = half + r - np.abs(d)
                axis = int(np.argmin(depth))
                if axis < 2:  # pushing from above presses on the table; nothing moves
                    self.object_pos[axis] -= np.sign(d[axis] or 1.0) * depth[axis]
                return

    def set_state(self, positions: np.ndarray, object_pos: np.ndarray, grasped: bool, goal: np.ndarray,
                  command: np.ndarray | None = None) -> None:
        """Overwrite the cell's state from observed values (a planner mirroring a live robot)."""
        positions = np.asarray(positions, dtype=float)
        if positions.shape != (self.arm.dim,):
            raise ValueError(f"positions must have shape ({self.arm.dim},), got {positions.shape}")
        self.arm.state.q = positions[:-1].copy()
        self.arm.state.qd = np.zeros_like(self.arm.state.q)
        self.arm.state.gripper = float(positions[-1])
        self.arm.state.command = (positions if command is None else np.asarray(command, dtype=float)).copy()
        self.object_pos = np.asarray(object_pos, dtype=float).copy()
        self.grasped = bool(grasped)
        self.goal = np.asarray(goal, dtype=float).copy()
        self._prev_tool = self.arm.tool()

    def snapshot_wrench(self) -> np.ndarray:
        """The newest wrench sample alone (cheaper than a full snapshot)."""
        return self._wrench.as_array()

    def snapshot(self) -> WorldSnapshot:
        return WorldSnapshot(
            time=self.time, episode=self.episode, episode_time=self.episode_time, task=self.task.name,
            positions=self.arm.positions(), velocities=self.arm.velocities(), command=self.arm.state.command.copy(),
            tool=self.arm.tool(), object_pos=self.object_pos.copy(), grasped=self.grasped, goal=self.goal.copy(),
            wrench=self._wrench.as_array(), contacts=self._wrench.contacts, success=self.success, done=self.done)
