"""Retrain the embedded sim policy from scratch: record expert data, train, write the checkpoint.

    .venv/bin/python scripts/train_policy.py --out physai_ros/assets/policy/sim_pi0

See docs/training.md for the data layout, model size, objective and measured time.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def fleet_prompts(fleet_yaml: Path) -> dict:
    """{sim task: [prompts fleet.yaml's tasks use for robots running it]}: what robots will send."""
    import yaml

    doc = yaml.safe_load(fleet_yaml.read_text())
    out: dict = {}
    for robot in doc.get("robots", []):
        sim_task = (robot.get("sim") or {}).get("task")
        prompt = (doc.get("tasks", {}).get(robot.get("task")) or {}).get("prompt")
        if sim_task and prompt and prompt not in out.setdefault(sim_task, []):
            out[sim_task].append(prompt)
    return out


def interface(a, tc, cells, prompts) -> dict:
    """What a client of the checkpoint must match (bench/policy_eval.py reads it)."""
    seeds: dict = {}
    for c in cells:
        lo, hi = seeds.get(c.task, (c.seed, c.seed + 1))
        seeds[c.task] = (min(lo, c.seed), max(hi, c.seed + 1))
    return {
        "training_cell_seeds": {t: {"range": list(r), "episodes_per_seed": a.episodes_per_cell,
                                    "note": "SimWorld(seed) then reset(keep_arm=True) between episodes"}
                                for t, r in seeds.items()},
        "prompts": prompts,
        "num_views": cells[0].num_views, "camera_resolution": [cells[0].image_height, cells[0].image_width],
        "model_image_size": tc.size.image_size, "action_rate_hz": tc.action_rate_hz,
        "chunk_size": tc.size.chunk_size, "state": "joint positions then gripper opening (5)",
        "wrench_input": False, "single_view_training_share": tc.single_view_prob,
    }


def publish(tmp: Path, out: Path) -> None:
    """Swap a freshly written checkpoint into place (readers never see a half-written one)."""
    old = out.with_name(out.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if out.exists():
        out.rename(old)
    tmp.rename(out)
    shutil.rmtree(old, ignore_errors=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(REPO / "physai_ros/assets/policy/sim_pi0"))
    ap.add_argument("--data", default=str(REPO / "out/sim_expert_data"), help="dataset directory (LeRobot layout)")
    ap.add_argument("--reuse-data", action="store_true", help="train on an existing --data instead of recording")
    ap.add_argument("--cells-per-task", type=int, default=100)
    ap.add_argument("--episodes-per-cell", type=int, default=5)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--fps", type=int, default=10, help="recorded frame rate (a multiple of the 10 Hz action rate)")
    ap.add_argument("--steps", type=int, default=100000, help="upper bound; --minutes usually ends the run")
    ap.add_argument("--minutes", type=float, default=40.0, help="training time budget (0: run all --steps)")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--snapshot-minutes", type=float, default=0.0,
                    help="> 0: also publish the checkpoint so far every this many minutes")
    ap.add_argument("--fleet", default=str(REPO / "config/fleet.yaml"), help="prompts robots will send")
    ap.add_argument("--tokenizer", default=str(REPO / "physai_ros/assets/tokenizer.json"))
    ap.add_argument("--eval-episodes", type=int, default=4, help="in-process closed-loop check per task")
    ap.add_argument("--init", default="", help="start from this checkpoint's weights (continue training) "
                    "instead of the seeded random init")
    ap.add_argument("--status-file", default="", help="append a line here whenever the checkpoint changes")
    a = ap.parse_args(argv)

    import torch

    from physai_ros.serving.tokenizer import PromptTokenizer
    from physai_ros.training.checkpoint import git_commit, save_policy
    from physai_ros.training.dataset import load_dataset, read_info
    from physai_ros.training.expert_data import RecordConfig
    from physai_ros.training.record import plan_cells, record_dataset
    from physai_ros.training.train import TrainConfig, summarise_curve, train

    torch.set_num_threads(2)
    t_start = time.perf_counter()
    data_dir, out = Path(a.data), Path(a.out)
    record_summary = None
    cells = plan_cells(("pick_and_place", "reach"), a.cells_per_task, a.episodes_per_cell, a.seed,
                       base=RecordConfig(fps=a.fps))
    if not a.reuse_data:
        shutil.rmtree(data_dir, ignore_errors=True)
        record_summary = record_dataset(data_dir, cells, workers=a.workers)
    info = read_info(data_dir)
    tc = TrainConfig(steps=a.steps, batch_size=a.batch_size, seed=a.seed, max_minutes=a.minutes)
    t0 = time.perf_counter()
    data = load_dataset(data_dir, tc.size.image_size)
    print(f"loaded {len(data)} frames of {data.episodes_used} episodes ({data.episodes_skipped} unsuccessful "
          f"skipped) in {time.perf_counter() - t0:.0f} s", flush=True)
    tokenizer = PromptTokenizer(a.tokenizer, tc.size.max_tokens)
    prompts = fleet_prompts(Path(a.fleet))
    views = sorted(k for k, f in info["features"].items() if f["dtype"] == "image")
    joint_names = info["features"]["observation.state"]["names"]
    data_info = {"frames": len(data), "episodes": data.episodes_used, "fps": data.fps}
    command = " ".join([Path(sys.executable).name, *sys.argv]) if argv is None else "train_policy.main(...)"

    def write(res, final: bool) -> None:
        manifest = {
            "policy": "pi0 (physai_ros engine), trained from scratch on scripted-expert demonstrations",
            "final": final,
            "command": command,
            "git_commit": git_commit(REPO),
            "seed": a.seed,
            "steps": res.steps,
            "training_seconds": round(res.seconds, 1),
            "total_seconds": round(time.perf_counter() - t_start, 1),
            "torch_threads": torch.get_num_threads(),
            "data": {"path": str(data_dir), "format": "LeRobot dataset v2.1 (parquet + PNG)", "recording": record_summary, **data_info,
                     "cells_per_task": a.cells_per_task, "episodes_per_cell": a.episodes_per_cell},
            "prompts": res.prompts,
            "interface": interface(a, tc, cells, prompts),
            "model": dataclasses.asdict(tc.size),
            "train": {k: v for k, v in dataclasses.asdict(tc).items() if k != "size"},
            "continued_from": continued_from if a.init else None,
            "objective": "flow matching: x_t = t noise + (1-t) a, target noise - a, t ~ Beta(1.5,1)*0.999+0.001",
            "loss": summarise_curve(res.loss_curve),
        }
        tmp = out.with_name(out.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        save_policy(tmp, res.config, res.weights, res.state_stats, res.action_stats, joint_names, views,
                    tc.size.image_size, manifest)
        publish(tmp, out)
        line = (f"{time.strftime('%H:%M:%S', time.gmtime())} UTC {'final' if final else 'snapshot'} checkpoint "
                f"at {out}: step {res.steps}, loss {manifest['loss'].get('last', float('nan')):.4f}")
        print(line, flush=True)
        if a.status_file:
            with open(a.status_file, "a") as f:
                f.write(line + "\n")

    model = None
    if a.init:
        from physai_ros.training.checkpoint import weights_from_safetensors_dir
        from physai_ros.training.policy_model import TrainablePi0

        model = TrainablePi0(tc.size.config(), weights=weights_from_safetensors_dir(a.init))
        prior = json.loads((Path(a.init) / "manifest.json").read_text())
        continued_from = {k: prior.get(k) for k in ("command", "steps", "training_seconds", "loss", "seed")}
    res = train(data, tc, tokenizer, prompts, log=lambda m: print(m, flush=True), model=model,
                snapshot=(lambda r: write(r, False)) if a.snapshot_minutes > 0 else None,
                snapshot_every_s=a.snapshot_minutes * 60)
    del data
    write(res, True)
    if a.eval_episodes > 0:
        from physai_ros.training.closed_loop import evaluate_checkpoint

        report = evaluate_checkpoint(out, episodes=a.eval_episodes, fleet_prompts=prompts, seed=10_000 + a.seed)
        print(json.dumps(report, indent=2), flush=True)
        m = json.loads((out / "manifest.json").read_text())
        m["closed_loop_check"] = report
        (out / "manifest.json").write_text(json.dumps(m, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
