"""A live sim robot in wall-clock time, as pure logic: the sim_robot node calls tick(now) from
its timer and publishes whatever the tick returns.

The world advances in fixed physics steps to catch up with the clock (bounded, so a stalled
process does not spiral), the newest joint trajectory is sampled as the command, streams are
decimated to their configured rates, and a finished episode is reset after a short pause with
the arm left where it is (the controller keeps commanding from there).
"""
from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

import numpy as np

from physai_ros.control.joint_trajectory import JointTrajectoryPlan
from physai_ros.sim.command import TrajectoryFollower
from physai_ros.sim.events import EventConfig
from physai_ros.sim.multi_step import subgoal_text
from physai_ros.sim.narration import SubtaskTracker, scene_description, subtask_label
from physai_ros.sim.render import Renderer
from physai_ros.sim.robot import ArmConfig
from physai_ros.sim.tasks import TASKS, make_task
from physai_ros.sim.world import SimWorld, WorldSnapshot


@dataclass(frozen=True)
class SimRobotConfig:
    robot_id: str = "robot_0"
    task: str = "pick_and_place"
    # The instruction the robot is given, for tasks whose goal depends on it (place_in_order: the
    # cubes' order); "" = the task's own. physai-fleet and the launch pass the fleet task's prompt.
    prompt: str = ""
    seed: int = 0
    num_joints: int = 4
    num_views: int = 1
    image_width: int = 224
    image_height: int = 224
    # Cameras of their own sizes, "HxW,HxW" per view (a 96x128 wrist camera beside a 128x96 top
    # one): each view rendered at image_width x image_height and resampled to its size. "": all
    # views image_height x image_width. (A string: a ROS parameter cannot default to an empty list.)
    view_sizes: str = ""
    physics_rate_hz: float = 480.0  # also the wrench rate
    camera_rate_hz: float = 30.0
    joint_state_rate_hz: float = 100.0
    status_rate_hz: float = 2.0
    reset_delay_s: float = 0.5
    max_catch_up_s: float = 0.1
    # A subtask change publishes a status at once (the ground truth a robot's text is checked
    # against), but no sooner than this after the last one: a label flickering at the
    # "grasp" boundary must not turn the reliable status topic into a physics-rate stream.
    subtask_status_min_interval_s: float = 0.1
    # Events (sim.events; all off by default): a human arm entering the workcell
    # (Poisson arrivals per minute of sim time, mean stay in seconds) and, per episode, the
    # probability that the held cube slips out during transport / the cube is knocked off the table.
    intruder_rate_per_min: float = 0.0
    intruder_duration_s: float = 3.0
    drop_prob: float = 0.0
    knock_prob: float = 0.0

    def __post_init__(self) -> None:
        for name in ("physics_rate_hz", "camera_rate_hz", "joint_state_rate_hz", "status_rate_hz"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        self.events  # validates the event parameters, each error naming its field
        sizes = self.camera_sizes
        if sizes and len(sizes) != self.num_views:
            raise ValueError(f"view_sizes {self.view_sizes!r}: {len(sizes)} sizes for num_views={self.num_views}")

    @property
    def camera_sizes(self) -> tuple[tuple[int, int], ...]:
        """(height, width) per view from view_sizes; () when every view has the image size."""
        if not self.view_sizes:
            return ()
        try:
            sizes = tuple(tuple(int(x) for x in part.strip().lower().split("x")) for part in self.view_sizes.split(","))
        except ValueError:
            sizes = ((0,),)
        if any(len(hw) != 2 or min(hw) < 1 for hw in sizes):
            raise ValueError(f"view_sizes {self.view_sizes!r}: expected 'HxW' per view, comma separated")
        return sizes

    @property
    def events(self) -> EventConfig:
        return EventConfig(intruder_rate_per_min=self.intruder_rate_per_min,
                           intruder_duration_s=self.intruder_duration_s, drop_prob=self.drop_prob,
                           knock_prob=self.knock_prob)


def check_sim_params(params: Mapping[str, Any], path: str) -> SimRobotConfig:
    """A fleet.yaml `sim:` mapping as the sim robot will take it: unknown keys, wrong types and
    bad values raise ValueError naming the key path ("robots[0].sim.drop_prob: ...")."""
    fields = {f.name: f for f in dataclasses.fields(SimRobotConfig)}
    defaults = SimRobotConfig()
    values: dict[str, Any] = {}
    for key, value in params.items():
        if key not in fields:
            raise ValueError(f"{path}.{key}: unknown sim parameter; known: {sorted(fields)}")
        want = type(getattr(defaults, key))
        if want is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, want) or isinstance(value, bool) != (want is bool) or (
                want is float and not math.isfinite(value)):
            raise ValueError(f"{path}.{key}: expected {want.__name__}, got {value!r}")
        values[key] = value
    if "task" in values and values["task"] not in TASKS:
        raise ValueError(f"{path}.task: expected one of {sorted(TASKS)}, got {values['task']!r}")
    if values.get("prompt"):
        try:
            make_task(values.get("task", SimRobotConfig.task), values["prompt"])
        except ValueError as exc:
            raise ValueError(f"{path}.prompt: {exc}") from None
    try:
        return SimRobotConfig(**values)
    except ValueError as exc:
        msg = str(exc)
        key = msg.split(" ", 1)[0]
        raise ValueError(f"{path}.{key}: {msg}" if key in fields else f"{path}: {msg}") from None


