#!/usr/bin/env python3
"""The benchmark suite: one command that regenerates every results file under bench/results (and the
tables built from them: the README's performance summary and docs/results.md).

    .venv/bin/python bench/suite.py --list                 # the entries, the question each answers
    .venv/bin/python bench/suite.py                        # every entry at full size, then the tables
    .venv/bin/python bench/suite.py --only factory,agents  # some entries
    .venv/bin/python bench/suite.py --quick --out /tmp/q   # tiny sizes (make test runs this)
    .venv/bin/python bench/suite.py --tables               # only rebuild the tables from the files

Entries run one after another (parallel runs would time each other's load), each as its own
process writing <out>/<name>.json (its `--json`, or `--out` for scheduler.py); a failing entry is reported and the others still run. The
--quick run writes elsewhere (never over the committed results) and checks that every entry still
runs and writes a complete header; its figures mean nothing.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from physai_bench import results, tables

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results"
RECORDED_TRACES = "bench/workloads/recorded_fleet_60s.json"  # a 60 s default-fleet run's tasks


@dataclass(frozen=True)
class Entry:
    name: str  # the results file's stem
    question: str
    script: str
    full: tuple[str, ...] = ()
    quick: tuple[str, ...] = ("--quick",)
    needs: str = ""  # what a machine must have beyond make setup (said by --list)
    out_flag: str = "--json"  # the entry point's option naming its results file


ENTRIES = (
    Entry("factory", "Factory productivity: ROSA's plan vs dedicated and shared serving at the paper's fleet sizes",
          "factory.py"),
    Entry("agents", "Kairos multi-agent scheduling over KV budgets and loads, beside FIFO and shortest-first",
          "factory_agents.py", ("--policies", "kairos,fifo_rr,spf_rr")),
    Entry("scheduling", "Kairos wait-ratio scheduling and dynamic horizon on LIBERO-like tasks vs FIFO and Autellix",
          "scheduler.py", ("--libero",), ("--libero", "--quick"), out_flag="--out"),
    Entry("scheduling_synthetic", "Kairos on the synthetic pi0 edge workload: online rates and fleets up to 1,000 "
          "robots, vs FIFO and Autellix", "scheduler.py", (), out_flag="--out"),
    Entry("scheduling_recorded", "The wait-ratio scheduler on tasks our own fleet recorded (physai-fleet "
          "--record-trace), vs FIFO and Autellix", "scheduler.py", ("--traces", RECORDED_TRACES),
          ("--traces", RECORDED_TRACES, "--quick"), out_flag="--out"),
    Entry("language", "Text from the action prefill (OxyGen): KV sharing and cross-frame batching vs a batching "
          "isolated baseline", "language_stream.py", ("--robots", "1,4,16", "--budgets", "16,64,256")),
    Entry("language_pi05", "The same at the paper's f_min (5 frames/s) on pi0.5 (tiny widths, random weights)",
          "language_stream.py", ("--preset", "tiny", "--policy", "pi05", "--f-min", "5", "--robots", "1,4,16",
                                 "--budgets", "16,64,256"), ("--quick", "--policy", "pi05", "--f-min", "5")),
    Entry("factory_routing", "Does the plan's routing pay in the real server (per-instance queues vs none)?",
          "factory_routing.py"),
    Entry("component_order", "Kairos ordering of real pipeline component steps vs shortest-first and FIFO",
          "component_order.py", ("--robots", "4,16", "--seconds", "45", "--reps", "2")),
    Entry("component_memory", "Kairos's memory-aware dispatcher on the real component path: K/V held per batch "
          "and step latency, across budgets and loads, vs no dispatcher", "component_memory.py",
          ("--robots", "8,16", "--budgets", "2,4", "--seconds", "30", "--reps", "2")),
    Entry("pipeline_value", "What a task pipeline adds on the same seeds: System 1 alone, trained components, perfect "
          "ones (tasks per hour, false dones, arm moving with a person in the cell)", "pipeline_value.py",
          ("--seeds", "8", "--shift-s", "60")),
    Entry("drop_watch", "Does the robot see its drops? The grasp watch's recall, precision and delay against the "
          "sim's drops, and tasks when acting on it", "drop_watch.py", ("--seeds", "8", "--shift-s", "60")),
    Entry("safety_stop", "How often the arm moves with a person in the cell: no safety, our model, a perfect one",
          "safety_stop.py", ("--seconds", "90", "--seeds", "7,8")),
    Entry("camera_frames", "What the exact LeRobot image path costs on raw camera frames (640x480, 1280x720)",
          "camera_frames.py"),
    Entry("openpi_gateway", "openpi's own clients served by our gateway vs openpi's server, at equal model time",
          "openpi_gateway.py", ("--clients", "1,4,16", "--rounds", "20"), needs=".venv-openpi (make test sets it up)"),
    Entry("serving", "Serving overhead over ROS beside openpi's websocket server and a bare rclpy floor, at equal "
          "model time", "serving_vs_openpi.py", ("--reps", "2"), needs=".venv-openpi (make test sets it up)"),
    Entry("serving_auth", "What authentication costs per round over ROS: off vs on, 1-16 robots, 1-3 views, "
          "224 and 640x480", "serving.py", ("--auth", "both", "--reps", "2", "--rounds", "30", "--cases",
                                             "1robot_1views_224,1robot_2views_224,1robot_3views_224,4robot_2views_224,"
                                             "16robot_2views_224,1robot_2views_480x640"), out_flag="--out"),
    Entry("policy", "Closed-loop success of the shipped policy vs the scripted expert, and Kairos's horizon "
          "trade-off (confidence vs static)", "policy_eval.py", ("--tasks", "reach,pick_and_place", "--jobs", "2")),
    Entry("demo", "Does the default fleet (make demo) keep completing tasks over ROS with a CPU-heavy job beside it?",
          "demo_success.py", ("--duration", "300", "--runs", "1", "--conditions", "idle,busy", "--out-dir",
                              "out/demo_success")),
    Entry("soak", "Sixteen robots served for ten minutes: no round lost or answered twice, latency and memory flat?",
          "soak.py", ("--minutes", "10", "--robots", "16", "--out-dir", "out/soak")),
    Entry("engine_full_depth", "The fast path against LeRobot at full pi0 and pi0.5 depth, fp32 on this CPU",
          "engine_full_depth.py", needs=".venv-lerobot and .venv-lerobot06 (make test sets them up)"),
    Entry("streaming_rates", "The action-expert stream against the paper's 480 Hz: tiny, pi0's widths and full depth, "
          "alone and over ROS at default settings", "streaming_rates.py"),
    Entry("streaming_fleet", "Several streaming robots on one server at the fleet's CPU rates: the streams' rates and "
          "the wrench and frame loops, 1-4 robots, in process and over ROS", "streaming_fleet.py"),
    Entry("rtc", "Real-time chunking in the closed loop, its compute charged as latency, over beta and model-time share",
          "rtc.py", ("--episodes", "50", "--latency-ms", "400", "--merges", "off,crossfade,rtc", "--crossfades",
                     "0.05,0.2", "--betas", "5,10", "--compute-shares", "0.25,0.5,1", "--jobs", "2",
                     "--cost-reps", "10")),
)


def run_entry(entry: Entry, out: Path, quick: bool) -> dict:
    path = out / f"{entry.name}.json"
    log = out / f"{entry.name}.log"
    args = entry.quick if quick else entry.full
    cmd = [sys.executable, str(BENCH / entry.script), *args, entry.out_flag, str(path)]
    t0 = time.monotonic()
    with open(log, "w") as f:
        rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=BENCH.parent, env=dict(os.environ)).returncode
    wall = time.monotonic() - t0
    status = {"name": entry.name, "rc": rc, "wall_s": round(wall, 1), "log": str(log)}
    if rc == 0:
        try:
            doc = results.read_result(path)
            if doc["quick"] != quick:
                raise ValueError(f"{path}: quick is {doc['quick']}, the run was {'quick' if quick else 'full'}")
        except (OSError, ValueError) as e:
            status["error"] = str(e)
    else:
        status["error"] = f"exit {rc}; the last lines of {log}:\n" + "".join(log.read_text().splitlines(True)[-15:])
    return status


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="tiny sizes: checks the entries run, figures meaningless")
    ap.add_argument("--only", default="", help="entries to run, comma-separated (default: all)")
    ap.add_argument("--out", type=Path, default=None, help="results folder (default bench/results; required with "
                                                           "--quick, which never writes over the committed results)")
    ap.add_argument("--list", action="store_true", help="list the entries and exit")
    ap.add_argument("--tables", action="store_true", help="only rebuild the tables from bench/results")
    a = ap.parse_args(argv)
    if a.list:
        for e in ENTRIES:
            print(f"{e.name:16s} {e.question}  (bench/{e.script}{'; needs ' + e.needs if e.needs else ''})")
        return 0
    if a.tables:
        tables.write_all(RESULTS)
        return 0
    names = [n for n in a.only.split(",") if n]
    unknown = set(names) - {e.name for e in ENTRIES}
    if unknown:
        ap.error(f"no such entries: {sorted(unknown)} (--list shows them)")
    if a.quick and (a.out is None or a.out.resolve() == RESULTS):
        ap.error("--quick needs --out outside bench/results (its figures are not results)")
    out = a.out or RESULTS
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    statuses = []
    for e in ENTRIES:
        if names and e.name not in names:
            continue
        print(f"== {e.name}: {e.question}", flush=True)
        statuses.append(run_entry(e, out, a.quick))
        s = statuses[-1]
        print(f"   {'ok' if 'error' not in s else 'FAILED'} in {s['wall_s']:.0f} s" +
              (f"\n{s['error']}" if "error" in s else ""), flush=True)
    total = time.monotonic() - t0
    failed = [s["name"] for s in statuses if "error" in s]
    print(f"suite: {len(statuses) - len(failed)}/{len(statuses)} entries ok in {total:.0f} s"
          + (f"; failed: {', '.join(failed)}" if failed else ""))
    if not a.quick and out.resolve() == RESULTS and not failed:
        tables.write_all(RESULTS)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
