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
    ap.add_argument("--fleet", default=str(REPO / "config/fleet_pipeline.yaml"))
    ap.add_argument("--seeds", type=int, default=8, help="shifts per task and setting")
    ap.add_argument("--seed-base", type=int, default=970_000, help="unlike any training or pipeline_value seed")
    ap.add_argument("--shift-s", type=float, default=60.0)
    ap.add_argument("--tasks", default="pick_place_monitored,place_in_order")
    ap.add_argument("--slots", type=int, default=2, help="robots served at once")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="pick_place_monitored, 2 seeds of 8 s")
    ap.add_argument("--json", default="")
    a = ap.parse_args(argv)
    if a.quick:
        a.tasks, a.seeds, a.shift_s = "pick_place_monitored", 2, 8.0
    import torch

    from physai_lab.evaluation.drop_detection import score
    from physai_lab.evaluation.lockstep import SimClock, clone_robots
    from physai_lab.evaluation.pipeline_shift import ShiftConfig, pipeline_robots, run_shifts, summarise
    from physai_lab.evaluation.servers import build_policy_server
    from physai_ros.config.fleet import load_fleet
    from physai_ros.pipeline.vla_backend import VLABackboneBackend

    torch.set_num_threads(a.threads)
    cfg = load_fleet(a.fleet)
    run_info = results.start_run("the shipped sim_pi0_pipeline checkpoint (System 1 and its components) on CPU, "
                                 "simulated shifts in lockstep (outcomes independent of load)", __file__, argv,
                                 quick=a.quick)
    clock = SimClock()
    core = build_policy_server(cfg, clock)
    backend = VLABackboneBackend.from_core(core, attach=False)
    bases = pipeline_robots(cfg.robots)
    wanted = [t for t in a.tasks.split(",") if t]
    if set(wanted) - set(bases):
        ap.error(f"--tasks: known {sorted(bases)}")
    seeds = [a.seed_base + i for i in range(a.seeds)]
    shift = ShiftConfig(shift_s=a.shift_s)
    report: dict = {"fleet": results.from_repo(a.fleet), "seeds": seeds, "shift": dataclasses.asdict(shift),
                    "grasp_watch": dataclasses.asdict(next(iter(bases.values())).task.pipeline.grasp_watch),
                    "tasks": {}}
    t0 = time.perf_counter()
    for name in wanted:
        runs = {}
        for setting, action in SETTINGS.items():
            robot = with_on_lost(bases[name], action)
            res = run_shifts(core, backend, clone_robots(robot, a.slots, prefix=f"{setting}_{name}"), seeds, shift,
                             setting, clock=clock)
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
    doc = results.write_result(a.json, run_info, report)
    print(json.dumps({t: {s: (e[s]["totals"]["completed"], e[s]["detection"]["recall"],
                              e[s]["detection"]["precision"], e[s]["detection"]["delay_s"])
                          for s in SETTINGS} for t, e in doc["tasks"].items()}, indent=1))


if __name__ == "__main__":
    main()
