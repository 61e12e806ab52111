"""In-process closed-loop check of a trained checkpoint: no ROS, virtual time, but the serving
logic itself (ServingCore: validation, letterbox, tokenizer, normalisation, engine loaded by the
serving loader, horizon policy, un-normalisation) and the robot's TrajectoryBuffer at 480 Hz.

One episode: a fresh seeded cell; an observation (rendered views, joint positions, wrench) is
answered after a fixed virtual latency; the chunk goes into the buffer with its capture time
(latency compensation drops the actions already due); the next observation is captured so its
answer arrives as the executed horizon runs out. The episode ends at the task's success or time
limit. This is a quick sanity check for the trainer; bench/policy_eval.py measures through ROS.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np

from physai_ros.control.trajectory_buffer import TrajectoryBuffer
from physai_ros.install_paths import package_dir
from physai_ros.protocol.chunk import STATUS_OK, ActionChunkData
from physai_ros.protocol.observation import ImageData, ObservationData
from physai_ros.protocol.registration import RobotRegistration
from physai_ros.protocol.topics import camera_topic
from physai_ros.sim.render import Renderer
from physai_ros.sim.robot import ArmConfig
from physai_ros.sim.world import SimWorld

PHYSICS_HZ = 480.0


@dataclass(frozen=True)
class LoopConfig:
    action_period_s: float = 0.1  # fleet.yaml action_rate_hz 10
    horizon: int = 5  # static execution horizon, actions
    latency_s: float = 0.15  # observation capture -> chunk in the buffer (virtual)
    num_views: int = 2
    image_size: int = 224
    num_joints: int = 4


def serving_core(checkpoint: Path, tokenizer_path: Path, max_token_len: int, clock):
    """The serving logic a robot meets (ServingCore on one engine, FIFO), clocked by `clock`."""
    from physai_ros.engine.engine import Pi0Engine
    from physai_ros.scheduler.base import make_scheduler
    from physai_ros.serving.serving_core import ServingCore
    from physai_ros.serving.instances import EngineSlot, default_profile
    from physai_ros.engine.processor.normalizer import Normalizer
    from physai_ros.engine.processor.tokenizer import PromptTokenizer

    engine = Pi0Engine.from_lerobot_checkpoint(checkpoint)
    return ServingCore([EngineSlot("engine_0", engine, 1, default_profile(1))], make_scheduler("fifo"),
                       PromptTokenizer(tokenizer_path, max_token_len),
                       Normalizer.from_checkpoint(checkpoint), clock=clock)


def sim_registration(robot_id: str, task: str, prompt: str, joint_names, num_views: int, height: int, width: int,
                     control_period: float) -> RobotRegistration:
    """What a sim robot with these cameras registers with (one topic per view)."""
    return RobotRegistration(robot_id=robot_id, task_id=task, robot_namespace=f"/{robot_id}", prompt=prompt,
                             camera_topics=tuple(camera_topic(i) for i in range(num_views)), num_views=num_views,
                             image_height=height, image_width=width, joint_names=tuple(joint_names),
                             state_dim=len(joint_names), action_dim=len(joint_names), control_period=control_period)


def sim_observation(robot_id: str, task: str, round_id: int, t: float, views, snap, prompt: str,
                    control_period: float, horizon: int) -> ObservationData:
    """A sim snapshot and its rendered views (H x W x 3 uint8) as the observation its client sends
    (static execution horizon, nothing left of the last chunk)."""
    images = tuple(ImageData(v.shape[0], v.shape[1], "rgb8", v.shape[1] * 3, v.tobytes()) for v in views)
    return ObservationData(robot_id=robot_id, task_id=task, round_id=round_id, stamp=t, images=images,
                           state=snap.positions.astype(np.float32), wrench=snap.wrench.astype(np.float32),
                           wrench_stamp=t, prompt=prompt, exec_phase_start=0.0, actions_remaining=0,
                           control_period=control_period, horizon_policy="static", horizon_params=(float(horizon),))


def run_episode(core, clock: list, task: str, prompt: str, seed: int, lc: LoopConfig, robot_id: str) -> dict:
    world = SimWorld(ArmConfig(num_joints=lc.num_joints), task=task, seed=seed)
    renderer = Renderer(world.arm.cfg, num_views=lc.num_views, width=lc.image_size, height=lc.image_size,
                        object_size=world.scene.object_size, goal_radius=world.scene.goal_radius)
    names = world.arm.cfg.joint_names
    reg = sim_registration(robot_id, task, prompt, names, lc.num_views, lc.image_size, lc.image_size,
                           lc.action_period_s)
    res = core.register(reg)
    if not res.accepted:
        raise RuntimeError(f"registration refused: {res.reason}")
    buf = TrajectoryBuffer(names, rate_hz=PHYSICS_HZ)
    buf.set_hold_position(world.arm.positions())
    dt = 1.0 / PHYSICS_HZ
    # The serving core's clock must never go back (busy-until times, observation ages), so each
    # episode continues the virtual time of the previous one.
    t = clock[0] + 1.0
    next_obs, pending, round_id, rounds, errors = t, None, 0, 0, 0
    grasped_ever = False
    while not world.done:
        clock[0] = t
        if pending is None and t >= next_obs - 1e-9:
            snap = world.snapshot()
            round_id += 2
            obs = sim_observation(robot_id, task, round_id, t, renderer.render(snap), snap, prompt,
                                  lc.action_period_s, lc.horizon)
            refused = core.submit(obs, now=t)
            chunks = refused or core.step(now=t).chunks
            if not chunks:
                raise RuntimeError(f"no answer at t={t:.3f} round {round_id}: {core.pending()} pending")
            c = chunks[0]
            if c.status != STATUS_OK:
                errors += 1
                next_obs = t + lc.action_period_s
            else:
                pending = (t + lc.latency_s, ActionChunkData(robot_id, task, round_id, t, dt=c.dt,
                                                             joint_names=tuple(c.joint_names),
                                                             actions=np.asarray(c.actions, float),
                                                             horizon=int(c.horizon)))
        if pending is not None and t >= pending[0] - 1e-9:
            chunk = pending[1]
            buf.insert(chunk, t)
            rounds += 1
            next_obs = chunk.stamp + chunk.horizon * chunk.dt - lc.latency_s
            pending = None
        cmd = buf.advance(t)
        if cmd is not None:
            world.set_command(cmd)
        world.step(dt)
        grasped_ever = grasped_ever or world.grasped
        t += dt
    snap = world.snapshot()
    # How close it got: the tool to the marker (reach) or the cube to the pad (pick and place).
    miss = (snap.tool - snap.goal) if task == "reach" else (snap.object_pos[:2] - snap.goal[:2])
    return {"success": bool(world.success), "seconds": round(world.episode_time, 2), "rounds": rounds,
            "errors": errors, "final_distance_m": round(float(np.linalg.norm(miss)), 4),
            "grasped_ever": grasped_ever}


def evaluate_checkpoint(checkpoint, episodes: int = 4, tasks: Sequence[str] = ("pick_and_place", "reach"),
                        fleet_prompts: Optional[Dict[str, List[str]]] = None, seed: int = 10_000,
                        lc: LoopConfig = LoopConfig(), tokenizer_path: Optional[Path] = None,
                        max_token_len: int = 48) -> dict:
    """Success rate per task over `episodes` seeded episodes (seeds unlike the training data's)."""
    checkpoint = Path(checkpoint)
    tok = tokenizer_path or package_dir() / "assets" / "tokenizer.json"
    clock = [0.0]
    core = serving_core(checkpoint, tok, max_token_len, lambda: clock[0])
    from physai_ros.sim.tasks import make_task

    report = {"loop": {"horizon": lc.horizon, "latency_s": lc.latency_s, "action_period_s": lc.action_period_s,
                       "views": lc.num_views}, "tasks": {}}
    t0 = time.perf_counter()
    for task in tasks:
        prompt = (fleet_prompts or {}).get(task, [make_task(task).prompt])[0]
        runs = [run_episode(core, clock, task, prompt, seed + i, lc, f"eval_{task}_{i}") for i in range(episodes)]
        report["tasks"][task] = {
            "prompt": prompt, "episodes": episodes,
            "success_rate": sum(r["success"] for r in runs) / max(1, episodes),
            "mean_seconds_successful": (float(np.mean([r["seconds"] for r in runs if r["success"]]))
                                        if any(r["success"] for r in runs) else None),
            "runs": runs,
        }
    report["wall_seconds"] = round(time.perf_counter() - t0, 1)
    return report
