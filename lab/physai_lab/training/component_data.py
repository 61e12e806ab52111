"""Frames for the pipeline components' text co-training and evaluation: scripted-expert
episodes with the sim's events on (intruder, injected drop / knock) and place_in_order, each
frame kept with the components' ground truth (component_questions.truth).

A cell runs consecutive episodes the way a pipeline robot lives them: physics at 480 Hz, the
expert (sim.multi_step.make_expert) at 60 Hz, a frame every 1/fps s of sim time (the same
Renderer and 224x224 views the sim robot publishes, letterboxed to the model's size as the server
does). An episode ends `after_end_s` after it is done or after its first failure (what a
monitor's "done" / "failed" leads to), or at the task's time limit; the next starts with the arm
where it is. The intruder's schedule runs on sim time across episodes, as on a live robot.

Frames are stored as one .npz (images uint8 [N, views, 3, S, S] and the per-frame strings), not
in the LeRobot layout: they carry no action targets (the action data stays what it was).
"""
from __future__ import annotations

import dataclasses
import json
import multiprocessing as mp
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Sequence

import numpy as np

from physai_ros.engine.processor.images import letterbox
from physai_ros.sim.events import EventConfig
from physai_ros.sim.multi_step import make_expert
from physai_ros.sim.render import Renderer
from physai_ros.sim.robot import ArmConfig
from physai_ros.sim.tasks import make_task
from physai_ros.sim.world import SimWorld

from physai_lab.training.component_questions import truth

TEXT_FIELDS = ("task", "prompt", "safety", "monitor", "failure", "planner")


@dataclass(frozen=True)
class ComponentCell:
    task: str = "pick_and_place"
    seed: int = 0
    episodes: int = 4
    prompt: str = ""  # the robot's instruction ("": the task's own; place_in_order: sets the order)
    intruder_rate_per_min: float = 6.0
    intruder_duration_s: float = 3.0
    drop_prob: float = 0.3
    knock_prob: float = 0.2
    fps: int = 10
    after_end_s: float = 1.5
    num_views: int = 2
    camera_size: int = 224
    image_size: int = 96  # the model's (letterboxed as serving does)
    control_hz: int = 60
    physics_hz: int = 480


def record_component_cell(cell: ComponentCell) -> Dict[str, np.ndarray]:
    """One seeded cell's frames: images, time (sim s), episode (within the cell), cell seed and
    the TEXT_FIELDS strings."""
    events = EventConfig(intruder_rate_per_min=cell.intruder_rate_per_min,
                         intruder_duration_s=cell.intruder_duration_s,
                         drop_prob=cell.drop_prob, knock_prob=cell.knock_prob)
    world = SimWorld(ArmConfig(num_joints=4), task=make_task(cell.task, cell.prompt), seed=cell.seed, events=events)
    renderer = Renderer(world.arm.cfg, num_views=cell.num_views, width=cell.camera_size,
                        height=cell.camera_size, object_size=world.scene.object_size,
                        goal_radius=world.scene.goal_radius)
    expert = make_expert(world)
    dt = 1.0 / cell.control_hz
    substeps = cell.physics_hz // cell.control_hz
    per_frame = cell.control_hz // cell.fps
    images: List[np.ndarray] = []
    cols: Dict[str, list] = {k: [] for k in TEXT_FIELDS + ("time", "episode")}
    for k in range(cell.episodes):
        if k:
            world.reset(keep_arm=True)
        ended_at, step = None, 0
        while True:
            snap = world.snapshot()
            if ended_at is None and snap.progress in ("done", "failed"):
                ended_at = snap.time
            if (ended_at is not None and snap.time - ended_at >= cell.after_end_s - 1e-9) or snap.done and not snap.success:
                break
            command = expert.act(snap, dt)
            if step % per_frame == 0:
                image, fields = component_frame(world, snap, renderer.render(snap), cell.image_size)
                images.append(image)
                for key, value in fields.items():
                    cols[key].append(value)
                cols["episode"].append(k)
            world.set_command(command)
            for _ in range(substeps):
                world.step(1.0 / cell.physics_hz)
            step += 1
    n = len(images)
    out = {k: np.array(v) for k, v in cols.items()}
    out["images"] = np.stack(images) if n else np.zeros((0, cell.num_views, 3, cell.image_size, cell.image_size), np.uint8)
    out["seed"] = np.full(n, cell.seed, np.int64)
    return out


