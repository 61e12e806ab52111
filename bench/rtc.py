#!/usr/bin/env python3
"""Real-time chunking vs crossfade vs no merge (docs/rtc.md), closed loop with the trained sim
policy: how smoothly chunks join, task success, and what guidance costs per chunk.

    .venv/bin/python bench/rtc.py [--quick] [--fleet FILE] [--checkpoint DIR] [--episodes 20]
        [--tasks pick_and_place] [--merges off,crossfade,rtc] [--latency-ms 50,400] [--slots 8]
        [--crossfades 0.05,0.1,0.2] [--betas 1,5,10] [--compute-shares 1] [--schedule exp]
        [--execution-horizon N] [--jobs 1] [--cost-reps 10] [--json bench/results/rtc.json]

Episodes run through the real serving path in lock-step simulated time (physai_lab.evaluation:
ServingCore from fleet.yaml with the task's `chunk_merge` set per setting, the robot client,
the trajectory buffer with the merge rule the controller would use, the sim world), with the
observation -> chunk latency modelled as --latency-ms. Guidance costs compute: with
--compute-shares s (the share of that latency that is the model's own compute; 1 by default, the
worst case for RTC), a guided setting's latency is latency x (1 + s x (guided / unguided - 1)),
the ratio measured first on the same model (batch 1, process CPU time). Crossfade over
--crossfades and RTC over --betas, each at every latency. Same seeds for every merge rule
(policy_eval's evaluation seeds, checked disjoint from
the checkpoint's training seeds). Per setting: success rate, the boundary jump of every chunk
merge after an episode's first and the command jerk on the buffer grid (physai_lab.evaluation.
smoothness; arm joints, rad and rad/s^3), the guide statistics of the server. Separately, the
per-chunk CPU cost of guidance: Pi0Engine.infer with and without guides on the same inputs,
process CPU time, one torch thread, median of --cost-reps.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from physai_bench import results
from physai_ros.config.chunk_merge import ChunkMergeConfig
from physai_lab.evaluation.lockstep import LockstepConfig, SimClock, clone_robots, run_episodes
from physai_lab.evaluation.results import mcnemar_exact, wilson_interval
from physai_lab.evaluation.servers import build_policy_server
from physai_lab.evaluation.smoothness import SmoothnessRecorder, summary
from physai_lab.evaluation.sweep import (disjoint_from_training, eval_seeds, fleet_for, task_robot,
                                         training_manifest)


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", default=None, help="write the result document (with the results header) here")
    ap.add_argument("--quick", action="store_true",
                    help="the tiny preset, one episode of replace, crossfade and RTC at one latency, cost reps 1")
    ap.add_argument("--fleet", default=None)
    ap.add_argument("--checkpoint", default=None)
    ap.add_argument("--preset", default=None, help="a model preset instead (smoke runs)")
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--first-episode", type=int, default=0,
                    help="skip this many evaluation seeds (a second block of episodes)")
    ap.add_argument("--tasks", default="pick_and_place")
    ap.add_argument("--merges", default="off,crossfade,rtc,rtc_identity",
                    help="off | crossfade | rtc (VJP, the paper) | rtc_identity (J = I, LeRobot 0.6.1)")
    ap.add_argument("--latency-ms", default="50,400", help="modelled observation -> chunk latencies")
    ap.add_argument("--slots", type=int, default=8)
    ap.add_argument("--crossfades", default="0.05,0.1,0.2", help="crossfade durations (s) tried")
    ap.add_argument("--betas", default="1,5,10", help="rtc max_guidance_weight values tried")
    ap.add_argument("--compute-shares", default="1",
                    help="shares of --latency-ms that are model compute (each charged x the guided/unguided cost "
                         "ratio), comma-separated: every RTC setting runs at each")
    ap.add_argument("--schedule", default="exp")
    ap.add_argument("--execution-horizon", type=int, default=None)
    ap.add_argument("--max-episode-s", type=float, default=None)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--cost-reps", type=int, default=10, help="0 skips the compute-cost measurement")
    ap.add_argument("--cost-only", action="store_true", help="only the compute cost, no episodes")
    ap.add_argument("--cost-preset", default=None,
                    help="measure the cost on this preset (random weights, e.g. pi0_2layer) instead of the fleet's model")
    ap.add_argument("--cost-batches", default="1,4")
    ap.add_argument("--out", default=None, help="the same as --json (kept for older commands)")
    return ap.parse_args(argv)


def _load(args):
    return fleet_for(args.fleet, args.checkpoint, args.preset)


def merge_config(name: str, param: float | None, args) -> ChunkMergeConfig:
    """off | crossfade (param: seconds) | rtc (the paper's VJP) | rtc_identity (LeRobot 0.6.1's J = I),
    param: beta (max_guidance_weight)."""
    if name in ("rtc", "rtc_identity"):
        return ChunkMergeConfig(name="rtc", execution_horizon=args.execution_horizon,
                                max_guidance_weight=param, schedule=args.schedule,
                                jacobian="identity" if name == "rtc_identity" else "vjp")
    if name == "crossfade":
        return ChunkMergeConfig(name=name, crossfade_s=param)
    return ChunkMergeConfig(name=name)


def settings(args) -> list[tuple[str, float | None, float]]:
    """(merge, its parameter, compute share) for every merge asked, over --crossfades, and for RTC
    over --betas x --compute-shares (the share only matters where guidance costs compute)."""
    shares = [float(x) for x in args.compute_shares.split(",")]
    out = []
    for m in (m.strip() for m in args.merges.split(",") if m.strip()):
        if m in ("rtc", "rtc_identity"):
            out += [(m, float(b), sh) for b in args.betas.split(",") for sh in shares]
        elif m == "crossfade":
            out += [(m, float(v), 0.0) for v in args.crossfades.split(",")]
        else:
            out += [(m, None, 0.0)]
    return out


def charged_latency_ms(latency_ms: float, merge: str, cost: dict | None, share: float) -> float:
    """The modelled latency plus guidance's extra compute (the measured batch-1 cost ratio)."""
    if merge not in ("rtc", "rtc_identity") or not cost or share <= 0:
        return latency_ms
    ratio = cost["batch1"]["ratio_vjp" if merge == "rtc" else "ratio_identity"]
    return latency_ms * (1 + share * max(0.0, ratio - 1))


