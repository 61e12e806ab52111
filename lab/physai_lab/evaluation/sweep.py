"""One evaluation setting = a task, a horizon policy (or the expert), a list of episode seeds.

Each setting builds its own serving core (fresh engine noise generator, fresh scheduler), so a
setting's result does not depend on which settings ran before it in the same process.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Sequence

from physai_ros.config.fleet import FleetConfig
from physai_ros.config.robot import RobotConfig
from physai_ros.serving.startup.preflight import checkpoint_dir

from physai_lab.evaluation.lockstep import LockstepConfig, SimClock, clone_robots, run_episodes, with_horizon
from physai_lab.evaluation.results import EpisodeResult
from physai_lab.evaluation.servers import ExpertServer, build_policy_server

# Evaluation episode seeds start here; training data uses small seeds (see the checkpoint's
# manifest.json and disjoint_from_training).
EVAL_SEED_BASE = 10_000_000


@dataclass(frozen=True)
class Setting:
    task: str                   # sim task: "reach" | "pick_and_place"
    policy: str                 # "static" | "confidence" | "expert" | "default" (fleet.yaml's own)
    params: tuple[float, ...] = ()
    robot: str = ""             # the fleet.yaml robot to clone; "" = the first running `task`

    @property
    def label(self) -> str:
        task = f"{self.task}@{self.robot}" if self.robot else self.task
        if self.policy == "default":
            return f"{task} fleet.yaml default"
        if self.policy == "expert":
            return f"{task} expert"
        p = ",".join(f"{x:g}" for x in self.params)
        return f"{task} {self.policy}({p})"

    @property
    def parameter(self) -> float:
        """The swept knob: H for static, t for confidence."""
        return float(self.params[0]) if self.params else float("nan")


def task_robot(cfg: FleetConfig, task: str, robot_id: str = "") -> RobotConfig:
    """The first robot in fleet.yaml that runs sim task `task` (its cameras, joints, fleet task),
    or the robot `robot_id`, which must run it."""
    for r in cfg.robots:
        if r.simulated and r.sim.get("task", "pick_and_place") == task and robot_id in ("", r.id):
            return r
    which = f"robot {robot_id!r}" if robot_id else "simulated robot"
    raise ValueError(f"no {which} in {cfg.source} runs sim task {task!r}")


def run_setting(cfg: FleetConfig, setting: Setting, seeds: Sequence[int], slots: int = 8,
                lockstep: LockstepConfig = LockstepConfig(), on_chunk=None) -> list[EpisodeResult]:
    base = task_robot(cfg, setting.task, setting.robot)
    if setting.policy in ("static", "confidence"):
        base = with_horizon(base, setting.policy, setting.params)
    elif setting.policy not in ("default", "expert"):
        raise ValueError(f"unknown policy {setting.policy!r}")
    robots = clone_robots(base, max(1, min(slots, len(seeds))))
    clock = SimClock()
    if setting.policy == "expert":
        by_id: dict = {}
        chunk = int(setting.params[0]) if setting.params else 8
        server = ExpertServer(lambda rid: by_id[rid].runtime.world, chunk_size=chunk,
                              horizon=int(setting.params[1]) if len(setting.params) > 1 else None)
        hook = lambda slots_: by_id.update({s.robot.id: s for s in slots_})  # noqa: E731
    else:
        server, hook = build_policy_server(cfg, clock), None
    return run_episodes(server, robots, seeds, lockstep, setting.label, clock=clock, slot_hook=hook,
                        on_chunk=on_chunk)


def eval_seeds(task: str, n: int, base: int = EVAL_SEED_BASE) -> list[int]:
    # Both tasks get their own block, so a seed never means two different episodes.
    offset = {"reach": 0, "pick_and_place": 1_000_000}.get(task, 2_000_000)
    return [base + offset + k for k in range(n)]


def training_manifest(cfg: FleetConfig) -> dict | None:
    """manifest.json next to a checkpoint model (None for a preset or a checkpoint without one)."""
    ckpt = checkpoint_dir(cfg)
    if ckpt is None:
        return None
    path = ckpt / "manifest.json"
    return json.loads(path.read_text()) if path.is_file() else None


def training_seeds(manifest: dict | None) -> set[int]:
    """Every seed the manifest names: ints and int lists under a key path containing "seed",
    and [lo, hi) pairs when the path also says "range" (e.g. training_cell_seeds.reach.range).
    Over-inclusive on purpose (an RNG seed counts too): a false overlap only stops the bench."""
    found: set[int] = set()

    def walk(node, key: str = "") -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, f"{key}.{k}")
        elif isinstance(node, list):
            if "seed" in key.lower() and all(isinstance(x, int) for x in node):
                if "range" in key.lower() and len(node) == 2:
                    found.update(range(node[0], node[1]))
                else:
                    found.update(node)
            else:
                for v in node:
                    walk(v, key)
        elif isinstance(node, int) and "seed" in key.lower():
            found.add(node)

    walk(manifest or {})
    return found


def disjoint_from_training(seeds: Sequence[int], manifest: dict | None) -> list[int]:
    """The evaluation seeds that training also used (should be empty)."""
    used = training_seeds(manifest)
    return sorted(set(seeds) & used)


def scale_setting(cfg: FleetConfig, **server_model) -> FleetConfig:
    """cfg with server.model fields replaced (e.g. a different checkpoint)."""
    model = dataclasses.replace(cfg.server.model, **server_model)
    return dataclasses.replace(cfg, server=dataclasses.replace(cfg.server, model=model))


def with_chunked_task_fields(cfg: FleetConfig, **fields) -> FleetConfig:
    """cfg with the given TaskConfig fields replaced in every chunked task, in cfg.tasks and in
    each robot's copy of its task."""
    tasks = {n: dataclasses.replace(t, **fields) if t.mode == "chunked" else t for n, t in cfg.tasks.items()}
    robots = tuple(dataclasses.replace(r, task=tasks[r.task.name]) for r in cfg.robots)
    return dataclasses.replace(cfg, tasks=tasks, robots=robots)


def with_noise_scale(cfg: FleetConfig, scale: float) -> FleetConfig:
    """cfg with every chunked task sampled from scale * N(0, I) (fleet.yaml `noise_scale`)."""
    return with_chunked_task_fields(cfg, noise_scale=float(scale))


def with_horizon_policy(cfg: FleetConfig, spec: str) -> FleetConfig:
    """cfg with every chunked task's horizon policy replaced; spec is "name" or "name:p1,p2"
    (`static:3`, `confidence:0.1,6`), checked as fleet.yaml's `horizon_policy` is."""
    from physai_ros.config.task import parse_horizon_policy

    name, _, params = spec.partition(":")
    values = [float(x) for x in params.split(",") if x.strip()]
    hp, hparams = parse_horizon_policy({"name": name, "params": values}, "--horizon")
    return with_chunked_task_fields(cfg, horizon_policy=hp, horizon_params=hparams)


def fleet_for(fleet_file, checkpoint=None, preset=None) -> FleetConfig:
    """The benchmarks' fleet: fleet_file (None: the embedded one) with its model replaced by a
    checkpoint directory or a preset when one is given."""
    from pathlib import Path

    from physai_ros.config.fleet import load_fleet

    cfg = load_fleet(fleet_file)
    if checkpoint:
        cfg = scale_setting(cfg, checkpoint=str(Path(checkpoint).resolve()), preset=None)
    elif preset:
        cfg = scale_setting(cfg, checkpoint=None, preset=preset)
    return cfg
