#!/usr/bin/env python3
"""Several streaming robots on one server: what the streams reach and how long a robot waits for a
new wrench or frame to act, at 1, 2 and 4 robots, at the shipped fleet's CPU rates.

    .venv/bin/python bench/streaming_fleet.py --json bench/results/streaming_fleet.json
    .venv/bin/python bench/streaming_fleet.py --quick --json /tmp/streaming_fleet.json

One `bench/streaming.py` process (tiny preset, random weights) with the rates of config/fleet.yaml's
`server.streaming` (VLM 10 Hz, action expert 120 Hz, action spacing 10 Hz on the CPU), the wrench
sampled at the tick rate, segments at the streaming task's rate. Per robot count, both loops:
  in process  the two streams on their threads, this process feeding every robot's observations
              and robot 0's wrench impulses (no transport)
  over ROS    the streaming policy server, a robot client and trajectory controller per robot as
              processes on loopback (Fast DDS), the sensors played by the bench process
Reported: the streams' rates reached and missed tick slots (the server's /diagnostics over ROS),
wrench -> first segment / command that read it (quick loop), new frame -> first segment / command
from a VLM pass that encoded it (slow loop). The baseline is the same server with one robot, so
the ratios say what each added robot costs. The paper (realtime-vla) measures one robot on a GPU at
30 / 480 Hz; bench/streaming_rates.py compares with it, this entry does not.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from physai_bench import results
from physai_bench.streaming_runs import run_streaming_bench

ROBOTS = (1, 2, 4)


def fleet_rates() -> dict:
    """The shipped fleet's streaming rates and its streaming task's segment rate."""
    from physai_ros.config.fleet import load_fleet

    fleet = load_fleet()
    s = fleet.server.streaming
    streaming_tasks = [t for t in fleet.tasks.values() if t.mode == "streaming"]
    segment_hz = streaming_tasks[0].segment_rate_hz if streaming_tasks else s.ae_hz
    return {"vlm_hz": s.vlm_hz, "ae_hz": s.ae_hz, "action_hz": s.action_hz, "segment_rate_hz": segment_hz}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--robots", default=",".join(map(str, ROBOTS)), help="comma list of robot counts")
    ap.add_argument("--seconds", type=float, default=6.0, help="measured seconds in process, per robot count")
    ap.add_argument("--ros-seconds", type=float, default=15.0, help="measured seconds over ROS, per robot count")
    ap.add_argument("--quick", action="store_true", help="1 and 2 robots, short runs: checks the bench runs")
    ap.add_argument("--json", type=Path, default=None, help="the results file")
    args = ap.parse_args(argv)
    robots = [1, 2] if args.quick else [int(n) for n in args.robots.split(",") if n]
    seconds, ros_seconds = (1.5, 2.0) if args.quick else (args.seconds, args.ros_seconds)
    rates = fleet_rates()
    run = results.start_run(
        f"CPU, tiny preset (random weights), the shipped fleet's streaming rates (VLM {rates['vlm_hz']:g} Hz, action "
        f"expert {rates['ae_hz']:g} Hz, actions {rates['action_hz']:g} Hz, segments {rates['segment_rate_hz']:g}/s) and "
        "default settings (VLM on a thread, ordinary scheduling, 1 intra-op thread); one server's streams shared "
        "by 1-4 robots, in process and over ROS (the server, a client and a 480 Hz controller per robot and the "
        "sensors' player as processes on loopback, all on this host: the robot side competes for its cores)",
        __file__, argv, quick=args.quick)
    cmd = ["--preset", "tiny", "--robots", *map(str, robots), "--seconds", str(seconds),
           "--ros-seconds", str(ros_seconds), "--vlm-hz", str(rates["vlm_hz"]), "--ae-hz", str(rates["ae_hz"]),
           "--action-hz", str(rates["action_hz"]), "--ros-wrench-hz", str(rates["ae_hz"]),
           "--segment-rate-hz", str(rates["segment_rate_hz"])]
    doc = run_streaming_bench(cmd, 600 + 240 * len(robots))
    results.write_result(args.json, run, {"configured": rates, "robots": robots, "in_process": doc["cases"],
                                          "over_ros": doc.get("ros_cases", [])})
    return 0


if __name__ == "__main__":
    sys.exit(main())
