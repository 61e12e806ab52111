"""Robot-side stream rates and CPU cost: runs physai-fleet for N robots and tabulates the rates
the monitor measured (as ratios to the configured rates) and each process's CPU share.

  .venv/bin/python bench/robot_side.py --robots 1 2 4 --duration 20 [--views 1] [--width 224]

Timings on a shared machine are noisy: the load average is printed with the results.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

CONFIGURED = {"wrench": 480.0, "joint_states": 100.0, "camera": 30.0}  # publisher side
RECEIVED = {"wrench": 480.0, "joint_states": 100.0, "camera_0/image_raw": 30.0, "execution_info": 50.0}


def run(robots: int, args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        summary = os.path.join(tmp, "s.json")
        cmd = [sys.executable, "-m", "physai_ros.fleet", "--robots", str(robots), "--duration", str(args.duration),
               "--views", str(args.views), "--width", str(args.width), "--height", str(args.height),
               "--control-rate", str(args.control_rate), "--summary-json", summary,
               "--contact-sheet", os.path.join(tmp, "s.png"), "--log-dir", os.path.join(tmp, "logs")]
        if args.probe_all_streams:
            cmd.append("--probe-all-streams")
        subprocess.run(cmd, check=True, capture_output=True, timeout=args.duration + 120)
        with open(summary) as f:
            return json.load(f)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--robots", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--duration", type=float, default=20.0)
    ap.add_argument("--views", type=int, default=1)
    ap.add_argument("--width", type=int, default=224)
    ap.add_argument("--height", type=int, default=224)
    ap.add_argument("--control-rate", type=float, default=480.0)
    ap.add_argument("--probe-all-streams", action="store_true", help="also measure 480 Hz streams at a subscriber")
    args = ap.parse_args()
    CONFIGURED["joint_trajectory"] = args.control_rate
    RECEIVED["joint_trajectory"] = args.control_rate
    print(f"load average before: {os.getloadavg()}, cores: {os.cpu_count()}")
    for n in args.robots:
        rep = run(n, args)
        print(f"\n{n} robot(s), {rep['duration_s']:.1f} s, {args.views} view(s) {args.width}x{args.height}")
        for r in rep["robots"]:
            pub = " ".join(f"{k}={r['published_hz'].get(k, 0):.1f}Hz({r['published_hz'].get(k, 0) / v:.2f})"
                           for k, v in CONFIGURED.items())
            rec = " ".join(f"{k}={r['rates_hz'][k]:.1f}Hz({r['rates_hz'][k] / v:.2f})"
                           for k, v in RECEIVED.items() if k in r["rates_hz"])
            print(f"  {r['robot_id']} [{r['task']}] done {r['tasks_completed']} chunks {r['chunks_executed']} "
                  f"rej {r['chunks_rejected']} underruns {r['underruns']}\n    published: {pub}\n    received: {rec}")
        cpu = rep.get("cpu_fraction", {})
        kinds = {}
        for name, frac in cpu.items():
            kinds.setdefault(name.split("/")[-1], []).append(frac)
        print("  CPU share per process (mean over robots): " +
              ", ".join(f"{k} {sum(v) / len(v):.2f}" for k, v in sorted(kinds.items())))
        print(f"  load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
