"""Record an expert dataset: many seeded cells per task, in worker processes, into one
LeRobot-layout directory (dataset.write_dataset)."""
from __future__ import annotations

import dataclasses
import multiprocessing as mp
import time
from pathlib import Path
from typing import Callable, List, Sequence

from physai_ros.sim.robot import ArmConfig

from physai_lab.training.dataset import EncodedEpisode, write_dataset
from physai_lab.training.expert_data import RecordConfig, record_cell


def _record(cfg: RecordConfig) -> List[EncodedEpisode]:
    return [EncodedEpisode.encode(ep) for ep in record_cell(cfg)]


def plan_cells(tasks: Sequence[str], cells_per_task: int, episodes_per_cell: int, seed: int,
               base: RecordConfig = RecordConfig()) -> List[RecordConfig]:
    """Seeds are distinct across tasks and cells, so no two cells replay the same placements."""
    out = []
    for t, task in enumerate(tasks):
        for c in range(cells_per_task):
            out.append(dataclasses.replace(base, task=task, episodes=episodes_per_cell,
                                           seed=seed * 1_000_003 + t * 100_000 + c))
    return out


def record_dataset(root, cells: Sequence[RecordConfig], workers: int = 2, log=print,
                   recorder: Callable[[RecordConfig], List[EncodedEpisode]] = _record) -> dict:
    """Run the cells (in `workers` processes when > 1) and write the dataset. Returns a summary.
    recorder turns one cell into its episodes (a module-level function: workers pickle it)."""
    t0 = time.perf_counter()
    if workers > 1:
        with mp.get_context("spawn").Pool(workers) as pool:
            per_cell = pool.map(recorder, cells, chunksize=1)
    else:
        per_cell = [recorder(c) for c in cells]
    episodes = [ep for eps in per_cell for ep in eps]
    joint_names = ArmConfig(num_joints=cells[0].num_joints).joint_names
    write_dataset(Path(root), episodes, fps=cells[0].fps, joint_names=joint_names)
    summary = {
        "episodes": len(episodes),
        "frames": sum(len(e) for e in episodes),
        "expert_success_rate": sum(e.success for e in episodes) / len(episodes),
        "by_task": {t: sum(1 for e in episodes if e.task == t) for t in sorted({e.task for e in episodes})},
        "prompts": sorted({e.prompt for e in episodes}),
        "seconds": round(time.perf_counter() - t0, 1),
    }
    log(f"recorded {summary['episodes']} episodes, {summary['frames']} frames in {summary['seconds']} s "
        f"(expert success {summary['expert_success_rate']:.3f})")
    return summary