def component_frame(world: SimWorld, snap, views, image_size: int):
    """One frame: the views letterboxed to the model's size as the server does ([views, 3, S, S]
    uint8) and its TEXT_FIELDS + time, the components' ground truth of snap."""
    image = np.stack([letterbox(v, image_size).transpose(2, 0, 1) for v in views])
    gt = truth(snap)
    return image, {"task": world.task.name, "prompt": world.task.prompt, "safety": gt["safety"],
                   "monitor": gt["monitor"], "failure": snap.failure, "planner": gt["planner"], "time": snap.time}


def plan_component_cells(tasks: Dict[str, int], episodes: Dict[str, int], seed_base: int,
                         base: ComponentCell = ComponentCell(), both_orders: bool = False) -> List[ComponentCell]:
    """tasks: {task: cells}; seeds seed_base + t * 10 000 + c (keep seed_base away from other
    recordings' and evaluation's seed blocks). both_orders: a task that reads its prompt runs
    cell c with its c-th instruction in turn (place_in_order: red first, blue first)."""
    out = []
    for t, (task, n) in enumerate(sorted(tasks.items())):
        variants = make_task(task).prompt_variants() if both_orders else ("",)
        for c in range(n):
            out.append(dataclasses.replace(base, task=task, seed=seed_base + t * 10_000 + c, episodes=episodes[task],
                                           prompt=variants[c % len(variants)]))
    return out


def record_components(path, cells: Sequence[ComponentCell], workers: int = 2, log=print) -> dict:
    """Record the cells (in `workers` processes) into one .npz; returns a summary (also stored
    beside it as <path>.json)."""
    t0 = time.perf_counter()
    if workers > 1:
        with mp.get_context("spawn").Pool(workers) as pool:
            parts = pool.map(record_component_cell, cells, chunksize=1)
    else:
        parts = [record_component_cell(c) for c in cells]
    frames = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, **frames)
    summary = {"frames": int(len(frames["images"])), "cells": len(cells), "seconds": round(time.perf_counter() - t0, 1),
               "cell_seeds": {t: [min(c.seed for c in cells if c.task == t), max(c.seed for c in cells if c.task == t) + 1]
                              for t in sorted({c.task for c in cells})},
               "events": {k: getattr(cells[0], k) for k in ("intruder_rate_per_min", "intruder_duration_s",
                                                            "drop_prob", "knock_prob", "after_end_s", "fps")},
               "counts": {f: label_counts(frames, f) for f in ("safety", "monitor", "failure", "planner", "prompt")}}
    Path(str(path) + ".json").write_text(json.dumps(summary, indent=1))
    log(f"recorded {summary['frames']} component frames of {len(cells)} cells in {summary['seconds']} s")
    return summary


def label_counts(frames: Dict[str, np.ndarray], field: str) -> Dict[str, int]:
    values, counts = np.unique(frames[field], return_counts=True)
    return {str(v): int(c) for v, c in zip(values, counts)}


def load_components(path) -> Dict[str, np.ndarray]:
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description="record component co-training / evaluation frames")
    ap.add_argument("--out", required=True, help=".npz path")
    ap.add_argument("--cells", default="pick_and_place=40,reach=20,place_in_order=30", help="task=cells,...")
    ap.add_argument("--episodes", default="pick_and_place=5,reach=5,place_in_order=3", help="task=episodes per cell,...")
    ap.add_argument("--seed-base", type=int, default=800_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--both-orders", action="store_true",
                    help="place_in_order cells alternate red first / blue first (the planner learns to read the order)")
    a = ap.parse_args(argv)

    def parse(s):
        return {k: int(v) for k, v in (x.split("=") for x in s.split(",") if x)}

    cells = plan_component_cells(parse(a.cells), parse(a.episodes), a.seed_base, both_orders=a.both_orders)
    print(json.dumps(record_components(a.out, cells, a.workers), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
