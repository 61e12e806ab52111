"""What a task pipeline is worth to a factory, on the same seeds in one run: System 1 alone, the
pipeline with the trained components, the pipeline with perfect ones.

Each setting works config/fleet_pipeline.yaml's pipeline tasks for shifts of simulated time
(physai_lab.evaluation.pipeline_shift: the robot client's own pipeline logic, the served
checkpoint as System 1, the sims' intruders, drops and knocks, an operator acknowledging
escalations 20 s later), in lockstep, so the outcome does not depend on the machine's load.

- `system1`: the task without its pipeline, System 1 on the task's own prompt. For
  place_in_order that is the two-cube instruction, which System 1 was never trained on (it was
  trained on the single-cube subgoals the planner names): no prompt it was trained on does the
  whole task, which is the planner's reason to exist. Said, not hidden.
- `pipeline`: the task's components answered by the checkpoint's own backbone (the trained
  planner, safety checker and monitor).
- `perfect`: the same pipeline answered from the sim's ground truth (physai_lab.evaluation.
  truth_backend): what System 1 makes of a right plan, a right safety answer and a right verdict.

Per task and setting: tasks completed per hour with a 95 % interval (shifts resampled), false
"done"s per hour (the monitor said done and the success test had not held within 1 s), the arm's
moving share of the time a person was in the cell (with its interval), time-outs and resets. Per
pair of settings: the per-shift completions compared on the same seeds (mean difference with its
bootstrap interval, wins / losses, Wilcoxon signed-rank p). The flow sampler's noise stream is
shared by every robot the run serves, so equal seeds give equal scenes, not equal noise.

  python bench/pipeline_value.py --seeds 8 --shift-s 60 --json bench/results/pipeline_value.json
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from physai_bench import results
from physai_bench.paired import paired, rate_ci, share_ci
from physai_bench.shift_runs import add_shift_args, start_shift_run

REPO = Path(__file__).resolve().parents[1]
SETTINGS = ("system1", "pipeline", "perfect")
PAIRS = (("pipeline", "system1"), ("perfect", "system1"), ("pipeline", "perfect"))


def per_setting(shifts: list) -> dict:
    """One setting's shifts of one task: pipeline_shift.summarise's totals, per hour with their
    95 % intervals."""
    from physai_lab.evaluation.pipeline_shift import summarise

    (out,) = summarise(shifts)[shifts[0].setting].values()  # one sim task per call
    secs = [s.shift_s for s in shifts]
    out.update(hours=round(out["shift_s"] / 3600, 3),
               completed_per_hour=round(out["completed"] / max(out["shift_s"], 1e-9) * 3600, 2),
               completed_per_hour_ci95=rate_ci([s.completed for s in shifts], secs),
               false_dones_per_hour=round(out["false_dones"] / max(out["shift_s"], 1e-9) * 3600, 2),
               moving_share_with_intruder_ci95=share_ci([s.moving_with_intruder_s for s in shifts],
                                                        [s.intruder_s for s in shifts]))
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_shift_args(ap, str(REPO / "config/fleet_pipeline.yaml"), seed_base=950_000)  # unlike any training seed
    a = ap.parse_args(argv)
    from physai_lab.evaluation.lockstep import clone_robots
    from physai_lab.evaluation.pipeline_shift import run_shifts, system1_only
    from physai_lab.evaluation.servers import restart_noise
    from physai_lab.evaluation.truth_backend import TruthBackend
    from physai_ros.pipeline.vla_backend import VLABackboneBackend

    run = start_shift_run(ap, a, argv, __file__)
    worlds: dict = {}
    backends = {"system1": None, "pipeline": VLABackboneBackend.from_core(run.core, attach=False),
                "perfect": TruthBackend(lambda rid: worlds[rid].runtime.world)}
    report: dict = {**run.report, "tasks": {}}
    t0 = time.perf_counter()
    for name in run.tasks:
        base = run.bases[name]
        runs = {}
        for setting in SETTINGS:
            robot = system1_only(base) if setting == "system1" else base
            restart_noise(run.core)  # each setting starts the same noise stream, whatever ran before
            res = run_shifts(run.core, backends[setting], clone_robots(robot, a.slots, prefix=f"{setting}_{name}"),
                             run.seeds, run.shift, setting, clock=run.clock, slot_hook=lambda slots: worlds.update(
                                 {s.robot.id: s for s in slots}))
            runs[setting] = sorted(res, key=lambda s: s.seed)
            print(f"{name} {setting}: {sum(s.completed for s in res)} completed in {len(res)} shifts "
                  f"({time.perf_counter() - t0:.0f} s)", flush=True)
        entry = {s: per_setting(v) for s, v in runs.items()}
        entry["paired_completed"] = {f"{x}_vs_{y}": paired([s.completed for s in runs[x]], [s.completed for s in runs[y]])
                                     for x, y in PAIRS}
        entry["per_shift_completed"] = {s: [r.completed for r in v] for s, v in runs.items()}
        report["tasks"][name] = entry
    doc = results.write_result(a.json, run.run_info, report)
    print(json.dumps({t: {s: (e[s]["completed"], e[s]["completed_per_hour_ci95"], e[s]["false_dones"],
                              e[s]["moving_share_with_intruder"]) for s in SETTINGS} for t, e in doc["tasks"].items()},
                     indent=1))


if __name__ == "__main__":
    main()
