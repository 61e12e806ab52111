"""System 1 demonstrations of a multi-step task's subgoals: what lets the action model
execute a System 2 planner's answers.

A planner hands System 1 one single-object instruction at a time (sim.multi_step.subgoal_text:
place_in_order's "pick up the red cube and place it on the green pad", then the blue cube's). The
scripted expert's place_in_order episodes are recorded as usual and cut where the planner's truth
changes: each run of frames becomes its own episode, its prompt the subgoal, its task
"<task>.step<k>.<colour>" (train.BatchMaker draws tasks, and a task's frames share one prompt). The frames
after success ("done") stay with the last step: the arm resting after the place. The last frames
of a step hold the arm where that step ended, so the chunks a step's end is trained on ask for
stillness until the next subgoal arrives, which is what a robot should do while its planner has
not spoken yet.

    .venv/bin/python -m physai_lab.training.subgoal_data --out out/sim_subgoal_data --cells 40 \\
        --episodes 2 --seed-base 830000 [--both-orders]
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import json
from pathlib import Path
from typing import List, Optional, Sequence

import numpy as np

from physai_ros.sim.multi_step import DONE_SUBGOAL
from physai_ros.sim.tasks import CUBE_NAMES, make_task

from physai_lab.training.dataset import EncodedEpisode
from physai_lab.training.expert_data import Episode, RecordConfig, record_cell
from physai_lab.training.record import record_dataset

MULTI_STEP_TASKS = ("place_in_order",)


def step_task(task: str, step: int, subgoal: str) -> str:
    """"<task>.step<k>.<colour>": one name per prompt (train.BatchMaker gives a task's frames one
    prompt), and the step kept apart (the red cube onto the bare pad is not the red cube onto the
    blue one, though the subgoal reads the same)."""
    colour = next((c.split()[0] for c in CUBE_NAMES if c in subgoal), "")
    return f"{task}.step{step}" + (f".{colour}" if colour else "")


def subgoal_runs(subgoals: Sequence[str]) -> List[tuple[str, int, int]]:
    """(subgoal, start, end) of each run of one subgoal; "done" frames join the run before."""
    runs: List[tuple[str, int, int]] = []
    for i, sg in enumerate(subgoals):
        if sg == DONE_SUBGOAL and runs:
            runs[-1] = (runs[-1][0], runs[-1][1], i + 1)
        elif runs and runs[-1][0] == sg and runs[-1][2] == i:
            runs[-1] = (sg, runs[-1][1], i + 1)
        elif sg != DONE_SUBGOAL:
            runs.append((sg, i, i + 1))
    return runs


def split_by_subgoal(ep: Episode, keep_steps: Optional[Sequence[int]] = None) -> List[Episode]:
    """The episode's runs of one subgoal as episodes of their own ("done" frames join the last);
    keep_steps (1-based) keeps only those steps' runs."""
    if len(ep.subgoal) != len(ep):
        raise ValueError(f"episode of {ep.task}: {len(ep.subgoal)} subgoals for {len(ep)} frames")
    out = []
    per_frame = ("images", "state", "wrench", "action", "success_flags", "subtask", "scene", "subgoal")
    for k, (sg, a, b) in enumerate(subgoal_runs(ep.subgoal)):
        if keep_steps is not None and k + 1 not in keep_steps:
            continue
        cut = {f: getattr(ep, f)[a:b] for f in per_frame}
        # A step of a successful episode reached its subgoal: it is a good demonstration (the
        # loader keeps only successful episodes).
        out.append(dataclasses.replace(ep, task=step_task(ep.task, k + 1, sg), prompt=sg, success=ep.success, **cut))
    return out


def _record(cfg: RecordConfig, keep_steps: Optional[Sequence[int]] = None) -> List[EncodedEpisode]:
    return [EncodedEpisode.encode(seg) for ep in record_cell(cfg) if ep.success
            for seg in split_by_subgoal(ep, keep_steps)]


def record_subgoals(root, cells: Sequence[RecordConfig], workers: int = 2,
                    keep_steps: Optional[Sequence[int]] = None) -> dict:
    recorder = functools.partial(_record, keep_steps=tuple(keep_steps) if keep_steps else None)
    summary = record_dataset(root, cells, workers, log=lambda _: None, recorder=recorder)
    summary["cell_seeds"] = [min(c.seed for c in cells), max(c.seed for c in cells) + 1]
    summary["first_place_offset_max_m"] = round(max(abs(v) for c in cells for v in c.first_place_offset), 4)
    summary["steps_kept"] = list(keep_steps) if keep_steps else "all"
    (Path(root) / "meta" / "subgoal_summary.json").write_text(json.dumps(summary, indent=1))
    return summary


def plan_subgoal_cells(base: RecordConfig, cells: int, seed_base: int, both_orders: bool = False,
                       first_offset_m: float = 0.0) -> List[RecordConfig]:
    """Cell c: seed seed_base + c; with both_orders its prompt is the task's c-th instruction in
    turn (make_task(...).prompt_variants()), so the steps' prompts name each cube first as often.
    first_offset_m > 0: each cell's expert places the first cube off the pad centre by an offset
    drawn uniformly within +-first_offset_m on each axis (seeded by seed_base)."""
    variants = make_task(base.task).prompt_variants() if both_orders else ("",)
    rng = np.random.default_rng(seed_base)
    offsets = rng.uniform(-first_offset_m, first_offset_m, (cells, 2)) if first_offset_m > 0 else np.zeros((cells, 2))
    return [dataclasses.replace(base, seed=seed_base + c, prompt=variants[c % len(variants)],
                                first_place_offset=(float(offsets[c, 0]), float(offsets[c, 1]))) for c in range(cells)]


def step_numbers(text: str) -> List[int]:
    """--keep-steps "2" or "1,2": 1-based step numbers, anything else a usage error."""
    try:
        steps = [int(k) for k in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"steps are 1-based numbers separated by commas, not {text!r}") from None
    if any(k < 1 for k in steps):
        raise argparse.ArgumentTypeError(f"steps count from 1: {text!r}")
    return steps


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--task", default="place_in_order", choices=MULTI_STEP_TASKS)
    ap.add_argument("--cells", type=int, default=40)
    ap.add_argument("--episodes", type=int, default=2, help="consecutive episodes per cell")
    ap.add_argument("--seed-base", type=int, default=830_000)
    ap.add_argument("--fps", type=int, default=10, help="as the other training data")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--both-orders", action="store_true",
                    help="cells alternate over the task's instructions (place_in_order: red first, blue first)")
    ap.add_argument("--first-offset-cm", type=float, default=0.0,
                    help="the expert places the first cube up to this far off the pad centre on each axis, a "
                         "seeded draw per cell (the pad counts 4 cm), so the second cube's target moves with it")
    ap.add_argument("--keep-steps", type=step_numbers, default=None,
                    help="record only these steps (1-based, comma-separated): with --first-offset-cm, 2 keeps "
                         "the stacks on moved first cubes and drops first placements aimed at an unseen offset")
    a = ap.parse_args(argv)
    base = RecordConfig(task=a.task, episodes=a.episodes, fps=a.fps)
    cells = plan_subgoal_cells(base, a.cells, a.seed_base, a.both_orders, a.first_offset_cm / 100)
    print(json.dumps(record_subgoals(a.out, cells, a.workers, a.keep_steps)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
