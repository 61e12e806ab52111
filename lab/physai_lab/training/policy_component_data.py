"""Component co-training frames from episodes System 1 drives: the states only the policy
reaches, labelled with the components' ground truth.

training.component_data records the scripted expert, whose episodes never hold a cube stack
beside the pad, a cube nudged off its line or fingers closed on nothing; a monitor trained on
those frames alone has never been shown such a state as "not done". Here the served checkpoint
drives (training.rollouts.run_job: the real serving core, client and trajectory buffer in
lockstep, the fleet robot's sim events on), System 1's prompt is the planner's ground truth as in
training.subgoal_rollouts, and a frame every 1/fps s keeps the views (letterboxed as the server
does) with sim.component_truth's answers (component_data.component_frame). An episode ends
`AFTER_END_S` after its first "done" or "failed" (what a monitor's answer leads to) or at the
task's limit. The .npz has component_data's fields, so one file can hold both (`--merge-with`).
(Measured once, docs/training.md "A second subgoal round": these frames did not remove the
monitor's false "done"s on place_in_order, which turned out to be near-successes.)

    .venv/bin/python -m physai_lab.training.policy_component_data --out out/components/policy.npz \\
        --episodes place_in_order=64,pick_and_place=32 --merge-with out/components/train.npz
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np

from physai_lab.evaluation.lockstep import EpisodeSlot, LockstepConfig
from physai_ros.sim.tasks import make_task

from physai_lab.training.component_data import TEXT_FIELDS, component_frame, label_counts, load_components
from physai_lab.training.rollouts import RolloutJob, fleet_serving, run_in_workers, run_job
from physai_lab.training.subgoal_rollouts import TruthPlanner, deal_over_instructions

AFTER_END_S = 1.5  # as component_data.ComponentCell: the frames a monitor's answer is judged on
IMAGE_SIZE = 96  # the embedded policy's letterboxed view (component_data.ComponentCell.image_size)


class EndAfterOutcome(EpisodeSlot):
    """An episode that ends AFTER_END_S after the sim's ground truth first says done or failed."""

    def start(self, seed: int, now: float) -> None:
        super().start(seed, now)
        self.outcome_at: Optional[float] = None

    def over(self) -> bool:
        if super().over():
            return True
        world = self.runtime.world
        if self.outcome_at is None and world.progress()[0] in ("done", "failed"):
            self.outcome_at = world.episode_time
        return self.outcome_at is not None and world.episode_time - self.outcome_at >= AFTER_END_S - 1e-9


class ComponentFrameRecorder:
    """on_tick / on_episode hooks of run_job: every 1/fps s of an episode's sim time, the robot's
    views as the model sees them and the components' truth (no action labels)."""

    def __init__(self, job: RolloutJob, physics_hz: float):
        self.job = job
        self.every = int(round(physics_hz / job.fps))
        self.open: Dict[str, dict] = {}
        self.episodes: List[dict] = []

    def on_tick(self, slot: EpisodeSlot, now: float) -> None:
        rid = slot.robot.id
        rec = self.open.get(rid)
        if rec is None or rec["episode"] != slot.episode_id:
            rec = self.open[rid] = {"episode": slot.episode_id, "seed": slot.seed, "ticks": 0, "images": [],
                                    **{k: [] for k in TEXT_FIELDS + ("time",)}}
        rec["ticks"] += 1
        world = slot.runtime.world
        if (rec["ticks"] - 1) % self.every or world.done:
            return
        snap = world.snapshot()
        image, fields = component_frame(world, snap, slot.runtime.renderer.render(snap), IMAGE_SIZE)
        rec["images"].append(image)
        for key, value in fields.items():
            rec[key].append(value)

    def on_episode(self, result) -> None:
        rec = self.open.pop(result.robot_id, None)
        if rec and rec["images"]:
            self.episodes.append(rec)


def frames_of(episodes: Sequence[dict]) -> Dict[str, np.ndarray]:
    """component_data's column layout. Its frames are keyed by (seed, episode within the seed's
    cell); here each seed drives one episode, so every frame's episode is 0."""
    out = {k: np.array([v for ep in episodes for v in ep[k]]) for k in TEXT_FIELDS + ("time",)}
    out["images"] = np.concatenate([np.stack(ep["images"]) for ep in episodes])
    out["episode"] = np.zeros(len(out["images"]), np.int64)
    out["seed"] = np.concatenate([np.full(len(ep["images"]), ep["seed"], np.int64) for ep in episodes])
    return out


def run_component_job(job: RolloutJob, fleet_cfg, lock: Optional[LockstepConfig] = None) -> List[dict]:
    """The job's episodes driven by the fleet's policy, the planner's truth as System 1's prompt
    where the task has subgoals."""
    lock = lock or LockstepConfig(latency_s=job.latency_s)
    planner = None
    if len(make_task(job.task).object_names) > 1:
        planner = TruthPlanner(round(lock.physics_rate_hz / lock.client_rate_hz)).on_tick
    return run_job(job, fleet_cfg, lock, recorder_cls=ComponentFrameRecorder, make_slot=EndAfterOutcome,
                   before_tick=planner)


