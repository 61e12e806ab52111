#!/usr/bin/env python3
"""The fast path against LeRobot at full depth: pi0 and pi0.5 at their real sizes (PaliGemma 2B
VLM, 300M action expert, 18 layers, 224x224 views), same random weights, same inputs, fp32 on
this CPU. Where the 2-layer preset's gain comes from skipping the VLM's unused last layer (half
its prefix), at 18 layers that skip is 1/18: this measures what remains.

    .venv/bin/python bench/engine_full_depth.py --json bench/results/engine_full_depth.json
    .venv/bin/python bench/engine_full_depth.py --quick --json /tmp/e.json   # tiny preset, the same steps

Each step runs in a fresh process, one after another (bench/engine.py's hidden modes): writing
the checkpoint (13 GB for pi0), our fast path, LeRobot (0.3.2's PI0 or 0.6.1's PI05, in its
reference venv). A full-size model holds ~14-17 GB; two in one process would not fit in 24 GB.
Reports per policy and case: prefix, denoise and total ms (median of --repeats after --warmup;
LeRobot's script does its own single warm-up), the ratio LeRobot / ours, load seconds and each
process's peak RSS.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from physai_bench import results

ENGINE = Path(__file__).resolve().parent / "engine.py"
REFERENCE = {"pi0": "LeRobot 0.3.2 PI0", "pi05": "LeRobot 0.6.1 PI05"}


def _engine(policy: str, *args: str, timeout_s: float = 7200) -> dict | None:
    done = subprocess.run([sys.executable, str(ENGINE), "--policy", policy, *args], capture_output=True,
                          text=True, timeout=timeout_s)
    sys.stderr.write(done.stderr[-2000:])
    if done.returncode != 0:
        raise RuntimeError(f"bench/engine.py {' '.join(args)} exited {done.returncode}: {done.stderr[-1500:]}")
    lines = done.stdout.strip().splitlines()
    return json.loads(lines[-1]) if lines else None


def measure(policy: str, preset: str, cases: str, threads: int, clock: str, repeats: int, warmup: int) -> dict:
    timing = ("--threads", str(threads), "--clock", clock, "--big-cases", cases,
              "--big-repeats", str(repeats), "--big-warmup", str(warmup))
    with tempfile.TemporaryDirectory(prefix="physai_full_depth_") as tmp:
        ckpt = Path(tmp) / preset
        t0 = time.perf_counter()
        _engine(policy, "--_write-checkpoint", preset, str(ckpt))
        write_s = time.perf_counter() - t0
        size_gb = (ckpt / "model.safetensors").stat().st_size / 1e9
        ours = _engine(policy, *timing, "--_time-one", "fast", preset, str(ckpt))
        ref = _engine(policy, *timing, "--_time-one", "lerobot", preset, str(ckpt))
    out = {"policy": policy, "preset": preset, "reference": REFERENCE[policy], "checkpoint_gb": round(size_gb, 2),
           "write_s": round(write_s, 1), "ours_build_s": round(ours["build_s"], 1),
           "ours_peak_rss_gb": ours["peak_rss_gb"], "lerobot_peak_rss_gb": ref["peak_rss_gb"], "cases": {}}
    for case, mine in ours["cases"].items():
        theirs = ref["cases"].get(case, {})
        row = {"ours": mine, "lerobot": theirs}
        if "total_ms" in theirs:
            row["lerobot_over_ours"] = round(theirs["total_ms"] / mine["total_ms"], 3)
            for part in ("prefix_ms", "denoise_ms"):
                if part in theirs:
                    row[f"{part[:-3]}_lerobot_over_ours"] = round(theirs[part] / mine[part], 3)
        else:
            row["error"] = theirs.get("error", "LeRobot gave no figure")
        out["cases"][case] = row
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policies", default="pi0,pi05")
    ap.add_argument("--preset", default="pi0", help="pi0: the real sizes (pi0.5 shares them)")
    ap.add_argument("--cases", default="1x2", help="batch x views, comma-separated (each LeRobot case reloads it)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="cpu: process CPU time (robust to other load; sums the threads' time)")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="the tiny preset, batch 1 x 1 view")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    if args.quick:
        args.preset, args.cases = "tiny", "1x1"
    regime = (f"{args.preset} preset at full depth (fp32, random weights written as a LeRobot checkpoint), "
              f"CPU, {args.threads} torch threads, {args.clock} clock, cases {args.cases}, median of "
              f"{args.repeats} after {args.warmup} warm-up; each implementation in its own process")
    run = results.start_run(regime, __file__, argv, quick=args.quick)
    cells = [measure(p, args.preset, args.cases, args.threads, args.clock, args.repeats, args.warmup)
             for p in args.policies.split(",") if p]
    doc = results.write_result(args.json, run, {"threads": args.threads, "clock": args.clock, "cells": cells})
    print(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
