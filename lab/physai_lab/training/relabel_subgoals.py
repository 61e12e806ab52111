"""Give recorded multi-step data the planner's current wording, without recording it again.

The subgoal recordings (subgoal_data, subgoal_rollouts) and the component frames (component_data)
carry the planner's answer as text: the step episodes' prompts and the frames' `planner` column.
Where sim.multi_step's wording changes (a later cube now goes "on the red cube", not "on the green
pad") the frames, actions and step names stay true, only those strings are stale. Re-recording a
policy-driven round would not reproduce it: its driver reads the subgoal as its prompt. So the
strings are rewritten from each row's own step and order:

    .venv/bin/python -m physai_lab.training.relabel_subgoals --dataset out/sim_subgoal_data out/sim_subgoal_data_v2
    .venv/bin/python -m physai_lab.training.relabel_subgoals --components out/components/train.npz out/components/train_v2.npz
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
from collections import Counter
from pathlib import Path
from typing import Dict, Tuple

import numpy as np

from physai_ros.sim.multi_step import pick_and_place_instruction, step_instruction
from physai_ros.sim.tasks import make_task

_STEP = re.compile(r"^(?P<task>[a-z_]+)\.step(?P<step>\d+)\.(?P<colour>[a-z]+)$")


def step_prompt(sim_task: str) -> str | None:
    """The current subgoal for a step episode's name ("place_in_order.step2.blue" -> "pick up the
    blue cube and place it on the red cube"); None for a name that is not a step."""
    m = _STEP.match(sim_task)
    if not m:
        return None
    task, idx, cube = m["task"], int(m["step"]) - 1, f"{m['colour']} cube"
    for prompt in make_task(task).prompt_variants():
        order = make_task(task, prompt).object_names
        if idx < len(order) and order[idx] == cube:
            return step_instruction(order, idx)
    raise ValueError(f"{sim_task}: no order of {task} puts the {cube} at step {idx + 1}")


def relabel_dataset(src: Path, dst: Path) -> Dict[str, int]:
    """Copy a LeRobot v2.1 step dataset with each step episode's prompt (episodes.jsonl's
    `tasks`, tasks.jsonl, the frames' task_index) in the current wording. Returns prompt counts."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if dst.exists():
        raise FileExistsError(f"{dst} exists; relabelling writes a new dataset")
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.parquet"))
    episodes = [json.loads(line) for line in (src / "meta" / "episodes.jsonl").read_text().splitlines() if line]
    info = json.loads((src / "meta" / "info.json").read_text())
    tasks: Dict[str, int] = {}
    counts: Dict[str, int] = {}
    for ep in episodes:
        prompt = step_prompt(ep.get("sim_task", "")) or ep["tasks"][0]
        ep["tasks"] = [prompt]
        t_idx = tasks.setdefault(prompt, len(tasks))
        counts[prompt] = counts.get(prompt, 0) + 1
        rel = info["data_path"].format(episode_chunk=ep["episode_index"] // info["chunks_size"],
                                       episode_index=ep["episode_index"])
        table = pq.read_table(src / rel)
        col = table.schema.get_field_index("task_index")
        table = table.set_column(col, "task_index", pa.array(np.full(table.num_rows, t_idx, dtype=np.int64)))
        pq.write_table(table, dst / rel)
    (dst / "meta" / "episodes.jsonl").write_text("".join(json.dumps(ep) + "\n" for ep in episodes))
    (dst / "meta" / "tasks.jsonl").write_text(
        "".join(json.dumps({"task_index": i, "task": t}) + "\n" for t, i in tasks.items()))
    info["total_tasks"] = len(tasks)
    (dst / "meta" / "info.json").write_text(json.dumps(info, indent=2))
    return counts


def _wording(task: str, prompt: str) -> Dict[str, str]:
    """Old answer -> current answer for one task prompt (the order is in it)."""
    order = make_task(task, prompt or None).object_names
    if len(order) < 2:
        return {}
    return {pick_and_place_instruction(n): step_instruction(order, i) for i, n in enumerate(order)}


def relabel_components(src: Path, dst: Path) -> Tuple[int, int]:
    """Copy a component_data .npz with the planner's answers in the current wording. Returns
    (rows rewritten, rows)."""
    data = dict(np.load(src, allow_pickle=False))
    planner = data["planner"].astype(object)
    maps: Dict[Tuple[str, str], Dict[str, str]] = {}
    changed = 0
    for i, (task, prompt, answer) in enumerate(zip(data["task"], data["prompt"], planner)):
        wording = maps.setdefault((str(task), str(prompt)), _wording(str(task), str(prompt)))
        new = wording.get(str(answer), str(answer))
        changed += new != answer
        planner[i] = new
    data["planner"] = np.array(planner.tolist(), dtype=str)
    np.savez(dst, **data)
    sidecar = Path(f"{src}.json")  # component_data's record of how the frames were made
    if sidecar.exists():
        meta = json.loads(sidecar.read_text())
        meta.setdefault("counts", {})["planner"] = dict(Counter(data["planner"].tolist()))
        meta["relabelled"] = {"from": str(src), "planner_answers_rewritten": changed}
        Path(f"{dst}.json").write_text(json.dumps(meta, indent=1))
    return changed, len(planner)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    group = ap.add_mutually_exclusive_group(required=True)
    group.add_argument("--dataset", nargs=2, metavar=("SRC", "DST"), help="a step dataset's folder")
    group.add_argument("--components", nargs=2, metavar=("SRC", "DST"), help="a component_data .npz")
    args = ap.parse_args()
    if args.dataset:
        counts = relabel_dataset(Path(args.dataset[0]), Path(args.dataset[1]))
        print(json.dumps(counts, indent=1))
    else:
        changed, rows = relabel_components(Path(args.components[0]), Path(args.components[1]))
        print(f"{changed} of {rows} planner answers rewritten")


if __name__ == "__main__":
    main()