@dataclass(frozen=True)
class TaskStatus:
    """Published as JSON (std_msgs/String) on task_status."""
    robot_id: str
    task: str
    prompt: str
    episode: int
    episode_time: float
    episodes_finished: int
    successes: int
    timeouts: int
    success: bool
    grasped: bool
    tool: list[float]
    object_pos: list[float]
    goal: list[float]
    contacts: list[str]
    commands_rejected: int
    # Messages the node has published per stream, and the clock time of this status: two
    # statuses give publisher-side rates without subscribing to the 480 Hz streams.
    published: dict[str, int] = field(default_factory=dict)
    stamp: float = 0.0
    # Ground truth for the language stream (sim.narration): what the robot should answer to
    # "what is the current subtask?" (drops included: the tracker sees every tick) and to
    # "describe the scene.". Defaults keep statuses written before them readable.
    subtask: str = ""
    scene: str = ""
    # The ground truth (sim.events, sim.multi_step), for the safety checker, the progress
    # monitor and the System 2 planner; the defaults again keep older statuses readable.
    intruder: bool = False  # a human arm is in the workcell now
    progress: str = ""  # "ongoing" / "done" / "failed" (SimWorld.progress); "": an older sim robot
    failure: str = ""  # why failed: dropped / knocked / wrong_order / timeout
    subgoal: str = ""  # the planner's answer: the next single-object instruction ("done" at the end)
    objects: list[list[float]] = field(default_factory=list)  # every cube, in the task's order
    held: int = -1  # index into objects of the cube in the gripper

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @staticmethod
    def from_json(text: str) -> "TaskStatus":
        return TaskStatus(**json.loads(text))


@dataclass
class TickOutput:
    snapshot: WorldSnapshot
    wrench: np.ndarray | None = None  # the newest sample
    # Every force-sensor sample since the last tick as (clock time, fx fy fz tx ty tz): a late
    # tick still delivers one sample per physics step, each with the time it was taken.
    wrench_samples: list[tuple[float, np.ndarray]] = field(default_factory=list)
    joint_state: tuple[np.ndarray, np.ndarray] | None = None
    images: list[np.ndarray] | None = None
    status: TaskStatus | None = None


class _Rate:
    """Due-time bookkeeping for one stream. Half a period of slack absorbs timer jitter; a
    stream that fell behind restarts from now rather than bursting to catch up."""

    def __init__(self, hz: float):
        self.period = 1.0 / hz
        self.next = None

    def due(self, now: float) -> bool:
        if self.next is None:
            self.next = now + self.period
            return True
        if now + 0.5 * self.period < self.next:
            return False
        self.next += self.period
        if self.next < now:
            self.next = now + self.period
        return True


