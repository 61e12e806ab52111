"""Recovery data for System 1 on a multi-step task's subgoals: the policy drives
place_in_order under a perfect planner, the expert labels every frame, and the episode is cut
per subgoal into the step tasks the demonstrations train (training.subgoal_data).

Demonstrations alone left System 1 unable to carry out the planner's subgoals: under a perfect
planner it put the wrong cube on the pad first, knocked or dropped cubes and ran out of time
(docs/training.md, "Both orders"). Those are the states its own mistakes lead to,
which the scripted expert's clean episodes never visit; DAgger (training.rollouts) is how the
single-object tasks learnt to recover from theirs. Here:
  - System 1's prompt is the planner's ground truth, re-read as the client builds each observation
    (sim.multi_step.subgoal_text: "pick up the red cube and place it on the green pad"); holding the
    wrong cube it is told the right one, and the expert's label puts the wrong one down first;
  - the driver is the policy (DAgger) or the noisy expert (training.rollouts.PerturbedExpertServer),
    on the fleet's robot for the task with its sim events (fleet_pipeline.yaml: intruders, drops,
    knocks), the instructions taking turns over the seeds (both cube orders);
  - an attempt that can no longer succeed (the wrong cube on the pad first, a cube off the table)
    ends there: the expert has no label that undoes it, and the frames before it are kept;
  - each run of one subgoal becomes an episode of task "<task>.step<k>.<colour>", k the cube's
    place in the instruction's order, so --task-weights and BatchMaker's one-prompt-per-task rule
    treat them as the demonstrations' steps.

    .venv/bin/python -m physai_lab.training.subgoal_rollouts --out out/sim_subgoal_recovery \\
        --checkpoint physai_ros/assets/policy/sim_pi0_pipeline --episodes policy=60,perturbed_expert=60
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import List, Optional, Sequence

from physai_lab.evaluation.lockstep import EpisodeSlot, LockstepConfig
from physai_ros.sim.events import WRONG_ORDER
from physai_ros.sim.multi_step import subgoal_text
from physai_ros.sim.robot import ArmConfig
from physai_ros.sim.tasks import make_task

from physai_lab.training.dataset import EncodedEpisode, write_dataset
from physai_lab.training.rollouts import FrameRecorder, RolloutJob, fleet_serving, run_in_workers, run_job
from physai_lab.training.subgoal_data import step_task, subgoal_runs

PER_FRAME = ("png", "state", "wrench", "action", "success_flags", "labels", "subtask", "scene")


def lost(world) -> bool:
    """The attempt cannot succeed any more and the expert has no label that undoes it."""
    return world.failure == WRONG_ORDER or any(float(p[2]) < 0 for p in world.objects)


class SubgoalSlot(EpisodeSlot):
    """An episode that also ends once it is lost (the time left would only record bad labels)."""

    def over(self) -> bool:
        return super().over() or lost(self.runtime.world)


class TruthPlanner:
    """on_tick hook: System 1's prompt is the planner's ground truth, set before the client's tick
    builds the next observation (at the client's rate: it only matters then)."""

    def __init__(self, every: int):
        self.every = max(1, every)
        self.ticks: dict[str, int] = {}

    def on_tick(self, slot: EpisodeSlot, now: float) -> None:
        n = self.ticks.get(slot.robot.id, 0)
        self.ticks[slot.robot.id] = n + 1
        if n % self.every == 0:
            slot.client.prompt = subgoal_text(slot.runtime.world.snapshot())


class SubgoalRecorder(FrameRecorder):
    """FrameRecorder with each frame's subgoal; an episode is handed back cut per subgoal."""

    def on_tick(self, slot: EpisodeSlot, now: float) -> None:
        if not lost(slot.runtime.world):
            super().on_tick(slot, now)

    def on_frame(self, rec: dict, snap) -> None:
        rec.setdefault("subgoal", []).append(subgoal_text(snap))

    def on_episode(self, result) -> None:
        rec = self.open.get(result.robot_id)
        subgoals = list(rec.get("subgoal", [])) if rec else []
        kept = len(self.episodes)
        super().on_episode(result)
        if len(self.episodes) == kept:
            return
        whole = self.episodes.pop()
        self.episodes += split_encoded(whole, subgoals, self.job.prompt)


def split_encoded(ep: EncodedEpisode, subgoals: Sequence[str], prompt: str = "") -> List[EncodedEpisode]:
    """The episode's runs of one subgoal as step episodes (k: the cube's place in the order)."""
    if len(subgoals) != len(ep):
        raise ValueError(f"episode of {ep.task}: {len(subgoals)} subgoals for {len(ep)} frames")
    order = make_task(ep.task, prompt).object_names
    out = []
    for sg, a, b in subgoal_runs(subgoals):
        k = next(i for i, name in enumerate(order) if name in sg) + 1
        cut = {f: getattr(ep, f)[a:b] for f in PER_FRAME if getattr(ep, f) is not None}
        out.append(dataclasses.replace(ep, task=step_task(ep.task, k, sg), prompt=sg, **cut))
    return out


def run_subgoal_job(job: RolloutJob, fleet_cfg, lock: Optional[LockstepConfig] = None) -> List[EncodedEpisode]:
    """The job's episodes under the truth planner, recorded and cut per subgoal (training.rollouts'
    run_job with this module's recorder, slots and planner)."""
    lock = lock or LockstepConfig(latency_s=job.latency_s)
    planner = TruthPlanner(round(lock.physics_rate_hz / lock.client_rate_hz))
    return run_job(job, fleet_cfg, lock, recorder_cls=SubgoalRecorder, make_slot=SubgoalSlot,
                   before_tick=planner.on_tick)


def _run(args) -> List[EncodedEpisode]:
    job, fleet_path, checkpoint = args
    return run_subgoal_job(job, fleet_serving(fleet_path, checkpoint))


def plan_jobs(task: str, episodes: dict, seed_base: int, slots: int = 4) -> List[RolloutJob]:
    """One job per (driver, instruction), the task's instructions taking turns over the seeds
    (each driver's block of seeds is its own: seed_base + 10 000 * driver index)."""
    jobs = []
    for d, driver in enumerate(("policy", "perturbed_expert")):
        seeds = range(seed_base + 10_000 * d, seed_base + 10_000 * d + episodes.get(driver, 0))
        for v, (prompt, mine) in enumerate(deal_over_instructions(task, seeds)):
            jobs.append(RolloutJob(task, driver, mine, slots=slots, prompt=prompt, seed=seed_base + 2 * d + v))
    return jobs


def deal_over_instructions(task: str, seeds: Sequence[int]) -> List[tuple]:
    """[(instruction, its seeds)]: a task that reads its instruction takes its variants in turn
    over the seeds (place_in_order: red first, blue first); any other runs every seed on "" (the
    robot's own prompt). Instructions left without a seed are left out."""
    t = make_task(task)
    variants = t.prompt_variants() if t.reads_prompt else ("",)
    dealt = [(prompt, tuple(seeds[v::len(variants)])) for v, prompt in enumerate(variants)]
    return [(prompt, mine) for prompt, mine in dealt if mine]


def record(root, jobs: Sequence[RolloutJob], fleet_path, checkpoint=None, workers: int = 2) -> dict:
    """Run the jobs over `workers` processes and write one labelled dataset at root."""
    t0 = time.perf_counter()
    work = [(j, str(fleet_path), str(checkpoint) if checkpoint else None) for j in jobs]
    per_job = run_in_workers(_run, work, workers)
    episodes = [ep for eps in per_job for ep in eps]
    if not episodes:
        raise RuntimeError("subgoal rollouts recorded no frames")
    write_dataset(Path(root), episodes, fps=jobs[0].fps, joint_names=list(ArmConfig().joint_names))
    by: dict = {}
    for ep in episodes:
        s = by.setdefault(f"{ep.driver} {ep.task}", {"episodes": 0, "frames": 0})
        s["episodes"] += 1
        s["frames"] += len(ep)
    seeds = [s for j in jobs for s in j.seeds]
    summary = {"episodes": len(episodes), "frames": sum(len(e) for e in episodes), "by": by,
               "seconds": round(time.perf_counter() - t0, 1), "cell_seeds": [min(seeds), max(seeds) + 1],
               "checkpoint": str(checkpoint) if checkpoint else None,
               "jobs": [{"driver": j.driver, "prompt": j.prompt, "seeds": len(j.seeds)} for j in jobs]}
    (Path(root) / "meta" / "subgoal_rollouts.json").write_text(json.dumps(summary, indent=1))
    return summary


def main(argv=None) -> int:
    from physai_ros.config.fleet import default_fleet_path

    from physai_lab.training.rollouts import DRIVERS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--checkpoint", default="", help="the policy that drives (default: the fleet's)")
    ap.add_argument("--fleet", default=str(default_fleet_path().parent / "fleet_pipeline.yaml"),
                    help="a fleet with a robot on --task (default: the installed fleet_pipeline.yaml)")
    ap.add_argument("--task", default="place_in_order")
    ap.add_argument("--episodes", default="policy=60,perturbed_expert=60", metavar="DRIVER=N,...")
    ap.add_argument("--seed-base", type=int, default=840_000, help="away from every other recording's seeds")
    ap.add_argument("--slots", type=int, default=4, help="robots per job served side by side")
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args(argv)
    episodes = {}
    for item in filter(None, a.episodes.split(",")):
        driver, _, n = item.partition("=")
        if driver not in DRIVERS or not n.isdigit():
            ap.error(f"--episodes: expected DRIVER=N with DRIVER one of {DRIVERS}, got {item!r}")
        episodes[driver] = int(n)
    if len(make_task(a.task).object_names) < 2:
        ap.error(f"--task {a.task!r} has one object: no subgoals (training.rollouts records it)")
    jobs = plan_jobs(a.task, episodes, a.seed_base, a.slots)
    if not jobs:
        ap.error("--episodes: nothing to record")
    try:
        summary = record(a.out, jobs, a.fleet, a.checkpoint or None, a.workers)
    except KeyboardInterrupt:  # Ctrl-C reaches the workers too; the dataset is written only at the end
        print(f"interrupted: nothing written to {a.out}", file=sys.stderr, flush=True)
        return 130
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
