#!/usr/bin/env python3
"""Full streaming inference benchmark (in-process, tiny pi0 by default, CPU threads).

    .venv/bin/python bench/streaming.py --json
    .venv/bin/python bench/streaming.py --robots 1 --seconds 3 --ae-hz 240

For each robot count: the VLM stream and the action-expert stream run on their own threads at
the configured rates for --seconds, while robot 0 gets a force impulse every --impulse-ms and a
new camera observation every --frame-ms. Reported:
  vlm_hz, ae_hz                 achieved passes / ticks per second while both run
  tick_period_ms_p50/p99        start-to-start of consecutive ticks
  missed_tick_fraction          tick slots that passed while a tick was still running
  quick_loop_ms_p50/p99         wrench written -> first segment computed with it (every
                                uncommitted node of that segment depends on it; see docs)
  slow_loop_ms_p50/p99          observation captured -> first segment from a KV cache that
                                encodes it
  alone_tick_ms / alone_vlm_ms  one tick / one VLM pass run by itself (median), i.e. what the
                                CPU sustains without the other stream
Also the machine's load average, because timings on a shared machine are noisy.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from physai_ros.engine import EngineInput, Pi0Config  # noqa: E402
from physai_ros.engine.streaming import StreamingConfig, StreamingCore, StreamingEngine  # noqa: E402
from physai_ros.engine.streaming_expert import StreamingExpert  # noqa: E402


def observation(cfg: Pi0Config, seed: int, views: int = 2, prompt: int = 16) -> EngineInput:
    g = torch.Generator().manual_seed(seed)
    s = cfg.vision.image_size
    return EngineInput(images=torch.rand(views, 3, s, s, generator=g) * 2 - 1,
                       image_masks=torch.ones(views, dtype=torch.bool),
                       tokens=torch.randint(0, cfg.vocab_size, (prompt,), generator=g),
                       token_mask=torch.ones(prompt, dtype=torch.bool),
                       state=torch.randn(cfg.max_state_dim, generator=g))


def pct(xs, q):
    return float(np.percentile(np.asarray(xs), q)) if xs else None


def alone(core: StreamingCore, reps: int = 30) -> dict:
    """Each stream's step run by itself, sequentially (no overlap)."""
    vlm, tick = [], []
    t = 0.0
    for i in range(reps):
        t0 = time.perf_counter()
        if i % 10 == 0:
            core.vlm_pass(t)
            vlm.append((time.perf_counter() - t0) * 1e3)
            t0 = time.perf_counter()
        core.tick(t)
        tick.append((time.perf_counter() - t0) * 1e3)
        t += core.period
    return {"alone_tick_ms": statistics.median(tick[1:]), "alone_vlm_ms": statistics.median(vlm)}


