"""Task pipeline vs System 1 alone, side by side in one run: the same robots, seeds,
intruders, drops and knocks, each worked for a shift of simulated time (evaluation.pipeline_shift).

System 1 is the served checkpoint through the serving core; the components are the same
checkpoint's VLM answering through pipeline.vla_backend (own path: each question prefills the
query's images), as config/fleet_pipeline.yaml serves them. Lockstep time: model time takes no
simulated time, so the outcome does not depend on the machine's load (only the wall time does).

    .venv/bin/python bench/pipeline_shift.py --seeds 8 --shift-s 60 --out out/pipeline_shift.json
    .venv/bin/python bench/pipeline_shift.py --checkpoint /tmp/sim_pi0_pipeline_v2 ...   # another model
    .venv/bin/python bench/pipeline_shift.py --system1 expert ...   # the components around the expert
    .venv/bin/python bench/pipeline_shift.py --noise-scale 0.5 ...     # System 1 sampled cooler
    .venv/bin/python bench/pipeline_shift.py --no-events ...           # nothing injected: System 1's own failures

`--system1 expert` answers System 1's observations with the scripted expert (evaluation.servers:
privileged, it sees the true scene, and place_in_order's expert does both steps whatever the
prompt): the components are still the checkpoint's, so this isolates what the safety checker and
the monitor are worth around a System 1 that can do every task.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

FIGURES = ("completed", "completed_per_min", "episodes", "timeouts", "resets", "resets_not_failed",
           "reset_reasons", "operator_resets", "escalations", "held_s", "intruder_s", "moving_with_intruder_s",
           "moving_share_with_intruder", "dones", "false_dones", "false_done_attempts",
           "tip_offs")

NO_EVENTS = {"intruder_rate_per_min": 0.0, "drop_prob": 0.0, "knock_prob": 0.0}


def table(summary: dict) -> str:
    cols = [(setting, task) for task in sorted({t for s in summary.values() for t in s})
            for setting in ("system1", "pipeline") if task in summary.get(setting, {})]
    lines = ["| figure | " + " | ".join(f"{t}: {s}" for s, t in cols) + " |", "|---|" + "---|" * len(cols)]
    for f in FIGURES:
        lines.append(f"| {f} | " + " | ".join(str(summary[s][t].get(f)) for s, t in cols) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fleet", default=str(REPO / "config/fleet_pipeline.yaml"))
    ap.add_argument("--checkpoint", default="", help="serve this checkpoint instead of the fleet's")
    ap.add_argument("--seeds", type=int, default=8, help="shifts per task and setting")
    ap.add_argument("--seed-base", type=int, default=950_000, help="unlike any training seed")
    ap.add_argument("--shift-s", type=float, default=60.0)
    ap.add_argument("--component-latency-s", type=float, default=0.25)
    ap.add_argument("--operator-response-s", type=float, default=20.0)
    ap.add_argument("--system1", choices=("policy", "expert"), default="policy",
                    help="what answers System 1: the served checkpoint, or the scripted expert")
    ap.add_argument("--components", choices=("model", "truth"), default="model",
                    help="truth: the components answer from the sim's ground truth (a perfect planner, "
                         "safety checker and monitor: what System 1 makes of a plan)")
    ap.add_argument("--settings", default="system1,pipeline", help="which of system1,pipeline to run")
    ap.add_argument("--tasks", default="", help="fleet tasks to run (default: every task with a pipeline)")
    ap.add_argument("--noise-scale", type=float, default=None,
                    help="every chunked task's noise_scale (fleet.yaml; default: the fleet's own)")
    ap.add_argument("--horizon", default="",
                    help="every chunked task's horizon policy, as `static:3` or `confidence:0.1,6` "
                         "(fleet.yaml horizon_policy; default: the fleet's own)")
    ap.add_argument("--no-events", action="store_true",
                    help="the sims inject no intruders, drops or knocks (what is left are System 1's own failures)")
    ap.add_argument("--slots", type=int, default=2, help="robots served at once (one core, batched)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="")
    a = ap.parse_args(argv)

    import torch

    from physai_lab.evaluation.lockstep import SimClock, clone_robots
    from physai_lab.evaluation.pipeline_shift import (ShiftConfig, pipeline_robots, run_shifts, summarise,
                                                      system1_only)
    from physai_lab.evaluation.servers import ExpertServer, build_policy_server, restart_noise
    from physai_lab.evaluation.sweep import scale_setting, with_horizon_policy, with_noise_scale
    from physai_ros.pipeline.vla_backend import VLABackboneBackend
    from physai_ros.config.fleet import load_fleet

    torch.set_num_threads(a.threads)
    cfg = load_fleet(a.fleet)
    if a.checkpoint:
        cfg = scale_setting(cfg, checkpoint=str(Path(a.checkpoint).resolve()))
    if a.noise_scale is not None:
        if not 0 <= a.noise_scale <= 1:
            ap.error("--noise-scale: from 0 to 1")
        cfg = with_noise_scale(cfg, a.noise_scale)
    if a.horizon:
        try:
            cfg = with_horizon_policy(cfg, a.horizon)
        except ValueError as e:  # FleetConfigError is one, as is a parameter that is not a number
            ap.error(f"--horizon: {e}")
    clock = SimClock()
    core = build_policy_server(cfg, clock)
    worlds: dict = {}
    if a.components == "truth":
        from physai_lab.evaluation.truth_backend import TruthBackend

        backend = TruthBackend(lambda rid: worlds[rid].runtime.world)
    else:
        backend = VLABackboneBackend.from_core(core, attach=False)
    system1 = core if a.system1 == "policy" else ExpertServer(lambda rid: worlds[rid].runtime.world, chunk_size=8)
    shift = ShiftConfig(shift_s=a.shift_s, component_latency_s=a.component_latency_s,
                        operator_response_s=a.operator_response_s)
    bases = pipeline_robots(cfg.robots)  # one robot entry per fleet task that has a pipeline
    if a.no_events:
        bases = {k: dataclasses.replace(r, sim={**r.sim, **NO_EVENTS}) for k, r in bases.items()}
    wanted = [t for t in a.tasks.split(",") if t]
    unknown = sorted(set(wanted) - set(bases))
    settings = [x for x in a.settings.split(",") if x]
    if unknown or not set(settings) <= {"system1", "pipeline"}:
        ap.error(f"--tasks: known {sorted(bases)}; --settings: system1, pipeline")
    bases = {k: v for k, v in bases.items() if not wanted or k in wanted}
    seeds = [a.seed_base + i for i in range(a.seeds)]
    doc: dict = {"fleet": a.fleet, "checkpoint": str(cfg.server.model.checkpoint), "system1": a.system1,
                 "components": a.components, "events": not a.no_events,
                 "noise_scale": {n: t.noise_scale for n, t in cfg.tasks.items() if n in bases},
                 "horizon_policy": {n: [t.horizon_policy, *t.horizon_params] for n, t in cfg.tasks.items()
                                    if n in bases},
                 "seeds": seeds,
                 "shift": {**dataclasses.asdict(shift)}, "load_average": {"start": os.getloadavg()}}
    t0 = time.perf_counter()
    results = []
    for name, base in bases.items():
        for setting in settings:
            robot = base if setting == "pipeline" else system1_only(base)
            robots = clone_robots(robot, a.slots, prefix=f"{setting}_{name}")
            if system1 is core:  # each setting starts the same noise stream, whatever ran before
                restart_noise(core)
            res = run_shifts(system1, backend if setting == "pipeline" else None, robots, seeds, shift, setting,
                             clock=clock, slot_hook=lambda slots: worlds.update({s.robot.id: s for s in slots}))
            # Columns by fleet task: two fleet tasks may run one sim task (place_in_order, each order).
            results += [dataclasses.replace(r, task=name) for r in res]
            print(f"{name} {setting}: {sum(r.completed for r in res)} completed in {len(res)} shifts "
                  f"({time.perf_counter() - t0:.0f} s)", flush=True)
    doc["wall_s"] = round(time.perf_counter() - t0, 1)
    doc["load_average"]["end"] = os.getloadavg()
    doc["shifts"] = [dataclasses.asdict(r) for r in results]
    doc["summary"] = summarise(results)
    print(table(doc["summary"]), flush=True)
    doc["finished_utc"] = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
