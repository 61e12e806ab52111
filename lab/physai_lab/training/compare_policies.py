"""Closed-loop action success of two checkpoints side by side, on the same episodes (
text co-training must not cost action success).

Each (checkpoint, task, robot) setting runs exactly as bench/policy_eval.py's "fleet.yaml default"
setting (evaluation.sweep.run_setting: the real ServingCore, robot client, trajectory buffer and
sim world in lockstep time, the task's fleet.yaml horizon policy, --latency-ms), on the bench's
evaluation seeds (evaluation.sweep.eval_seeds, refused if either manifest lists one for
training). Results are paired by seed, so a difference is read off the episodes where the two
disagree rather than off two independent rates.

    .venv/bin/python -m physai_lab.training.compare_policies --old physai_ros/assets/policy/sim_pi0 \
        --new out/sim_pi0_text --episodes 100 [--robot pick_and_place=robot_2] --out out/compare.json
"""
from __future__ import annotations

import argparse
import json
import os
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from physai_lab.evaluation.lockstep import LockstepConfig
from physai_lab.evaluation.results import wilson_interval
from physai_lab.evaluation.sweep import (Setting, disjoint_from_training, eval_seeds, fleet_for, run_setting,
                                         task_robot, training_manifest)


def _run(job):
    checkpoint, fleet, task, robot, seeds, slots, latency_s = job
    import torch

    torch.set_num_threads(1)  # one core per job, as bench/policy_eval.py
    cfg = fleet_for(fleet, checkpoint=checkpoint)
    r = task_robot(cfg, task, robot)
    setting = Setting(task, r.task.horizon_policy, tuple(r.task.horizon_params), robot)
    t0 = time.perf_counter()
    res = run_setting(cfg, setting, seeds, slots=slots, lockstep=LockstepConfig(latency_s=latency_s))
    return {int(e.seed): bool(e.success) for e in res}, time.perf_counter() - t0, setting.label


def compare(old, new, settings, episodes: int, fleet=None, slots: int = 8, latency_s: float = 0.05,
            jobs: int = 2, log=print) -> dict:
    """settings: [(task, robot id or "")]. Returns the side-by-side document."""
    for ckpt in (old, new):
        seeds = [s for task, _ in settings for s in eval_seeds(task, episodes)]
        overlap = disjoint_from_training(seeds, training_manifest(fleet_for(fleet, checkpoint=ckpt)))
        if overlap:
            raise ValueError(f"{ckpt}: evaluation seeds overlap its training seeds: {overlap[:10]}")
    work = [(str(ck), fleet, task, robot, eval_seeds(task, episodes), slots, latency_s)
            for task, robot in settings for ck in (old, new)]
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        results = list(pool.map(_run, work))
    rows = []
    for k, (task, robot) in enumerate(settings):
        (a, wa, label), (b, wb, _) = results[2 * k], results[2 * k + 1]
        row = {"setting": label, "episodes": episodes}
        for name, r, wall in (("old", a, wa), ("new", b, wb)):
            n, s = len(r), sum(r.values())
            lo, hi = wilson_interval(s, n)
            row[name] = {"successes": s, "rate": round(s / n, 4), "wilson95": [round(lo, 4), round(hi, 4)],
                         "wall_s": round(wall, 1)}
        row["paired"] = {"both": sum(a[x] and b[x] for x in a), "only_old": sum(a[x] and not b[x] for x in a),
                         "only_new": sum(b[x] and not a[x] for x in a), "neither": sum(not a[x] and not b[x] for x in a)}
        rows.append(row)
        log(f"{label}: old {row['old']['successes']}/{episodes}, new {row['new']['successes']}/{episodes} "
            f"(only old {row['paired']['only_old']}, only new {row['paired']['only_new']})")
    return {"old": str(old), "new": str(new), "fleet": fleet or "config/fleet.yaml (embedded)",
            "latency_ms": latency_s * 1e3, "slots": slots, "seeds": "evaluation.sweep.eval_seeds (10 000 000 up)",
            "rows": rows}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", required=True)
    ap.add_argument("--new", required=True)
    ap.add_argument("--episodes", type=int, default=50, help="episodes per task (the same seeds for both)")
    ap.add_argument("--tasks", default="pick_and_place,reach")
    ap.add_argument("--robot", action="append", default=[], metavar="TASK=ROBOT_ID",
                    help="also evaluate this fleet.yaml robot on its task (e.g. pick_and_place=robot_2, one camera)")
    ap.add_argument("--fleet", default=None)
    ap.add_argument("--slots", type=int, default=8)
    ap.add_argument("--latency-ms", type=float, default=50.0)
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--out", default="")
    a = ap.parse_args(argv)
    settings = [(t.strip(), "") for t in a.tasks.split(",") if t.strip()]
    settings += [tuple(x.split("=", 1)) for x in a.robot]
    t0 = time.perf_counter()
    doc = compare(a.old, a.new, settings, a.episodes, a.fleet, a.slots, a.latency_ms / 1e3, a.jobs)
    doc["seconds"] = round(time.perf_counter() - t0, 1)
    doc["load_average"] = os.getloadavg()
    text = json.dumps(doc, indent=2)
    print(text)
    if a.out:
        Path(a.out).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