def _run(args) -> List[dict]:
    job, fleet_path, checkpoint, max_episode_s = args
    lock = LockstepConfig(latency_s=job.latency_s, max_episode_s=max_episode_s)
    return run_component_job(job, fleet_serving(fleet_path, checkpoint), lock)


def plan_jobs(episodes: Dict[str, int], seed_base: int, slots: int = 4) -> List[RolloutJob]:
    """Per task (its block of seeds: seed_base + 10 000 * task index), one policy job per
    instruction the task reads, taking turns over the seeds (place_in_order: both orders)."""
    jobs = []
    for t, (task, n) in enumerate(sorted(episodes.items())):
        seeds = range(seed_base + 10_000 * t, seed_base + 10_000 * t + n)
        jobs += [RolloutJob(task, "policy", mine, slots=slots, prompt=prompt)
                 for prompt, mine in deal_over_instructions(task, seeds)]
    return jobs


def record(path, jobs: Sequence[RolloutJob], fleet_path, checkpoint=None, workers: int = 2,
           merge_with=None, max_episode_s: Optional[float] = None) -> dict:
    """Run the jobs over `workers` processes and write one .npz (after merge_with's frames, if
    given); returns the summary also stored as <path>.json. max_episode_s: cut episodes shorter
    than the task's own limit (tests)."""
    t0 = time.perf_counter()
    work = [(j, str(fleet_path), str(checkpoint) if checkpoint else None, max_episode_s) for j in jobs]
    episodes = [ep for eps in run_in_workers(_run, work, workers) for ep in eps]
    if not episodes:
        raise RuntimeError("policy-driven episodes recorded no component frames")
    frames = frames_of(episodes)
    summary = {"policy_frames": int(len(frames["images"])), "episodes": len(episodes),
               "checkpoint": str(checkpoint) if checkpoint else None, "fleet": str(fleet_path),
               "events": {"policy": "the fleet robot's own sim events"},
               "seconds": round(time.perf_counter() - t0, 1),
               "policy_counts": {f: label_counts(frames, f) for f in ("safety", "monitor", "failure")}}
    cell_seeds = {t: [min(s for j in jobs if j.task == t for s in j.seeds),
                      max(s for j in jobs if j.task == t for s in j.seeds) + 1] for t in sorted({j.task for j in jobs})}
    if merge_with:
        base = load_components(merge_with)
        if set(base) != set(frames):
            raise ValueError(f"--merge-with {merge_with}: fields {sorted(base)}, expected {sorted(frames)}")
        frames = {k: np.concatenate([base[k], frames[k]]) for k in base}
        prior = Path(str(merge_with) + ".json")
        summary["merged_with"] = {"path": str(merge_with),
                                  "summary": json.loads(prior.read_text()) if prior.is_file() else None}
        summary["events"]["expert"] = (summary["merged_with"]["summary"] or {}).get("events")
        # Both blocks' seeds stay off evaluation (evaluation.sweep.training_seeds reads "cell_seeds").
        for task, rng in ((summary["merged_with"]["summary"] or {}).get("cell_seeds") or {}).items():
            cell_seeds[f"{task} (expert)"] = rng
    summary["cell_seeds"] = cell_seeds
    summary["frames"] = int(len(frames["images"]))
    summary["counts"] = {f: label_counts(frames, f) for f in ("safety", "monitor", "failure", "planner", "prompt")}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, **frames)
    Path(str(path) + ".json").write_text(json.dumps(summary, indent=1))
    return summary


def main(argv=None) -> int:
    from physai_ros.config.fleet import default_fleet_path

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help=".npz path")
    ap.add_argument("--checkpoint", default="", help="the policy that drives (default: the fleet's)")
    ap.add_argument("--fleet", default=str(default_fleet_path().parent / "fleet_pipeline.yaml"),
                    help="a fleet with a robot on each task (default: the installed fleet_pipeline.yaml)")
    ap.add_argument("--episodes", default="place_in_order=64,pick_and_place=32", metavar="TASK=N,...")
    ap.add_argument("--seed-base", type=int, default=880_000, help="away from every other recording's seeds")
    ap.add_argument("--slots", type=int, default=4, help="robots per job served side by side")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--merge-with", default="", help="a component_data .npz whose frames come first in --out")
    a = ap.parse_args(argv)
    episodes = {}
    for item in filter(None, a.episodes.split(",")):
        task, _, n = item.partition("=")
        if not n.isdigit():
            ap.error(f"--episodes: expected TASK=N, got {item!r}")
        try:
            make_task(task)
        except ValueError as e:
            ap.error(f"--episodes: {e}")
        episodes[task] = int(n)
    jobs = plan_jobs(episodes, a.seed_base, a.slots)
    if not jobs:
        ap.error("--episodes: nothing to record")
    if a.merge_with and not Path(a.merge_with).is_file():
        ap.error(f"--merge-with: no such file: {a.merge_with}")
    summary = record(a.out, jobs, a.fleet, a.checkpoint or None, a.workers, a.merge_with or None)
    print(json.dumps({k: v for k, v in summary.items() if k != "merged_with"}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
