"""Does the robot see its drops, and is acting on them worth it? The grasp watch
(physai_ros.pipeline.grasp_watch: a lost grasp from the gripper's own position) on held-out
simulated shifts, in lockstep, with the trained components.

Two settings on the same seeds, config/fleet_pipeline.yaml's pipeline tasks and events (the sims
inject drops into 20 % of pick-and-place and 10 % of place_in_order episodes; the policy also
lets go away from the pad on its own):

- `watch`: `task_retry.grasp_watch.on_lost: ignore`, the pipeline as shipped; the watch only
  reports. Its "lost" times against the sim's drops give recall per cause ("slip": the cube fell
  through the fingers; "released": let go off the pad), precision, false alarms per hour and the
  detection delay (physai_lab.evaluation.drop_detection). The trained monitor's resets on drops
  in the same shifts stand beside it.
- `replan`: `on_lost: replan`: a lost grasp drops the buffered plan (made while holding the
  cube), so System 1's next round starts from the scene as it is. Tasks per hour against
  `watch`, paired on seeds.

  python bench/drop_watch.py --seeds 8 --shift-s 60 --json bench/results/drop_watch.json
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

from physai_bench import results
from physai_bench.paired import paired, rate_ci
from physai_bench.shift_runs import add_shift_args, start_shift_run

REPO = Path(__file__).resolve().parents[1]
SETTINGS = {"watch": "ignore", "replan": "replan"}


def with_on_lost(robot, action: str):
    """The same robot, its pipeline's grasp watch acting with `action` on a lost grasp."""
    pipe = robot.task.pipeline
    watch = dataclasses.replace(pipe.grasp_watch, on_lost=action)
    task = dataclasses.replace(robot.task, pipeline=dataclasses.replace(pipe, grasp_watch=watch))
    return dataclasses.replace(robot, task=task)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_shift_args(ap, str(REPO / "config/fleet_pipeline.yaml"), seed_base=970_000,  # unlike training or pipeline_value
                   tasks="pick_place_monitored,place_in_order")
    a = ap.parse_args(argv)
    from physai_lab.evaluation.drop_detection import score
    from physai_lab.evaluation.lockstep import clone_robots
    from physai_lab.evaluation.pipeline_shift import run_shifts, summarise
    from physai_lab.evaluation.servers import restart_noise
    from physai_ros.pipeline.vla_backend import VLABackboneBackend

    run = start_shift_run(ap, a, argv, __file__)
    backend = VLABackboneBackend.from_core(run.core, attach=False)
    report = {**run.report,
              "grasp_watch": dataclasses.asdict(next(iter(run.bases.values())).task.pipeline.grasp_watch), "tasks": {}}
    t0 = time.perf_counter()
    for name in run.tasks:
        runs = {}
        for setting, action in SETTINGS.items():
            robot = with_on_lost(run.bases[name], action)
            restart_noise(run.core)  # each setting starts the same noise stream, whatever ran before
            res = run_shifts(run.core, backend, clone_robots(robot, a.slots, prefix=f"{setting}_{name}"), run.seeds,
                             run.shift, setting, clock=run.clock)
            runs[setting] = sorted(res, key=lambda s: s.seed)
            print(f"{name} {setting}: {sum(s.completed for s in res)} completed, "
                  f"{sum(len(s.drops) for s in res)} drops, {sum(len(s.grasp_lost_at) for s in res)} lost "
                  f"({time.perf_counter() - t0:.0f} s)", flush=True)
        entry: dict = {}
        for setting, shifts in runs.items():
            (totals,) = summarise(shifts)[setting].values()
            totals["completed_per_hour_ci95"] = rate_ci([s.completed for s in shifts], [s.shift_s for s in shifts])
            totals["monitor_resets_on_drops"] = totals["reset_reasons"].get("dropped", 0)
            entry[setting] = {"totals": totals, "detection": score(shifts),
                              "drops": [list(s.drops) for s in shifts],
                              "grasp_lost_at": [list(s.grasp_lost_at) for s in shifts]}
        entry["paired_completed"] = paired([s.completed for s in runs["replan"]], [s.completed for s in runs["watch"]])
        report["tasks"][name] = entry
    doc = results.write_result(a.json, run.run_info, report)
    print(json.dumps({t: {s: (e[s]["totals"]["completed"], e[s]["detection"]["recall"],
                              e[s]["detection"]["precision"], e[s]["detection"]["delay_s"])
                          for s in SETTINGS} for t, e in doc["tasks"].items()}, indent=1))


if __name__ == "__main__":
    main()