def run_case(args, n_robots: int) -> dict:
    cfg = Pi0Config.preset(args.preset)
    engine, expert = StreamingExpert.build(cfg, force="random", backend=args.backend)

    def make_core(f: float) -> StreamingCore:
        # One factor for every rate keeps the schedule's shape in ticks (steps per token, tokens
        # per tick) and only slows its clock.
        scfg = StreamingConfig(vlm_hz=args.vlm_hz * f, ae_hz=args.ae_hz * f, node_hz=args.node_hz,
                               action_hz=args.action_hz * f, max_robots=max(4, n_robots))
        c = StreamingCore(engine, expert, scfg)
        for i in range(n_robots):
            c.add_robot(f"r{i}", observation(cfg, i), seed=i)
        return c

    core = make_core(1.0)
    base = alone(core)
    scale = 1.0
    if args.scale == "auto":
        # Both streams' work per second at the nominal rates, in CPU seconds, against the share
        # of one core we allow (--cpu-budget): the GIL serialises most of a tiny model's work.
        load = args.ae_hz * base["alone_tick_ms"] / 1e3 + args.vlm_hz * base["alone_vlm_ms"] / 1e3
        scale = min(1.0, args.cpu_budget / load)
        core = make_core(scale)
    base["rate_scale"] = scale

    pending = []  # (version, t_write)
    quick, slow = [], []
    frames = []  # capture times of robot 0's frames
    lock = threading.Lock()

    def on_segment(seg):
        if seg.robot_id != "r0":
            return
        now = time.perf_counter()
        with lock:
            while pending and pending[0][0] <= seg.wrench_version:
                quick.append((now - pending.pop(0)[1]) * 1e3)
            while frames and frames[0] <= seg.observation_time:
                slow.append((now - frames.pop(0)) * 1e3)

    eng = StreamingEngine(core, on_segment)
    eng.start()
    t_end = time.perf_counter() + args.seconds
    next_imp = next_frame = time.perf_counter() + 0.3  # let both streams warm up
    k = 0
    while time.perf_counter() < t_end:
        now = time.perf_counter()
        if now >= next_imp:
            k += 1
            w = [0.0, 0.0, -30.0 if k % 2 else 0.0, 0.0, 0.0, 0.0]
            with lock:
                v = core.set_wrench("r0", w, stamp=now)
                pending.append((v, time.perf_counter()))
            next_imp += args.impulse_ms / 1e3
        if now >= next_frame:
            cap = time.perf_counter()
            core.update_observation("r0", observation(cfg, 1000 + k), captured_at=cap)
            with lock:
                frames.append(cap)
            next_frame += args.frame_ms / 1e3
        time.sleep(0.002)
    eng.stop()
    m = eng.metrics()
    out = {
        "robots": n_robots,
        "vlm_hz": round(m["vlm_hz"], 2),
        "ae_hz": round(m["ae_hz"], 1),
        "tick_period_ms_p50": round(m["tick_period_ms_p50"], 3),
        "tick_period_ms_p99": round(m["tick_period_ms_p99"], 3),
        "tick_compute_ms_p50": round(m["tick_compute_ms_p50"], 3),
        "tick_compute_ms_p99": round(m["tick_compute_ms_p99"], 3),
        "vlm_pass_ms_p50": round(m["vlm_pass_ms_p50"], 2),
        "missed_tick_fraction": round(m["missed_tick_fraction"], 4),
        "quick_loop_ms_p50": pct(quick, 50), "quick_loop_ms_p99": pct(quick, 99), "quick_loop_samples": len(quick),
        "slow_loop_ms_p50": pct(slow, 50), "slow_loop_ms_p99": pct(slow, 99), "slow_loop_samples": len(slow),
        "late_nodes": core.stats.late_nodes, "segments": core.stats.segments,
        "errors": m["errors"],
        "configured_ae_hz": round(args.ae_hz * scale, 1), "configured_vlm_hz": round(args.vlm_hz * scale, 2),
        **{k: round(v, 3) for k, v in base.items()},
    }
    print(f"[{n_robots} robot(s)] {json.dumps(out)}", file=sys.stderr, flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--backend", default="torch")
    ap.add_argument("--robots", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--vlm-hz", type=float, default=30.0)
    ap.add_argument("--ae-hz", type=float, default=480.0)
    ap.add_argument("--node-hz", type=float, default=480.0)
    ap.add_argument("--action-hz", type=float, default=50.0)
    ap.add_argument("--impulse-ms", type=float, default=50.0)
    ap.add_argument("--frame-ms", type=float, default=100.0)
    ap.add_argument("--scale", choices=["none", "auto"], default="none",
                    help="auto: scale every rate down to what one stream-alone measurement says this CPU sustains")
    ap.add_argument("--cpu-budget", type=float, default=0.7, help="with --scale auto: core-seconds per second to plan for")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (each stream is its own thread)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    res = {"preset": args.preset, "device": "cpu", "torch_threads": args.threads,
           "configured": {"vlm_hz": args.vlm_hz, "ae_hz": args.ae_hz, "action_hz": args.action_hz},
           "load_avg_before": [round(x, 2) for x in os.getloadavg()], "cpus": os.cpu_count(), "cases": []}
    for n in args.robots:
        res["cases"].append(run_case(args, n))
    res["load_avg_after"] = [round(x, 2) for x in os.getloadavg()]
    one = next((c for c in res["cases"] if c["robots"] == 1), res["cases"][0])
    for key in ("vlm_hz", "ae_hz", "missed_tick_fraction", "quick_loop_ms_p50", "quick_loop_ms_p99",
                "tick_period_ms_p50", "tick_period_ms_p99"):
        res[key] = one[key]
    res["gpu"] = "not measured: no GPU here (CUDA stream path exists, untested)"
    if args.json:
        print(json.dumps(res))
    else:
        for c in res["cases"]:
            print(json.dumps(c, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
