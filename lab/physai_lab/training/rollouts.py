"""Recovery data: episodes someone other than the clean expert drives, every frame labelled with
the chunk the scripted expert would command from the state actually reached.

A policy trained on perfect demonstrations only never sees the states its own small errors lead
to (a cube a few cm off, fingers closed on nothing) and has no answer there. Two drivers make
those states, and the expert (which can act from any state: it re-derives its phase from what it
observes) labels them:
  policy            DAgger (Ross et al. 2011): the policy being trained drives, through the real
                    serving core, client and trajectory buffer the evaluation uses
                    (evaluation.lockstep), with the fleet's horizon policy and latency.
  perturbed_expert  DART-style noise injection (Laskey et al. 2017): the expert drives, but a share
                    of its chunks gets a smooth random joint offset or a wrong gripper command.

A frame is recorded at `fps` like the expert recording (the same images, state and wrench a robot
client sends); its label is the expert's 60 Hz plan from a copy of the world, sampled at the
action rate, exactly as expert_data.record_cell's commands would be.
"""
from __future__ import annotations

import copy
import dataclasses
import multiprocessing as mp
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

from physai_lab.evaluation.lockstep import EpisodeSlot, LockstepConfig, SimClock, clone_robots, run_episodes
from physai_lab.evaluation.servers import ExpertServer
from physai_ros.protocol.observation import ObservationData
from physai_ros.sim.multi_step import make_expert
from physai_ros.sim.narration import SubtaskTracker, narrate
from physai_ros.sim.robot import ArmConfig
from physai_ros.sim.tasks import make_task
from physai_ros.sim.world import SimWorld

from physai_lab.training.dataset import EncodedEpisode, encode_png, write_dataset

DRIVERS = ("policy", "perturbed_expert")


@dataclass(frozen=True)
class RolloutJob:
    task: str  # sim task
    driver: str  # one of DRIVERS
    seeds: tuple[int, ...]  # one episode each
    slots: int = 8  # robots run side by side (the policy answers them in one batch)
    fps: int = 10
    chunk_size: int = 10
    action_rate_hz: float = 10.0
    expert_hz: int = 60  # the expert's command rate in expert_data.RecordConfig
    latency_s: float = 0.05  # observation -> chunk, as bench/policy_eval.py models it
    joint_noise: float = 0.08  # perturbed_expert: std of a chunk's joint offset, rad
    perturb_prob: float = 0.5  # perturbed_expert: share of chunks offset
    gripper_fault_prob: float = 0.15  # perturbed_expert: share of chunks with the gripper inverted
    seed: int = 0  # perturbations' generator
    prompt: str = ""  # the task's instruction where it reads one (place_in_order's order); "": its own

    def __post_init__(self) -> None:
        if self.driver not in DRIVERS:
            raise ValueError(f"driver must be one of {DRIVERS}, got {self.driver!r}")
        if not self.seeds:
            raise ValueError("a rollout job needs at least one seed")


