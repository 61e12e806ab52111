#!/usr/bin/env python3
"""Closed-loop evaluation of the fleet's policy: success rate vs the scripted expert,
and the Kairos Figure 11 trade-off (success rate vs average execution horizon, static H sweep vs
confidence-threshold t sweep).

    .venv/bin/python bench/policy_eval.py --json out/policy_eval.json [--fleet FILE] [--checkpoint DIR]
        [--episodes 50] [--preset tiny] [--tasks pick_and_place,reach] [--tradeoff-task pick_and_place]
        [--static 1,2,4,7,10] [--thresholds 0,0.05,0.1,0.2,0.5] [--h-min 1] [--slots 8]
        [--latency-ms 50] [--jobs 2] [--deadline-min M] [--plot docs/images/policy_tradeoff.png]
        [--robot pick_and_place=robot_2] [--quick]

Every episode runs through the real serving path (physai_ros.serving.serving_core.ServingCore built by
serving.startup.engine_builder from fleet.yaml: engine, tokenizer, normalisation, horizon policy, scheduler;
the robot client and trajectory buffer logic; the sim world and renderer) in simulated lockstep
time (physai_lab.evaluation.lockstep). Seeds are disjoint from the training seeds listed in the
checkpoint's manifest (checked). --json PATH writes the results file (the benchmark suite's
"policy" entry), rewritten after every setting so an interrupted run keeps its finished settings;
--quick is the suite's smoke size (the tiny random preset, 1 s episodes: figures meaningless).
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

from physai_bench import results
from physai_lab.evaluation.lockstep import LockstepConfig
from physai_lab.evaluation.results import dominance, mcnemar_exact, summarize
from physai_lab.evaluation.sweep import (Setting, disjoint_from_training, eval_seeds, run_setting,
                                         fleet_for, task_robot, training_manifest)


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", default=None, help="write the results file here (after every setting too)")
    ap.add_argument("--quick", action="store_true",
                    help="smoke size: tiny random preset, 2 episodes, 1 s episodes, two sweep points")
    ap.add_argument("--fleet", default=None, help="fleet.yaml (default: the embedded config/fleet.yaml)")
    ap.add_argument("--checkpoint", default=None, help="override server.model with this checkpoint directory")
    ap.add_argument("--preset", default=None, help="override server.model with a preset (e.g. tiny: smoke runs)")
    ap.add_argument("--episodes", type=int, default=50, help="episodes per setting (default 50)")
    ap.add_argument("--tasks", default="pick_and_place,reach",
                    help="sim tasks for the success rate vs the expert (comma list)")
    ap.add_argument("--tradeoff-task", default="pick_and_place", help="sim task of the trade-off sweep ('' skips it)")
    ap.add_argument("--static", default="1,2,4,7,10", help="static horizons H to sweep")
    ap.add_argument("--thresholds", default="0,0.05,0.1,0.2,0.5", help="confidence thresholds t to sweep")
    ap.add_argument("--h-min", type=int, default=None,
                    help="H_min of the confidence policy (default: the smallest swept static H, as Kairos)")
    ap.add_argument("--slots", type=int, default=8, help="robots evaluated concurrently per setting (batched)")
    ap.add_argument("--latency-ms", type=float, default=50.0, help="modeled observation->chunk latency")
    ap.add_argument("--max-episode-s", type=float, default=None, help="cut episodes short (smoke runs)")
    ap.add_argument("--robot", action="append", default=[], metavar="TASK=ROBOT_ID",
                    help="evaluate TASK as this fleet.yaml robot runs it (its cameras, its task's horizon "
                         "policy); default: the first robot running TASK")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="settings run in parallel")
    ap.add_argument("--plot", default="docs/images/policy_tradeoff.png", help="PNG path ('' for none)")
    ap.add_argument("--deadline-min", type=float, default=None,
                    help="start no new setting after this many minutes (the JSON lists what is missing)")
    args = ap.parse_args(argv)
    if args.quick:
        args.preset, args.episodes, args.slots, args.max_episode_s = "tiny", 2, 2, 1.0
        args.static, args.thresholds, args.plot = "1,8", "0.5", ""
    if args.episodes < 1 or args.slots < 1 or args.jobs < 1:
        ap.error("--episodes, --slots and --jobs must be >= 1")
    args.robot_of = {}
    for item in args.robot:
        task, sep, rid = item.partition("=")
        if not sep or not task or not rid:
            ap.error(f"--robot expects TASK=ROBOT_ID, got {item!r}")
        args.robot_of[task] = rid
    return args


def _load(args):
    return fleet_for(args.fleet, args.checkpoint, args.preset)


def _run(job):
    args, setting, seeds = job
    import torch

    torch.set_num_threads(1)  # one core per job; --jobs spreads settings over cores
    cfg = _load(args)
    t0 = time.perf_counter()
    lock = LockstepConfig(latency_s=args.latency_ms / 1e3, max_episode_s=args.max_episode_s)
    res = run_setting(cfg, setting, seeds, slots=args.slots, lockstep=lock)
    return setting, res, time.perf_counter() - t0


def _chunk_size(cfg) -> int:
    if cfg.server.model.preset is not None:
        from physai_ros.engine.types import Pi0Config

        return Pi0Config.preset(cfg.server.model.preset).chunk_size
    from physai_ros.engine.checkpoint.loader import read_lerobot_config
    from physai_ros.serving.startup.preflight import checkpoint_dir

    return int(read_lerobot_config(checkpoint_dir(cfg)).get("chunk_size", 50))


def _sweep_order(static: list[int], conf: list[float]) -> list[tuple[str, float]]:
    """Interleave the sweeps from the long horizons (cheap: few rounds) to H=1 (one inference
    per action), so an interrupted run still has points along both curves."""
    a = [("static", h) for h in sorted(static, reverse=True)]
    b = [("confidence", t) for t in sorted(conf, reverse=True)]
    out = []
    for k in range(max(len(a), len(b))):
        out += a[k:k + 1] + b[k:k + 1]
    return out


def main(argv=None) -> int:
    args = parse_args(argv)
    t_start = time.perf_counter()
    cfg = _load(args)
    chunk = _chunk_size(cfg)
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    static = [int(h) for h in _floats(args.static) if 1 <= h <= chunk]
    thresholds = _floats(args.thresholds)
    h_min = args.h_min or (min(static) if static else 1)
    tt = args.tradeoff_task.strip()
    manifest = training_manifest(cfg)

    # Each task's fleet.yaml horizon policy is "the policy"; when it equals a sweep point the
    # episodes are shared (same seeds, same setting).
    default_of, expert_of, order = {}, {}, []
    for task in tasks:
        rid = args.robot_of.get(task, "")
        try:
            r = task_robot(cfg, task, rid)
        except ValueError as e:
            print(f"policy_eval: {e}", file=sys.stderr)
            return 2
        default_of[task] = Setting(task, r.task.horizon_policy, tuple(r.task.horizon_params), rid)
        expert_of[task] = Setting(task, "expert", (chunk,), rid)
        order += [default_of[task], expert_of[task]]
    sweep = {}
    if tt:
        rid = args.robot_of.get(tt, "")
        task_robot(cfg, tt, rid)
        for pol, x in _sweep_order(static, thresholds):
            sweep[(pol, x)] = Setting(tt, pol, (x,) if pol == "static" else (x, h_min), rid)
            order.append(sweep[(pol, x)])
    # The trade-off task's settings first, other tasks' last (a task the policy fails runs every
    # episode to its timeout: the most expensive settings, and the least informative).
    order = sorted(dict.fromkeys(order), key=lambda s: s.task != tt) if tt else list(dict.fromkeys(order))
    seeds_of = {s: eval_seeds(s.task, args.episodes) for s in order}
    all_seeds = sorted({x for v in seeds_of.values() for x in v})
    overlap = disjoint_from_training(all_seeds, manifest)
    if overlap:
        print(f"policy_eval: evaluation seeds overlap the training seeds: {overlap[:10]}", file=sys.stderr)
        return 2

    model = cfg.server.model
    run = results.start_run(
        f"Closed-loop success of the fleet's policy "
        f"({model.preset + ' preset, random weights' if model.preset else model.checkpoint}) "
        f"through the real serving path (ServingCore, robot client logic, trajectory buffer, simulated robot) in "
        f"lockstep simulated time, no DDS, {args.latency_ms:g} ms modelled round trip, {args.episodes} episodes per "
        f"setting on seeds disjoint from training; tasks {','.join(tasks)} against the privileged scripted expert "
        f"on the same seeds; Kairos Figure 11 sweep (static H {args.static} vs confidence t {args.thresholds}) on "
        f"{tt or 'no task'}", __file__, argv, quick=args.quick)
    ctx = dict(args=args, cfg=cfg, chunk=chunk, tasks=tasks, tt=tt, h_min=h_min, manifest=manifest,
               default_of=default_of, expert_of=expert_of, sweep=sweep, order=order, t_start=t_start)
    done: dict = {}
    deadline = t_start + args.deadline_min * 60 if args.deadline_min else None
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = {pool.submit(_run, (args, s, seeds_of[s])): s for s in order}
        for fut in as_completed(futures):
            if fut.cancelled():
                continue
            setting, res, wall = fut.result()
            done[setting] = (res, wall)
            p = summarize(setting.policy, setting.parameter, res)
            print(f"policy_eval: {setting.label}: success {p.successes}/{p.episodes}, avg horizon "
                  f"{p.avg_horizon:.2f}, {wall:.0f} s", file=sys.stderr, flush=True)
            if args.json:  # partial results survive an interrupted run
                results.write_result(args.json, run, build_doc(ctx, done))
            if deadline is not None and time.perf_counter() > deadline:
                n = sum(f.cancel() for f in futures)
                if n:
                    print(f"policy_eval: --deadline-min passed: {n} settings not started", file=sys.stderr)
    doc = build_doc(ctx, done)
    if args.plot and doc["tradeoff"]:
        doc["plot"] = plot(doc, args.plot)
    results.write_result(args.json, run, doc)
    dom = doc["dominance"]
    print(f"success rate {doc['success_rate']} (expert {doc['expert_success_rate']}) over "
          f"{args.episodes} episodes per task; confidence dominates: "
          f"{dom['confidence_dominates'] if dom else '-'}")
    return 0


def _rate(eps) -> float | None:
    return round(sum(e.success for e in eps) / len(eps), 4) if eps else None


def build_doc(ctx: dict, done: dict) -> dict:
    import numpy as np

    args, cfg, tasks, tt = ctx["args"], ctx["cfg"], ctx["tasks"], ctx["tt"]
    per_task, main_eps, exp_eps = {}, [], []
    for task in tasks:
        d, e = ctx["default_of"][task], ctx["expert_of"][task]
        r = task_robot(cfg, task, args.robot_of.get(task, ""))
        entry = {"robot": r.id, "views": r.num_views, "fleet_task": r.task.name, "prompt": r.task.prompt, "horizon_policy": r.task.horizon_policy,
                 "horizon_params": list(r.task.horizon_params), "policy": None, "expert": None}
        if d in done:
            entry["policy"] = summarize(d.policy, d.parameter, done[d][0]).as_dict()
            main_eps += done[d][0]
        if e in done:
            entry["expert"] = summarize("expert", ctx["chunk"], done[e][0]).as_dict()
            exp_eps += done[e][0]
        if d in done and e in done:  # the same seeds in the same order: a paired test
            entry["policy_vs_expert"] = mcnemar_exact([x.success for x in done[d][0]], [x.success for x in done[e][0]])
        per_task[task] = entry
    tradeoff, dom = [], None
    if tt:
        st = [summarize("static", s.parameter, done[s][0]) for (pol, _), s in sorted(ctx["sweep"].items())
              if pol == "static" and s in done]
        cf = [summarize("confidence", s.parameter, done[s][0]) for (pol, _), s in sorted(ctx["sweep"].items())
              if pol == "confidence" and s in done]
        tradeoff = [{**p.as_dict(), "task": tt} for p in st + cf]
        dom = dominance(st, cf) if st and cf else None
    model, manifest = cfg.server.model, ctx["manifest"]
    return {
        "success_rate": _rate(main_eps),
        "expert_success_rate": _rate(exp_eps),
        "episodes": args.episodes,
        "episodes_total": sum(len(r) for r, _ in done.values()),
        "tasks": per_task,
        "tradeoff_task": tt or None,
        "tradeoff": tradeoff,
        "dominance": dom,
        "confidence_h_min": ctx["h_min"],
        "missing_settings": [s.label for s in ctx["order"] if s not in done],
        "model": {"checkpoint": model.checkpoint, "preset": model.preset, "chunk_size": ctx["chunk"],
                  "manifest": {k: manifest[k] for k in ("command", "seed", "steps", "git_commit", "final")
                               if manifest and k in manifest}},
        "method": {"lockstep": True, "latency_ms": args.latency_ms, "slots": args.slots, "physics_rate_hz": 480,
                   "seeds": {t: [eval_seeds(t, 1)[0], eval_seeds(t, args.episodes)[-1]]
                             for t in set(tasks) | ({tt} if tt else set())},
                   "max_episode_s": args.max_episode_s},
        "underruns_per_episode": round(float(np.mean([e.underruns for e in main_eps])), 2) if main_eps else None,
        "setting_wall_s": {s.label: round(w, 1) for s, (_, w) in done.items()},
        "host": {"python": platform.python_version(), "jobs": args.jobs},
    }


def plot(doc: dict, path: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.4), dpi=150)
    style = {"static": ("#8a8a8a", "o", "static horizon H"), "confidence": ("#f28e2b", "s", "confidence threshold t")}
    for pol, (color, marker, label) in style.items():
        pts = sorted((p for p in doc["tradeoff"] if p["policy"] == pol), key=lambda p: p["avg_horizon"])
        if not pts:
            continue
        x = [p["avg_horizon"] for p in pts]
        y = [p["success_rate"] for p in pts]
        lo = [p["success_rate"] - p["success_ci95"][0] for p in pts]
        hi = [p["success_ci95"][1] - p["success_rate"] for p in pts]
        ax.errorbar(x, y, yerr=[lo, hi], color=color, marker=marker, linestyle="-", capsize=3, label=label,
                    alpha=0.9)
        for p in pts:
            tag = f"H={p['parameter']:g}" if pol == "static" else f"t={p['parameter']:g}"
            ax.annotate(tag, (p["avg_horizon"], p["success_rate"]), textcoords="offset points",
                        xytext=(4, 6 if pol == "confidence" else -12), fontsize=7, color=color)
    task = doc["tradeoff_task"]
    exp = doc["tasks"].get(task, {}).get("expert")
    if exp:
        ax.axhline(exp["success_rate"], color="#4e79a7", linestyle="--", linewidth=1,
                   label=f"scripted expert ({exp['success_rate']:.2f})")
    ax.set_xlabel("average execution horizon (actions per round)")
    ax.set_ylabel("success rate")
    ax.set_ylim(-0.03, 1.05)
    ax.set_title(f"{task}: accuracy vs efficiency ({doc['episodes']} episodes/point, 95% CI)", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


if __name__ == "__main__":
    sys.exit(main())