class SimRobotRuntime:
    MAX_SAMPLES_PER_TICK = 16
    def __init__(self, cfg: SimRobotConfig):
        self.cfg = cfg
        self._camera_sizes = cfg.camera_sizes  # parsed once, not at every camera frame
        self.world = SimWorld(ArmConfig(num_joints=cfg.num_joints), task=make_task(cfg.task, cfg.prompt),
                              seed=cfg.seed, events=cfg.events)
        self.renderer = Renderer(self.world.arm.cfg, num_views=cfg.num_views, width=cfg.image_width,
                                 height=cfg.image_height, object_size=self.world.scene.object_size,
                                 goal_radius=self.world.scene.goal_radius)
        self.joint_names = self.world.arm.cfg.joint_names
        self.follower = TrajectoryFollower(self.joint_names)
        self._dt = 1.0 / cfg.physics_rate_hz
        self._t0: float | None = None
        self._rates = {k: _Rate(getattr(cfg, f"{k}_rate_hz")) for k in ("camera", "joint_state", "status")}
        self._done_at: float | None = None
        self.episodes_finished = 0
        self.timeouts = 0
        self.resets_requested = 0
        self._reset_requested = False
        self.steps_skipped = 0
        self._status_dirty = True
        self.published = {"wrench": 0, "joint_states": 0, "camera": 0}
        self._now = 0.0
        self.tracker = SubtaskTracker(self.world.scene)
        self.subtask = ""
        self._status_at = float("-inf")
        self._subtask_changed = False
        # Safety and progress ground truth changes publish a status at once, like the subtask.
        self._truth: tuple = ()

    def on_plan(self, plan: JointTrajectoryPlan) -> bool:
        return self.follower.set_plan(plan)

    def _advance(self, now: float) -> list[tuple[float, np.ndarray]]:
        if self._t0 is None:
            self._t0 = now - self.world.time
        behind = (now - self._t0) - self.world.time
        if behind > self.cfg.max_catch_up_s:
            skipped = int((behind - self.cfg.max_catch_up_s) / self._dt)
            self.steps_skipped += skipped
            self._t0 += skipped * self._dt
        samples = []
        while self.world.time + self._dt <= now - self._t0 + 1e-9:
            self.world.step(self._dt)
            samples.append((self._t0 + self.world.time, self.world.snapshot_wrench()))
        return samples[-self.MAX_SAMPLES_PER_TICK:]

    def tick(self, now: float) -> TickOutput:
        cmd = self.follower.sample(now)
        if cmd is not None:
            self.world.set_command(cmd)
        samples = self._advance(now)
        self._episode_bookkeeping(now)
        snap = self.world.snapshot()
        # Every tick, not every status: a drop is a grasped -> released change the 2 Hz status
        # could miss, and the label it gives holds only DROP_WINDOW_S.
        subtask = self.tracker.observe(snap)
        if subtask != self.subtask:
            self.subtask = subtask
            self._subtask_changed = True
        truth = (snap.intruder_present, snap.progress)
        if truth != self._truth:
            self._subtask_changed = self._subtask_changed or bool(self._truth)
            self._truth = truth
        out = TickOutput(snapshot=snap)
        self._now = now
        out.wrench = snap.wrench
        out.wrench_samples = samples
        self.published["wrench"] += len(samples)
        if self._rates["joint_state"].due(now):
            out.joint_state = (snap.positions, snap.velocities)
            self.published["joint_states"] += 1
        if self._rates["camera"].due(now):
            out.images = self.renderer.render(snap)
            if self._camera_sizes:
                out.images = [_resampled(img, hw) for img, hw in zip(out.images, self._camera_sizes)]
            self.published["camera"] += 1
        changed = self._subtask_changed and now - self._status_at >= self.cfg.subtask_status_min_interval_s
        if self._rates["status"].due(now) or self._status_dirty or changed:
            out.status = self.status(snap)
            self._status_dirty = self._subtask_changed = False
            self._status_at = now
        return out

    def request_reset(self) -> None:
        """End the episode at the next tick and start the next one (a task-progress monitor's
        "failed" -> reset and retry); counted in episodes_finished and resets_requested,
        not as a timeout."""
        self._reset_requested = True

    def _episode_bookkeeping(self, now: float) -> None:
        if self._reset_requested:
            self._reset_requested = False
            self.episodes_finished += 1
            self.resets_requested += 1
            self._done_at = None
            self.world.reset(keep_arm=True)
            self._status_dirty = True
            return
        if not self.world.done:
            return
        if self._done_at is None:
            self._done_at = now
            self._status_dirty = True
            return
        if now - self._done_at >= self.cfg.reset_delay_s:
            self.episodes_finished += 1
            if not self.world.success:
                self.timeouts += 1
            self._done_at = None
            self.world.reset(keep_arm=True)
            self._status_dirty = True

    def status(self, snap: WorldSnapshot | None = None) -> TaskStatus:
        s = snap or self.world.snapshot()
        return TaskStatus(
            robot_id=self.cfg.robot_id, task=s.task, prompt=self.world.task.prompt, episode=s.episode,
            episode_time=round(s.episode_time, 4), episodes_finished=self.episodes_finished,
            successes=self.world.successes, timeouts=self.timeouts, success=s.success, grasped=s.grasped,
            tool=[round(float(v), 5) for v in s.tool], object_pos=[round(float(v), 5) for v in s.object_pos],
            goal=[round(float(v), 5) for v in s.goal], contacts=list(s.contacts),
            commands_rejected=self.follower.rejected, published=dict(self.published), stamp=self._now,
            subtask=self.subtask or subtask_label(s, self.world.scene), scene=scene_description(s, self.world.scene),
            intruder=bool(s.intruder_present), progress=s.progress, failure=s.failure, subgoal=subgoal_text(s),
            objects=[[round(float(v), 5) for v in p] for p in s.objects], held=int(s.held))


def _resampled(img: np.ndarray, hw: tuple[int, int]) -> np.ndarray:
    """A view as a camera of another resolution sees it (area when shrinking, bilinear growing)."""
    import cv2

    if img.shape[:2] == hw:
        return img
    shrink = hw[0] * hw[1] < img.shape[0] * img.shape[1]
    return cv2.resize(img, (hw[1], hw[0]), interpolation=cv2.INTER_AREA if shrink else cv2.INTER_LINEAR)