def expert_label(world: SimWorld, chunk: int, action_period: float, expert_hz: int = 60,
                 physics_hz: int = 480) -> np.ndarray:
    """[chunk, dim]: what the expert would command at 0, T, 2T, ... from this state, planning at
    expert_hz on a copy of the world with the recording's physics step."""
    per = int(round(action_period * expert_hz))
    if per < 1 or abs(per - action_period * expert_hz) > 1e-6 or physics_hz % expert_hz:
        raise ValueError(f"action period {action_period} s is not a whole number of {expert_hz} Hz expert steps")
    sim = copy.deepcopy(world)
    actions = make_expert(sim).rollout(sim, (chunk - 1) * per + 1, 1.0 / expert_hz,
                                          substeps=physics_hz // expert_hz, in_place=True)
    return actions[::per].astype(np.float32)


class PerturbedExpertServer(ExpertServer):
    """The expert's chunks with noise injected: half of them (perturb_prob) get a joint offset
    that ramps in over the chunk (no jump the controller would have to chase), some
    (gripper_fault_prob) the gripper command inverted: closing early or letting go."""

    def __init__(self, world_of, chunk_size: int, horizon: int, job: RolloutJob, gripper_open: float):
        super().__init__(world_of, chunk_size, horizon)
        self.rng = np.random.default_rng(job.seed)
        self.job = job
        self.gripper_open = gripper_open

    def submit(self, obs: ObservationData, now: float | None = None):
        out = super().submit(obs, now)
        chunk = self._out[-1]
        a = np.array(chunk.actions, dtype=np.float32)
        if self.rng.random() < self.job.perturb_prob:
            offset = self.rng.normal(0.0, self.job.joint_noise, a.shape[1] - 1)
            a[:, :-1] += np.linspace(0.0, 1.0, len(a))[:, None] * offset
        if self.rng.random() < self.job.gripper_fault_prob:
            closed = a[:, -1] < self.gripper_open / 2
            a[:, -1] = np.where(closed, self.gripper_open, 0.0)
        self._out[-1] = dataclasses.replace(chunk, actions=a)
        return out


class FrameRecorder:
    """on_tick hook of evaluation.lockstep.run_episodes: a frame every 1/fps of an episode's
    simulated time, labelled by the expert; on_episode closes the robot's open episode."""

    def __init__(self, job: RolloutJob, physics_hz: float):
        self.job = job
        self.every = int(round(physics_hz / job.fps))
        self.open: Dict[str, dict] = {}
        self.episodes: List[EncodedEpisode] = []

    def on_tick(self, slot: EpisodeSlot, now: float) -> None:
        rec = self.open.get(slot.robot.id)
        if rec is None or rec["episode"] != slot.episode_id:
            rec = self.open[slot.robot.id] = {"episode": slot.episode_id, "ticks": 0, "png": [], "state": [],
                                              "wrench": [], "labels": [], "subtask": [], "scene": [],
                                              "tracker": SubtaskTracker(slot.runtime.world.scene)}
        rec["ticks"] += 1
        world = slot.runtime.world
        if (rec["ticks"] - 1) % self.every or world.done:
            return
        snap = world.snapshot()
        rec["png"].append([encode_png(im) for im in slot.runtime.renderer.render(snap)])
        rec["state"].append(snap.positions.astype(np.float32))
        rec["wrench"].append(snap.wrench.astype(np.float32))
        subtask, scene = narrate(rec["tracker"], snap)
        rec["subtask"].append(subtask)
        rec["scene"].append(scene)
        rec["labels"].append(expert_label(world, self.job.chunk_size, 1.0 / self.job.action_rate_hz,
                                          self.job.expert_hz))
        self.on_frame(rec, snap)

    def on_frame(self, rec: dict, snap) -> None:
        """A subclass's own per-frame record, from the snapshot the frame was recorded from."""

    def on_episode(self, result) -> None:
        rec = self.open.pop(result.robot_id, None)
        if not rec or not rec["png"]:
            return
        labels = np.stack(rec["labels"])
        flags = np.zeros(len(labels), bool)  # next.success: only the last frame can be a success
        flags[-1] = bool(result.success)
        self.episodes.append(EncodedEpisode(
            task=self.job.task, prompt=make_task(self.job.task, self.job.prompt).prompt, seed=int(result.seed), success=bool(result.success),
            png=rec["png"], state=np.stack(rec["state"]), wrench=np.stack(rec["wrench"]), action=labels[:, 0],
            success_flags=flags, labels=labels, driver=self.job.driver, subtask=rec["subtask"], scene=rec["scene"]))


def run_job(job: RolloutJob, fleet_cfg, lock: Optional[LockstepConfig] = None, *,
            recorder_cls: type = FrameRecorder, make_slot: type = EpisodeSlot,
            before_tick: Optional[Callable[[EpisodeSlot, float], None]] = None) -> List[EncodedEpisode]:
    """The job's episodes, recorded. fleet_cfg (config.fleet.FleetConfig) gives the robot (its
    cameras, joints, horizon policy) and, for the policy driver, the server's model. A job's
    prompt replaces the robot's instruction (what its client sends and its sim reads). The
    recorder, the slots (make_slot, as run_episodes takes it) and a hook
    run on each tick before the recorder's (before_tick) are what training.subgoal_rollouts sets."""
    import torch

    from physai_lab.evaluation.servers import build_policy_server
    from physai_lab.evaluation.sweep import task_robot

    torch.set_num_threads(1)
    lock = lock or LockstepConfig(latency_s=job.latency_s)
    robot = task_robot(fleet_cfg, job.task)
    if job.prompt:
        robot = dataclasses.replace(robot, task=dataclasses.replace(robot.task, prompt=job.prompt),
                                    sim={k: v for k, v in robot.sim.items() if k != "prompt"})
    robots = clone_robots(robot, max(1, min(job.slots, len(job.seeds))), prefix=f"{job.driver}_{job.task}")
    clock = SimClock()
    recorder = recorder_cls(job, lock.physics_rate_hz)
    by_id: dict = {}
    if job.driver == "policy":
        server = build_policy_server(fleet_cfg, clock)
    else:
        server = PerturbedExpertServer(lambda rid: by_id[rid].runtime.world, job.chunk_size,
                                       max(1, job.chunk_size // 2), job, ArmConfig().gripper_max_width)
    def both(slot: EpisodeSlot, now: float) -> None:
        before_tick(slot, now)
        recorder.on_tick(slot, now)

    on_tick = recorder.on_tick if before_tick is None else both
    run_episodes(server, robots, job.seeds, lock, f"{job.driver} {job.task}", clock=clock,
                 slot_hook=lambda slots: by_id.update({s.robot.id: s for s in slots}),
                 on_episode=recorder.on_episode, on_tick=on_tick, make_slot=make_slot)
    return recorder.episodes


def fleet_serving(fleet_path, checkpoint=None):
    """The fleet at fleet_path, serving `checkpoint` instead of its own model when one is given."""
    from physai_lab.evaluation.sweep import scale_setting
    from physai_ros.config.fleet import load_fleet

    cfg = load_fleet(fleet_path)
    if checkpoint:
        cfg = scale_setting(cfg, checkpoint=str(Path(checkpoint).resolve()), preset=None)
    return cfg


def run_in_workers(fn, work: list, workers: int) -> list:
    """fn over `work`, in `workers` spawned processes when there is more than one item."""
    if workers > 1 and len(work) > 1:
        with mp.get_context("spawn").Pool(workers) as pool:
            return pool.map(fn, work, chunksize=1)
    return [fn(w) for w in work]


def _run(args) -> List[EncodedEpisode]:
    job, fleet_path, checkpoint = args
    return run_job(job, fleet_serving(fleet_path, checkpoint))


def split_jobs(job: RolloutJob, parts: int) -> List[RolloutJob]:
    """One job's seeds dealt over `parts` jobs (for worker processes); perturbation seeds differ."""
    parts = max(1, min(parts, len(job.seeds)))
    return [dataclasses.replace(job, seeds=tuple(job.seeds[k::parts]), seed=job.seed * 1000 + k) for k in range(parts)]


def record_rollouts(root, jobs: Sequence[RolloutJob], fleet_path, checkpoint=None, workers: int = 2,
                    joint_names: Sequence[str] = (), log=print) -> dict:
    """Run the jobs (split over `workers` processes) and write one labelled dataset at root."""
    t0 = time.perf_counter()
    work = [(j, str(fleet_path), str(checkpoint) if checkpoint else None)
            for job in jobs for j in split_jobs(job, workers)]
    per_job = run_in_workers(_run, work, workers)
    episodes = [ep for eps in per_job for ep in eps]
    if not episodes:
        raise RuntimeError("rollouts recorded no frames")
    names = list(joint_names) or list(ArmConfig().joint_names)
    write_dataset(Path(root), episodes, fps=jobs[0].fps, joint_names=names)
    summary: dict = {"episodes": len(episodes), "frames": sum(len(e) for e in episodes),
                     "seconds": round(time.perf_counter() - t0, 1), "by": {}}
    for ep in episodes:
        key = f"{ep.driver} {ep.task}"
        s = summary["by"].setdefault(key, {"episodes": 0, "successes": 0, "frames": 0})
        s["episodes"] += 1
        s["successes"] += int(ep.success)
        s["frames"] += len(ep)
    log(f"recorded {summary['episodes']} recovery episodes, {summary['frames']} frames in {summary['seconds']} s: "
        + "; ".join(f"{k} {v['successes']}/{v['episodes']} succeeded" for k, v in summary["by"].items()))
    return summary
