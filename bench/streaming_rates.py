#!/usr/bin/env python3
"""The action-expert stream against the paper's 480 Hz: what rate one robot's stream reaches on this
machine at the tiny preset, at pi0's widths with 2 layers per tower, and at pi0's full depth.

    .venv/bin/python bench/streaming_rates.py --json bench/results/streaming_rates.json
    .venv/bin/python bench/streaming_rates.py --quick --json /tmp/streaming_rates.json

Two measurements per preset, each `bench/streaming.py` in a fresh process one after another (a
full-depth pi0 takes 13 GB; two in one process would not fit in 24 GB):
  tick alone   one tick timed back to back with nothing else running (`--tick-bench`, sequential,
               the VLM pass done once before): 1000 / its median in ms is the most ticks per
               second this CPU allows that preset, whatever the scheduling.
  over ROS     the fleet's streaming server in its own process at the paper's rates (VLM 30 Hz,
               action expert 480 Hz, actions 50 Hz) with the fleet's default settings (the VLM
               stream on a thread beside the action expert, ordinary scheduling, one intra-op
               thread), a robot client and trajectory controller per robot, this process playing
               the sensors (camera 30 Hz, wrench 480 Hz) over Fast DDS on loopback. Reported from
               the server's /diagnostics over the measured window (its counts at the window's
               start and end): ticks per second reached, missed tick slots, the VLM's rate; and
               from robot 0's topics: wrench -> controller command (quick loop) and camera ->
               command (slow loop). Where one tick alone fits the period, a second ROS run with
               the settings that held 480 Hz in process (the VLM in its own process, SCHED_FIFO
               for the action expert).
The weights are random (the tick's cost does not depend on them). The paper's figure is a GPU one
(one RTX 4090, section 6); no GPU is measured here.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from physai_bench import results
from physai_bench.streaming_runs import run_streaming_bench

PRESETS = ("tiny", "pi0_2layer", "pi0")
# Timed ticks per preset (a full-depth tick takes tenths of a second on 2 cores).
TICK_REPS = {"tiny": 2000, "pi0_2layer": 300, "pi0": 30}
TICK_WARMUP = {"tiny": 200, "pi0_2layer": 30, "pi0": 5}
# Seconds for the server to build the model and start streaming (random init of 3.3 B weights).
STARTUP_S = {"tiny": 180, "pi0_2layer": 300, "pi0": 900}
PAPER = "480 Hz action expert beside a 30 Hz VLM, pi0 on one RTX 4090 (realtime-vla section 6)"


def tick_alone(preset: str, reps: int, warmup: int) -> dict:
    doc = run_streaming_bench(["--tick-bench", "--preset", preset, "--impls", "fused", "--vlm-modes", "--robots",
                               "1", "--tick-reps", str(reps), "--tick-warmup", str(warmup), "--vlm-hz", "0.001"], 3600)
    seq = doc["tick"]["sequential"][0]
    ms = seq["tick_ms"]
    return {"tick_ms_p50": ms["p50"], "tick_ms_p99": ms["p99"], "ticks": ms["n"],
            "ceiling_hz": round(1e3 / ms["p50"], 1), "build_s": seq["build_s"]}


def over_ros(preset: str, seconds: float, startup_s: float, tuned: bool = False) -> dict:
    """tuned: the settings that held 480 Hz in process (docs/streaming.md): the VLM stream in its
    own process and SCHED_FIFO 10 for the action-expert thread (refused without the privilege;
    the file says which it got)."""
    extra = ["--ros-vlm", "process", "--ae-priority", "10"] if tuned else []
    doc = run_streaming_bench(["--ros-only", "--preset", preset, "--robots", "1", "--ros-seconds", str(seconds),
                               "--ros-startup-s", str(startup_s), *extra], startup_s + seconds + 300)
    case = doc["ros_cases"][0]
    keep = ("window_s", "window_ae_hz", "window_missed_tick_fraction", "window_vlm_hz", "server_ae_scheduling",
            "quick_loop_ms_p50", "quick_loop_ms_p99", "quick_loop_samples", "slow_loop_ms_p50", "slow_loop_ms_p99",
            "slow_loop_samples", "segments_received", "commands_received")
    return {k: case.get(k) for k in keep}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--presets", default=",".join(PRESETS), help=f"comma list of {', '.join(PRESETS)}")
    ap.add_argument("--ros-seconds", type=float, default=20.0, help="measured seconds of each ROS run")
    ap.add_argument("--quick", action="store_true", help="tiny preset only, few ticks, a short ROS run")
    ap.add_argument("--json", type=Path, default=None, help="the results file")
    args = ap.parse_args(argv)
    presets = ["tiny"] if args.quick else [p for p in args.presets.split(",") if p]
    unknown = sorted(set(presets) - set(PRESETS))
    if unknown:
        ap.error(f"unknown presets {unknown}; known: {', '.join(PRESETS)}")
    run = results.start_run(
        "CPU, random weights, one robot; tick alone: fused tick back to back, 1 intra-op thread; over ROS: the "
        "streaming server at the paper's 30 / 480 / 50 Hz with the fleet's default settings (VLM on a thread, "
        "ordinary scheduling, 1 intra-op thread), client, controller and sensors as separate processes on loopback",
        __file__, argv, quick=args.quick)
    cells = []
    for preset in presets:
        cell = {"preset": preset}
        try:
            cell["alone"] = tick_alone(preset, 50 if args.quick else TICK_REPS[preset],
                                       10 if args.quick else TICK_WARMUP[preset])
            seconds = 3.0 if args.quick else args.ros_seconds
            cell["ros"] = over_ros(preset, seconds, STARTUP_S[preset])
            # Tuning only matters where one tick fits the period; at pi0's depth it cannot.
            if cell["alone"]["ceiling_hz"] >= 480 and not args.quick:
                cell["ros_tuned"] = over_ros(preset, seconds, STARTUP_S[preset], tuned=True)
        except (RuntimeError, ValueError, KeyError) as e:
            cell["error"] = f"{type(e).__name__}: {e}"
        print(json.dumps(cell), file=sys.stderr, flush=True)
        cells.append(cell)
    results.write_result(args.json, run, {"configured": {"vlm_hz": 30, "ae_hz": 480, "action_hz": 50},
                                          "paper": PAPER, "cells": cells})
    return 0 if all("error" not in c for c in cells) else 1


if __name__ == "__main__":
    sys.exit(main())
