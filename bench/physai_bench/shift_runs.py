"""What the shift benches share (bench/pipeline_value.py, bench/drop_watch.py): their command line,
and the served checkpoint, fleet tasks, seeds and shift length they run in lockstep."""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from physai_bench import results

REGIME = ("the shipped sim_pi0_pipeline checkpoint (System 1 and its components) on CPU, simulated shifts in "
          "lockstep (outcomes independent of load)")
QUICK_TASK = "pick_place_monitored"


def add_shift_args(ap: argparse.ArgumentParser, fleet: str, seed_base: int, tasks: str = "") -> None:
    ap.add_argument("--fleet", default=fleet)
    ap.add_argument("--seeds", type=int, default=8, help="shifts per task and setting")
    ap.add_argument("--seed-base", type=int, default=seed_base)
    ap.add_argument("--shift-s", type=float, default=60.0)
    ap.add_argument("--tasks", default=tasks, help="fleet tasks (empty: every task with a pipeline)")
    ap.add_argument("--slots", type=int, default=2, help="robots served at once")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help=f"{QUICK_TASK}, 2 seeds of 8 s")
    ap.add_argument("--json", default="")


@dataclass
class ShiftRun:
    run_info: Any  # results.start_run's
    clock: Any  # the SimClock the server reads
    core: Any  # the policy server (System 1)
    bases: dict  # fleet task -> the robot the shifts clone
    tasks: list  # the tasks to run, in the fleet's order
    seeds: list
    shift: Any  # pipeline_shift.ShiftConfig
    report: dict  # the results document's common part (fleet, seeds, shift)


def start_shift_run(ap: argparse.ArgumentParser, a: argparse.Namespace, argv, script: str) -> ShiftRun:
    """The server on the fleet's checkpoint and what the shifts need; --quick shrinks the run."""
    import dataclasses

    import torch

    from physai_lab.evaluation.lockstep import SimClock
    from physai_lab.evaluation.pipeline_shift import ShiftConfig, pipeline_robots
    from physai_lab.evaluation.servers import build_policy_server
    from physai_ros.config.fleet import load_fleet

    if a.quick:
        a.tasks, a.seeds, a.shift_s = QUICK_TASK, 2, 8.0
    torch.set_num_threads(a.threads)
    cfg = load_fleet(a.fleet)
    bases = pipeline_robots(cfg.robots)
    wanted = [t for t in a.tasks.split(",") if t]
    if set(wanted) - set(bases):
        ap.error(f"--tasks: known {sorted(bases)}")
    run_info = results.start_run(REGIME, script, argv, quick=a.quick)
    clock = SimClock()
    seeds = [a.seed_base + i for i in range(a.seeds)]
    shift = ShiftConfig(shift_s=a.shift_s)
    return ShiftRun(run_info, clock, build_policy_server(cfg, clock), bases,
                    [t for t in bases if not wanted or t in wanted], seeds, shift,
                    {"fleet": results.from_repo(a.fleet), "seeds": seeds, "shift": dataclasses.asdict(shift)})