def run_one(job) -> dict:
    """One (task, latency, merge, parameter) setting in its own process."""
    args, task, latency_ms, merge, param, share, charged_ms = job
    import torch

    torch.set_num_threads(1)
    cfg = _load(args)
    base = task_robot(cfg, task)
    cm = merge_config(merge, param, args)
    fleet_task = dataclasses.replace(base.task, chunk_merge=cm)
    cfg = dataclasses.replace(cfg, tasks={**cfg.tasks, fleet_task.name: fleet_task})
    robots = clone_robots(dataclasses.replace(base, task=fleet_task), min(args.slots, args.episodes))
    clock = SimClock()
    server = build_policy_server(cfg, clock)
    recorders: dict[str, SmoothnessRecorder] = {}

    def hook(slots):
        for s in slots:
            rec = recorders[s.robot.id] = SmoothnessRecorder(s.robot.control_rate_hz)
            deliver = s.deliver

            def wrapped(chunk, now, s=s, rec=rec, deliver=deliver):
                snap = rec.before_merge(s.buffer)
                before = s.buffer.chunks_accepted
                deliver(chunk, now)
                rec.after_merge(snap, s.buffer, chunk.round_id, s.buffer.chunks_accepted > before)
            s.deliver = wrapped

    lock = LockstepConfig(latency_s=charged_ms / 1e3, max_episode_s=args.max_episode_s)
    t0 = time.perf_counter()
    res = run_episodes(server, robots, _seeds(task, args), lock, f"{task} {merge} {latency_ms:g}ms",
                       clock=clock, slot_hook=hook,
                       on_tick=lambda s, now: recorders[s.robot.id].tick(now, s.buffer.last_command),
                       on_episode=lambda r: recorders[r.robot_id].end_episode())
    wall = time.perf_counter() - t0
    ok = sum(r.success for r in res)
    by_seed = {r.seed: bool(r.success) for r in res}
    jumps = [j for r in recorders.values() for j in r.jumps]
    jerks = [j for r in recorders.values() for j in r.jerks]
    return {
        "task": task, "latency_ms": latency_ms, "charged_latency_ms": round(charged_ms, 1), "merge": merge,
        "param": param, "compute_share": share, "chunk_merge": dataclasses.asdict(cm),
        "success_by_seed": [by_seed[s] for s in _seeds(task, args)],
        "episodes": len(res), "successes": ok, "success_rate": round(ok / len(res), 4),
        "success_ci95": [round(x, 4) for x in wilson_interval(ok, len(res))],
        "boundary_jump_rad": summary(jumps), "command_jerk_rad_s3": summary(jerks),
        "mean_episode_s": round(sum(r.sim_time_s for r in res) / len(res), 3),
        "underruns_per_episode": round(sum(r.underruns for r in res) / len(res), 3),
        "rounds": sum(r.rounds for r in res),
        "guides": dict(server.rtc.stats), "wall_s": round(wall, 1),
    }


