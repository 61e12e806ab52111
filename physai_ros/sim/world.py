"""One simulated robot cell: the arm, a table, one or more cubes, a goal, the contact model, a task
and (off by default) events: an intruding human arm and injected failures (sim.events)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from physai_ros.sim.contact import GRAVITY, ContactParams, Wrench, compute_wrench, hand_points
from physai_ros.sim.events import (DONE, DROPPED, FAILED, FLOOR_Z, ONGOING, TIMEOUT, EventConfig, EventEngine,
                                   IntruderPose, intruder_present, on_table)
from physai_ros.sim.robot import Arm, ArmConfig
from physai_ros.sim.tasks import PAD_TASKS, SceneConfig, Task, centred_over, make_task

# A cube let go with its base at most this high above the surface beneath it is set down, not
# dropped. The expert lets go 4 mm above the pad and carries at hover height (far above this);
# the policy's table-height reopenings lifted the cube at most 1.2 cm.
SET_DOWN_M = 0.015


def set_down(pos: np.ndarray, surface_z: float, object_size: float) -> bool:
    """A cube let go at `pos` (its centre) over a surface at `surface_z` is set down, not dropped."""
    return bool(pos[2] - object_size / 2 - surface_z <= SET_DOWN_M)


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
    object_pos: np.ndarray  # the held cube, else the one the task wants next (the only one, mostly)
    grasped: bool
    goal: np.ndarray
    wrench: np.ndarray  # fx fy fz tx ty tz
    contacts: tuple[str, ...]
    success: bool
    done: bool
    # Task-pipeline cells (defaults keep snapshots built elsewhere valid). Every cube and its name (the
    # task's colours), the held one's index (-1: none), the intruder's pose (None: absent) and
    # ground truth: intruder in the workcell, progress ongoing/done/failed and why it failed.
    objects: tuple[np.ndarray, ...] = ()
    object_names: tuple[str, ...] = ()
    held: int = -1
    intruder: Optional[IntruderPose] = None
    intruder_present: bool = False
    progress: str = ONGOING
    failure: str = ""
    # The cube the task wants moved next, whatever the gripper holds (-1: built elsewhere). A
    # policy holding the wrong cube still has this one to do: what a perfect planner names.
    next_cube: int = -1


class SimWorld:
    def __init__(self, arm: ArmConfig | None = None, task: str | Task = "pick_and_place", seed: int = 0,
                 scene: SceneConfig | None = None, contact: ContactParams | None = None,
                 events: EventConfig | None = None):
        self.arm = Arm(arm or ArmConfig())
        self.task = make_task(task) if isinstance(task, str) else task
        self.scene = scene or SceneConfig()
        self.contact = contact or ContactParams()
        self.rng = np.random.default_rng(seed)
        self.event_cfg = events or EventConfig()
        # Built only when something is on: a default cell has no extra state and draws nothing.
        self.events: EventEngine | None = EventEngine(self.event_cfg, self.rng) if self.event_cfg.enabled else None
        self.time = 0.0
        self.episode = 0
        self.successes = 0
        self.tip_offs = 0  # cubes let go beside the one below them that tipped off it (all episodes)
        self._prev_tool = self.arm.tool()
        self._tool_vel = np.zeros(3)
        self.reset()

    # -- episode control ---------------------------------------------------------------------
    def reset(self, seed: int | None = None, keep_arm: bool = False) -> None:
        """New episode with fresh placements. keep_arm leaves the arm where it is, which a live
        robot needs (its controller keeps commanding from the current pose)."""
        if seed is not None:
            self.rng = np.random.default_rng(seed)
            if self.events is not None:
                self.events = EventEngine(self.event_cfg, self.rng)
        if not keep_arm:
            self.arm.reset()
        placement = self.task.sample(self.rng, self.scene)
        self.objects = [placement.object_pos.astype(float).copy()] + [p.astype(float).copy() for p in placement.others]
        self.goal = placement.goal.astype(float).copy()
        self.held: int | None = None
        self._vz = [0.0] * len(self.objects)
        self._slipping: set[int] = set()  # dropped cubes falling through the closed fingers
        self.episode += 1
        self.episode_start = self.time
        self.success = False
        self.failure = ""
        self._prev_tool = self.arm.tool()
        self._tool_vel = np.zeros(3)
        self._wrench = Wrench()
        if self.events is not None:
            self.events.new_episode()

    @property
    def episode_time(self) -> float:
        return self.time - self.episode_start

    @property
    def done(self) -> bool:
        return self.success or self.episode_time >= self.task.timeout_s

    def set_command(self, command: np.ndarray) -> None:
        self.arm.set_command(command)

    # -- cubes -------------------------------------------------------------------------------
    @property
    def grasped(self) -> bool:
        return self.held is not None

    @grasped.setter
    def grasped(self, value: bool) -> None:
        self.held = self.focus_index() if value else None

    def focus_index(self) -> int:
        """The held cube, else the one the task wants moved next."""
        if self.held is not None:
            return self.held
        return self.next_cube_index()

    def next_cube_index(self) -> int:
        """The cube the task wants moved next (the held one or not)."""
        return self.task.focus(self.objects, self.goal, self.scene) if len(self.objects) > 1 else 0

    @property
    def object_pos(self) -> np.ndarray:
        return self.objects[self.focus_index()]

    @object_pos.setter
    def object_pos(self, value: np.ndarray) -> None:
        self.objects[self.focus_index()] = value

    def near_goal(self, pos: np.ndarray) -> bool:
        """Within the success test's reach of the pad centre (pad tasks)."""
        return self.task.name in PAD_TASKS and bool(np.linalg.norm(pos[:2] - self.goal[:2]) <= self.scene.place_tolerance)

    def release(self, slipped: bool = False) -> None:
        """The held cube leaves the gripper; `slipped`: it falls through the fingers (an injected
        drop), which therefore do not push it meanwhile."""
        if self.held is not None:
            self._vz[self.held] = 0.0
            if slipped:
                self._slipping.add(self.held)
            self.held = None

    def mark_failure(self, reason: str) -> None:
        """Latch the episode's first failure (ground truth: progress "failed" until the reset)."""
        if not self.failure:
            self.failure = reason

    # -- physics -----------------------------------------------------------------------------
    def _surface_height(self, xy: np.ndarray, index: int = 0) -> float:
        if np.linalg.norm(xy - self.goal[:2]) <= self.scene.goal_radius and self.task.name in PAD_TASKS:
            h = self.scene.goal_height
        elif self.events is not None and not on_table(xy):
            return FLOOR_Z
        else:
            h = 0.0
        if len(self.objects) > 1:  # stacking: the top of another cube below this cube's centre
            size, half = self.scene.object_size, self.scene.object_size / 2
            for j, p in enumerate(self.objects):
                if j != index and j != self.held and centred_over(xy, p, size) \
                        and p[2] < self.objects[index][2] - half:
                    h = max(h, p[2] + half)
        return h

    def _tip_off(self, i: int) -> None:
        """A cube landing on another with its centre beyond that cube's top face tips off it (its
        weight acts outside its support): it ends beside the lower cube, on the side it overhung,
        and falls from there. Without this the overhanging cube would rest on the corner, a state
        no real cube keeps, and one that the success test (centre over the top face) rejects."""
        size = self.scene.object_size
        p = self.objects[i]
        for j, q in enumerate(self.objects):
            d = p[:2] - q[:2]
            # (1e-9: a cube already set beside the other, a float's width inside, overlaps no more)
            if j == i or j == self.held or np.any(np.abs(d) >= size - 1e-9) or centred_over(p, q, size):
                continue  # no overlap, or supported
            if q[2] < p[2] and p[2] - size / 2 <= q[2] + size / 2 + 1e-6:  # touching its top face
                axis = int(np.argmax(np.abs(d)))
                p[axis] = q[axis] + np.sign(d[axis]) * size
                self.tip_offs += 1

    def _resting(self, i: int) -> bool:
        half = self.scene.object_size / 2
        p = self.objects[i]
        return i != self.held and abs(p[2] - (self._surface_height(p[:2], i) + half)) < 1e-3

    def object_resting(self) -> bool:
        return (not self.grasped) and self._resting(self.focus_index())

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

        if self.held is not None:
            if width > size + 0.003:
                self._released_at(self.held)
                self._vz[self.held] = 0.0
                self.held = None
            else:
                self.objects[self.held] = tool.copy()
        elif width_before > size >= width:
            # The fingers closed past the cube's width: a grasp if a cube was between them.
            for i in self._by_distance(tool):
                d = self.objects[i] - tool
                if np.hypot(d[0], d[1]) < 0.02 and abs(d[2]) < 0.02:
                    self.held = i
                    self._slipping.discard(i)
                    self.objects[i] = tool.copy()
                    self.arm.state.gripper = size
                    break

        for i in range(len(self.objects)):
            if i != self.held:
                self._fall(i, dt)

        self.time += dt
        if self.events is not None:
            self.events.step(self, dt)
        # The wrench sees the finger inside the cube before the push resolves the overlap.
        near = self.focus_index() if len(self.objects) == 1 or self.held is not None else self._by_distance(tool)[0]
        if wrench:
            self._wrench = compute_wrench(
                self.contact, tool, self._tool_vel, gripper_width=width, object_pos=self.objects[near],
                object_size=size, object_mass=self.scene.object_mass, grasped=self.grasped, goal_xy=self.goal[:2],
                goal_radius=self.scene.goal_radius if self.task.name in PAD_TASKS else 0.0,
                goal_height=self.scene.goal_height, rng=self.rng)
        if not self.grasped:
            knocking = self.events.failures.knocking if self.events is not None else None
            for i in range(len(self.objects)):
                if i not in self._slipping and i != knocking:
                    self._push(i, tool, width)
        if not self.success and self._task_success(tool):
            self.success = True
            self.successes += 1
        if not self.failure and len(self.objects) > 1 and self.task.wrong_order(self.objects, self.held, self.goal,
                                                                                 self.scene):
            self.mark_failure(self.task.failure_reason)

    def _task_success(self, tool: np.ndarray) -> bool:
        if len(self.objects) == 1:
            return self.task.success(tool=tool, object_pos=self.objects[0], grasped=self.grasped,
                                     object_resting=self.object_resting(), goal=self.goal, cfg=self.scene)
        resting = [self._resting(i) for i in range(len(self.objects))]
        return self.task.success_all(objects=self.objects, held=self.held, resting=resting, goal=self.goal,
                                     cfg=self.scene)

    def _by_distance(self, tool: np.ndarray) -> list[int]:
        if len(self.objects) == 1:
            return [0]
        return sorted(range(len(self.objects)), key=lambda i: float(np.linalg.norm(self.objects[i] - tool)))

    def _released_at(self, i: int) -> None:
        """A cube let go away from the pad and above the surface beneath it is a dropped cube
        (ground truth only). One let go with its base within SET_DOWN_M of that surface is set
        down, not dropped: it stays upright where it was and can be grasped again (a grasp that
        closed on the table and reopened), so the attempt goes on."""
        if self.task.name not in PAD_TASKS or self.near_goal(self.objects[i]):
            return
        p = self.objects[i]
        if not set_down(p, self._surface_height(p[:2], i), self.scene.object_size):
            self.mark_failure(DROPPED)

    def _fall(self, i: int, dt: float) -> None:
        if len(self.objects) > 1:
            self._tip_off(i)
        p = self.objects[i]
        rest = self._surface_height(p[:2], i) + self.scene.object_size / 2
        if p[2] > rest:
            self._vz[i] -= GRAVITY * dt
            p[2] = max(rest, p[2] + self._vz[i] * dt)
        else:
            p[2] = rest
            self._vz[i] = 0.0
            self._slipping.discard(i)

    def _push(self, i: int, tool: np.ndarray, width: float) -> None:
        """A finger moving into a cube's side slides it along the table (quasi-static)."""
        half = self.scene.object_size / 2
        r = self.contact.finger_radius
        p_obj = self.objects[i]
        for p in hand_points(self.contact, tool, width, self.scene.object_size):
            d = p - p_obj
            if np.all(np.abs(d) < half + r):
                depth = half + r - np.abs(d)
                axis = int(np.argmin(depth))
                if axis < 2:  # pushing from above presses on the table; nothing moves
                    p_obj[axis] -= np.sign(d[axis] or 1.0) * depth[axis]
                return

    def set_state(self, positions: np.ndarray, object_pos: np.ndarray, grasped: bool, goal: np.ndarray,
                  command: np.ndarray | None = None, objects: list[np.ndarray] | None = None,
                  held: int | None = None) -> None:
        """Overwrite the cell's state from observed values (a planner mirroring a live robot).
        With several cubes, `objects` and `held` give them all; object_pos is then ignored."""
        positions = np.asarray(positions, dtype=float)
        if positions.shape != (self.arm.dim,):
            raise ValueError(f"positions must have shape ({self.arm.dim},), got {positions.shape}")
        self.arm.state.q = positions[:-1].copy()
        self.arm.state.qd = np.zeros_like(self.arm.state.q)
        self.arm.state.gripper = float(positions[-1])
        self.arm.state.command = (positions if command is None else np.asarray(command, dtype=float)).copy()
        self.goal = np.asarray(goal, dtype=float).copy()
        if objects is not None:
            self.objects = [np.asarray(p, dtype=float).copy() for p in objects]
            self._vz = [0.0] * len(self.objects)
            self.held = held if grasped else None
        else:
            self.held = None
            self.objects[0] = np.asarray(object_pos, dtype=float).copy()
            self.held = 0 if grasped else None
        self._prev_tool = self.arm.tool()

    def snapshot_wrench(self) -> np.ndarray:
        """The newest wrench sample alone (cheaper than a full snapshot)."""
        return self._wrench.as_array()

    def progress(self) -> tuple[str, str]:
        """Ground truth of a task-progress monitor: ("done", "") once the task's success test
        held; ("failed", reason) after a failure this episode (latched until the reset: the
        attempt needs a retry even if the robot could pick the cube up again) or on the time
        limit; ("ongoing", "") otherwise."""
        if self.success:
            return DONE, ""
        if self.failure:
            return FAILED, self.failure
        if self.episode_time >= self.task.timeout_s:
            return FAILED, TIMEOUT
        return ONGOING, ""

    def snapshot(self) -> WorldSnapshot:
        pose = self.events.pose if self.events is not None else None
        progress, failure = self.progress()
        return WorldSnapshot(
            time=self.time, episode=self.episode, episode_time=self.episode_time, task=self.task.name,
            positions=self.arm.positions(), velocities=self.arm.velocities(), command=self.arm.state.command.copy(),
            tool=self.arm.tool(), object_pos=self.object_pos.copy(), grasped=self.grasped, goal=self.goal.copy(),
            wrench=self._wrench.as_array(), contacts=self._wrench.contacts, success=self.success, done=self.done,
            objects=tuple(p.copy() for p in self.objects), object_names=self.task.object_names,
            held=-1 if self.held is None else self.held, intruder=pose, intruder_present=intruder_present(pose),
            progress=progress, failure=failure, next_cube=self.next_cube_index())
