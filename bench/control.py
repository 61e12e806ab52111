#!/usr/bin/env python3
"""Trajectory buffer benchmark: cost per call of the robot-side 480 Hz buffer.

    .venv/bin/python bench/control.py --json [--seconds 60] [--joints 7] [--repeats 3]

Simulates --seconds of control at --rate Hz per merge rule (replace, crossfade,
weighted_average): a 50-action chunk (dt 20 ms, captured 100 ms ago) every 0.5 s, `advance`
every tick, `execution_state` every tick (what a controller publishing ExecutionInfo at the
control rate pays), plus a streaming case (`insert_segment`: 8 nodes of 1/480 s every 1/60 s,
two of them committed, as the realtime-vla §6 stream sends them). Reports p50/p99/max in
microseconds of wall time (time.perf_counter around each call) per call and rule, the best of
--repeats runs per statistic (the run least disturbed by other jobs), the spread between runs,
`loop_core_fraction` (= (p50 advance + p50 execution_state) * rate: the share of one core a
control loop spends in the buffer; `loop_core_fraction_mean` uses means, which include the times
the OS preempted a call) and the load average, since timings on a shared machine are noisy.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

import numpy as np

from physai_ros.control import MergeRule, TrajectoryBuffer
from physai_ros.protocol.chunk import ActionChunkData

RULES = (MergeRule.REPLACE, MergeRule.CROSSFADE, MergeRule.WEIGHTED_AVERAGE)


def _stats(samples_s: list[float]) -> dict:
    us = np.asarray(samples_s) * 1e6
    return {"n": int(us.size), "p50_us": round(float(np.percentile(us, 50)), 2),
            "p99_us": round(float(np.percentile(us, 99)), 2), "max_us": round(float(us.max()), 2),
            "mean_us": round(float(us.mean()), 3)}


def run_chunks(rule: MergeRule, seconds: float, rate: float, joints: int, seed: int) -> dict:
    names = tuple(f"joint_{i}" for i in range(joints))
    rng = np.random.default_rng(seed)
    buf = TrajectoryBuffer(names, rate_hz=rate, merge=rule, crossfade_s=0.05)
    buf.set_hold_position(np.zeros(joints))
    every = int(round(rate * 0.5))
    times = {"insert": [], "advance": [], "execution_state": []}
    perf = time.perf_counter
    rejected = 0
    for step in range(int(seconds * rate)):
        now = 100.0 + step / rate
        if step % every == 0:
            chunk = ActionChunkData("r", "t", step // every + 1, now - 0.1, dt=0.02, joint_names=names,
                                    actions=rng.normal(size=(50, joints)), horizon=50)
            t0 = perf()
            out = buf.insert(chunk, now)
            times["insert"].append(perf() - t0)
            rejected += not out.accepted
        t0 = perf()
        buf.advance(now)
        t1 = perf()
        buf.execution_state(now)
        t2 = perf()
        times["advance"].append(t1 - t0)
        times["execution_state"].append(t2 - t1)
    result = {k: _stats(v) for k, v in times.items()}
    result["rejected"] = rejected
    result["underruns"] = buf.execution_state(100.0 + seconds).underruns
    return result


def run_stream(seconds: float, rate: float, joints: int, seed: int) -> dict:
    names = tuple(f"joint_{i}" for i in range(joints))
    rng = np.random.default_rng(seed)
    buf = TrajectoryBuffer(names, rate_hz=rate)
    buf.set_hold_position(np.zeros(joints))
    every = int(round(rate / 60.0))
    times, rejected = [], 0
    perf = time.perf_counter
    flags = np.array([True, True] + [False] * 6)
    for step in range(int(seconds * rate)):
        now = 100.0 + step / rate
        if step % every == 0:
            t0 = perf()
            out = buf.insert_segment(now + 2 / rate, 1 / rate, rng.normal(size=(8, joints)), flags,
                                     step // every + 1, now)
            times.append(perf() - t0)
            rejected += not out.accepted
        buf.advance(now)
    return {"insert_segment": _stats(times), "rejected": rejected}


def _best(runs: list[dict]) -> dict:
    """Per statistic the least disturbed run, plus the spread of p50 across runs."""
    out = {}
    for call in ("insert", "advance", "execution_state", "insert_segment"):
        if call not in runs[0]:
            continue
        best = {k: min(r[call][k] for r in runs) for k in ("p50_us", "p99_us", "max_us", "mean_us")}
        p50s = [r[call]["p50_us"] for r in runs]
        best["p50_spread"] = round(max(p50s) / min(p50s) - 1.0, 3) if min(p50s) > 0 else None
        best["n"] = runs[0][call]["n"]
        out[call] = best
    for k in ("rejected", "underruns"):
        if k in runs[0]:
            out[k] = max(r[k] for r in runs)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="print one compact JSON object")
    ap.add_argument("--seconds", type=float, default=60.0, help="simulated control time per run")
    ap.add_argument("--rate", type=float, default=480.0)
    ap.add_argument("--joints", type=int, default=7)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    load_before = os.getloadavg()
    started = time.perf_counter()
    result: dict = {"config": {"seconds": args.seconds, "rate_hz": args.rate, "joints": args.joints,
                               "repeats": args.repeats, "chunk": "50 actions, dt 20 ms, every 0.5 s"},
                    "rules": {}}
    for rule in RULES:
        runs = [run_chunks(rule, args.seconds, args.rate, args.joints, args.seed + r) for r in range(args.repeats)]
        best = _best(runs)
        # medians: the mean also counts the times the OS took the core away mid-call
        best["loop_core_fraction"] = round((best["advance"]["p50_us"] + best["execution_state"]["p50_us"])
                                           * 1e-6 * args.rate, 5)
        best["loop_core_fraction_mean"] = round((best["advance"]["mean_us"] + best["execution_state"]["mean_us"])
                                                * 1e-6 * args.rate, 5)
        result["rules"][rule.value] = best
    result["stream"] = _best([run_stream(args.seconds, args.rate, args.joints, args.seed + r)
                              for r in range(args.repeats)])
    result["machine"] = {"python": platform.python_version(), "cpus": os.cpu_count(),
                         "loadavg_before": [round(x, 2) for x in load_before],
                         "loadavg_after": [round(x, 2) for x in os.getloadavg()],
                         "wall_s": round(time.perf_counter() - started, 1)}
    print(json.dumps(result, indent=None if args.json else 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