def _seeds(task: str, args) -> list[int]:
    return eval_seeds(task, args.first_episode + args.episodes)[args.first_episode:]


def compute_cost(args, reps: int) -> dict:
    """Median process CPU ms per Pi0Engine.infer call, with and without a guide per robot."""
    import torch

    from physai_ros.engine.rtc import RtcGuide
    from physai_ros.engine.types import EngineInput

    torch.set_num_threads(1)
    cfg = _load(args)
    gen = torch.Generator().manual_seed(0)
    views = task_robot(cfg, args.tasks.split(",")[0]).num_views
    if args.cost_preset:
        from physai_ros.engine import Pi0Config, Pi0Engine

        engine = Pi0Engine(Pi0Config.preset(args.cost_preset))
        c = engine.config
        tokens = torch.randint(0, c.vocab_size, (48,), generator=gen).numpy()
        mask = np.ones(48, dtype=bool)
    else:
        core = build_policy_server(cfg, SimClock())
        engine = core.engines["engine_0"].engine
        c = engine.config
        enc = core.action_runner.tokenizer.encode(cfg.robots[0].task.prompt)
        tokens, mask = enc.tokens, enc.mask
    s = c.vision.image_size
    prev = torch.randn(c.chunk_size, c.max_action_dim, generator=gen)
    delay = min(2, c.chunk_size)
    beta = max(float(b) for b in args.betas.split(","))  # the weight scales the guide, not its cost
    out = {}
    for b in (int(x) for x in args.cost_batches.split(",")):
        batch = [EngineInput(images=torch.randint(0, 256, (views, 3, s, s), dtype=torch.uint8, generator=gen),
                             image_masks=torch.ones(views, dtype=torch.bool), tokens=torch.from_numpy(tokens),
                             token_mask=torch.from_numpy(mask), state=torch.randn(c.max_state_dim, generator=gen),
                             noise=torch.randn(c.chunk_size, c.max_action_dim, generator=gen)) for _ in range(b)]
        row = {}
        for label, jac in (("unguided", None), ("guided_vjp", "vjp"), ("guided_identity", "identity")):
            inputs = batch if jac is None else [dataclasses.replace(
                x, rtc=RtcGuide(prev, delay, c.chunk_size, args.schedule, beta, 5, jac)) for x in batch]
            with torch.inference_mode():
                engine.infer(inputs)  # warm
                cpu, den = [], []
                for _ in range(reps):
                    t0 = time.process_time()
                    o = engine.infer(inputs)
                    cpu.append((time.process_time() - t0) * 1e3)
                    den.append(o[0].timings_ms["denoise_ms"])
            row[label] = {"cpu_ms": round(sorted(cpu)[len(cpu) // 2], 2),
                          "denoise_wall_ms": round(sorted(den)[len(den) // 2], 2)}
        for jac in ("vjp", "identity"):
            row[f"guidance_cpu_ms_{jac}"] = round(row[f"guided_{jac}"]["cpu_ms"] - row["unguided"]["cpu_ms"], 2)
            row[f"ratio_{jac}"] = round(row[f"guided_{jac}"]["cpu_ms"] / row["unguided"]["cpu_ms"], 2)
        out[f"batch{b}"] = row
    out["model"] = {"preset": args.cost_preset, "chunk_size": c.chunk_size, "num_steps": c.num_steps,
                    "expert_width": c.expert.width,
                    "expert_depth": c.expert.depth, "views": views, "fast": engine.fast, "backend": engine.backend}
    return out


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.quick:
        args.preset, args.episodes, args.slots, args.latency_ms = args.preset or "tiny", 1, 1, "100"
        args.merges, args.crossfades, args.betas, args.cost_reps, args.cost_batches = "off,crossfade,rtc", "0.05", "5", 1, "1"
    cfg = _load(args)
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    latencies = [float(x) for x in args.latency_ms.split(",") if x.strip()]
    overlap = disjoint_from_training(sorted({s for t in tasks for s in _seeds(t, args)}),
                                     training_manifest(cfg))
    if overlap:
        print(f"rtc bench: evaluation seeds overlap the training seeds: {overlap[:10]}", file=sys.stderr)
        return 2
    model = cfg.server.model.checkpoint or f"preset {cfg.server.model.preset}"
    run = results.start_run(f"closed loop in lock-step simulated time, {model}, "
                            f"{args.episodes} episodes per setting on the same seeds, guidance compute charged "
                            f"(shares {args.compute_shares}); guidance cost measured on this CPU, one torch thread",
                            __file__, argv, quick=args.quick)
    cost = compute_cost(args, args.cost_reps) if args.cost_reps > 0 else None
    jobs = [] if args.cost_only else [
        (args, t, lat, m, p, sh, charged_latency_ms(lat, m, cost, sh))
        for t in tasks for lat in latencies for m, p, sh in settings(args)]
    rows = []
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for r in pool.map(run_one, jobs):
            rows.append(r)
            print(f"rtc bench: {r['task']} {r['latency_ms']:g} ms {r['merge']} {r['param']} share {r['compute_share']:g}: "
                  f"success {r['successes']}/"
                  f"{r['episodes']} (latency charged {r['charged_latency_ms']:g} ms), jump mean "
                  f"{_f(r['boundary_jump_rad']['mean'])} rad, jerk mean {_f(r['command_jerk_rad_s3']['mean'], 0)} "
                  f"rad/s^3, guides {r['guides']}, {r['wall_s']} s", file=sys.stderr, flush=True)
    doc = {"results": rows, "compute_cost": cost, "paired": paired_tests(rows),
           "method": {"lockstep": True, "episodes": args.episodes, "slots": args.slots, "jobs": args.jobs,
                      "compute_shares": args.compute_shares,
                      "seeds": {t: [_seeds(t, args)[0], _seeds(t, args)[-1]] for t in tasks},
                      "checkpoint": cfg.server.model.checkpoint, "preset": cfg.server.model.preset}}
    doc = results.write_result(args.json or args.out, run, doc)
    print(json.dumps({k: doc[k] for k in ("paired", "compute_cost")}, indent=1))
    return 0


def paired_tests(rows: list[dict]) -> list[dict]:
    """Per task and latency: each RTC setting against no merge and against the best crossfade, on
    the same seeds (McNemar's exact test)."""
    out = []
    for key in sorted({(r["task"], r["latency_ms"]) for r in rows}):
        same = [r for r in rows if (r["task"], r["latency_ms"]) == key]
        off = next((r for r in same if r["merge"] == "off"), None)
        fades = [r for r in same if r["merge"] == "crossfade"]
        best_fade = max(fades, key=lambda r: r["successes"]) if fades else None
        for r in same:
            if not r["merge"].startswith("rtc"):
                continue
            for label, base in (("vs_off", off), ("vs_best_crossfade", best_fade)):
                if base is not None:
                    out.append({"task": key[0], "latency_ms": key[1], "merge": r["merge"], "param": r["param"],
                                "compute_share": r["compute_share"], "charged_latency_ms": r["charged_latency_ms"],
                                "against": label, "against_param": base["param"],
                                "success": [r["successes"], base["successes"], r["episodes"]],
                                **mcnemar_exact(r["success_by_seed"], base["success_by_seed"])})
    return out


def _f(x, digits=3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


if __name__ == "__main__":
    sys.exit(main())
