"""Expert demonstrations from the scripted expert, frame by frame as a live sim robot shows them.

Each cell runs several consecutive episodes the way SimRobotRuntime does: after a success (or a
timeout) it keeps going for `reset_delay_s`, then resets the placements with the arm left where
it is, so episodes start from the home pose and from wherever the last one ended. Physics steps
at the runtime's 480 Hz; the expert commands at `control_hz` (its carrot moves smoothly); every
frame (at `fps`) records the images the sim robot would publish (same Renderer, same size), the
joint positions (the state a robot client sends), the newest wrench sample and the command set
right after the frame, which is what a policy answering that observation should command then.
Chunks are not stored: a training sample takes the commands of later frames at the action rate
(LeRobot's delta_timestamps), see dataset.chunk_indices.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, List

import numpy as np

from physai_ros.sim.expert import ExpertConfig
from physai_ros.sim.multi_step import make_expert, subgoal_text
from physai_ros.sim.narration import SubtaskTracker, narrate
from physai_ros.sim.render import Renderer
from physai_ros.sim.robot import ArmConfig
from physai_ros.sim.tasks import make_task
from physai_ros.sim.world import SimWorld


@dataclass(frozen=True)
class RecordConfig:
    task: str = "pick_and_place"
    seed: int = 0
    episodes: int = 4  # consecutive episodes of one cell
    prompt: str = ""  # the instruction ("": the task's own; place_in_order: sets the cubes' order)
    num_joints: int = 4
    num_views: int = 2
    image_width: int = 224
    image_height: int = 224
    fps: int = 30  # frame rate (the sim robot's camera rate)
    control_hz: int = 60  # expert command rate; a multiple of fps
    physics_hz: int = 480  # a multiple of control_hz
    reset_delay_s: float = 0.5
    first_place_offset: tuple[float, float] = (0.0, 0.0)  # ExpertConfig.first_place_offset (place_in_order)

    def __post_init__(self) -> None:
        if self.control_hz % self.fps or self.physics_hz % self.control_hz:
            raise ValueError("control_hz must be a multiple of fps and physics_hz of control_hz")


@dataclass
class Episode:
    task: str  # sim task name
    prompt: str  # the sim task's own instruction
    seed: int
    success: bool
    images: List[List[np.ndarray]] = field(default_factory=list)  # per frame, per view: HxWx3 uint8 RGB
    state: List[np.ndarray] = field(default_factory=list)  # joints then gripper
    wrench: List[np.ndarray] = field(default_factory=list)
    action: List[np.ndarray] = field(default_factory=list)  # command set at this frame
    success_flags: List[bool] = field(default_factory=list)
    subtask: List[str] = field(default_factory=list)  # sim.narration's answers per frame
    scene: List[str] = field(default_factory=list)
    subgoal: List[str] = field(default_factory=list)  # sim.multi_step.subgoal_text per frame (the planner's truth)

    def __len__(self) -> int:
        return len(self.state)


def record_cell(cfg: RecordConfig) -> Iterator[Episode]:
    """Yield cfg.episodes consecutive expert episodes of one seeded cell."""
    world = SimWorld(ArmConfig(num_joints=cfg.num_joints), task=make_task(cfg.task, cfg.prompt), seed=cfg.seed)
    renderer = Renderer(world.arm.cfg, num_views=cfg.num_views, width=cfg.image_width, height=cfg.image_height,
                        object_size=world.scene.object_size, goal_radius=world.scene.goal_radius)
    expert = make_expert(world, ExpertConfig(first_place_offset=tuple(cfg.first_place_offset)))
    tracker = SubtaskTracker(world.scene)
    control_dt = 1.0 / cfg.control_hz
    substeps = cfg.physics_hz // cfg.control_hz
    per_frame = cfg.control_hz // cfg.fps
    for k in range(cfg.episodes):
        if k:
            world.reset(keep_arm=True)
        ep = Episode(task=world.task.name, prompt=world.task.prompt, seed=cfg.seed, success=False)
        done_at = None
        step = 0
        while True:
            snap = world.snapshot()
            if snap.done and done_at is None:
                done_at = snap.time
            if done_at is not None and snap.time - done_at >= cfg.reset_delay_s - 1e-9:
                break
            command = expert.act(snap, control_dt)
            if step % per_frame == 0:
                ep.images.append(renderer.render(snap))
                ep.state.append(snap.positions.astype(np.float32))
                ep.wrench.append(snap.wrench.astype(np.float32))
                ep.action.append(command.astype(np.float32))
                ep.success_flags.append(bool(snap.success))
                subtask, scene = narrate(tracker, snap)
                ep.subtask.append(subtask)
                ep.scene.append(scene)
                ep.subgoal.append(subgoal_text(snap))
            world.set_command(command)
            for _ in range(substeps):
                world.step(1.0 / cfg.physics_hz)
            step += 1
        ep.success = bool(world.success)
        yield ep
