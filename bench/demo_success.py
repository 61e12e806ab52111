"""The demo as a user sees it: physai-fleet on a fleet file, idle and with a CPU-heavy job beside
it, repeated; per run the episodes completed / ended per task, chunks the controllers refused
(by the last reason), SLO misses, capture -> chunk latency and the CPU share of each process kind.

  .venv/bin/python bench/demo_success.py --fleet config/fleet.yaml --duration 60 --runs 2 \
      --json out/demo_success.json
  .venv/bin/python bench/suite.py --only demo      # the suite's entry: 300 s idle, 300 s busy

"busy" runs start a stand-in for a compile next to the fleet: `--hog-procs` processes spinning
on the CPU in one session (one autogroup, as a job started from a terminal is), for the whole
run including the server's start-up. The fleet's processes keep their default priorities.
Run it with nothing else on the machine; it prints the load average before each run.
--json PATH writes the results file (the suite's header: command, commit, machine, load);
--quick is the suite's smoke size (one idle run of 20 s served: figures meaningless).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from physai_bench import results

ROOT = Path(__file__).resolve().parents[1]
HOG = "import time\nwhile True:\n    pass\n"


def start_hog(procs: int) -> subprocess.Popen:
    code = "; ".join(["import subprocess, sys",
                      f"ps = [subprocess.Popen([sys.executable, '-c', {HOG!r}]) for _ in range({procs})]",
                      "[p.wait() for p in ps]"])
    return subprocess.Popen([sys.executable, "-c", code], start_new_session=True)


def run_once(fleet: str | None, duration: float, out_dir: Path, busy: bool, hog_procs: int) -> dict:
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = out_dir / "summary.json"
    cmd = [sys.executable, "-m", "physai_ros.fleet", "--duration", str(duration), "--summary-json", str(summary),
           "--log-dir", str(out_dir / "logs"), "--contact-sheet", str(out_dir / "sheet.png")]
    if fleet:
        cmd += ["--fleet", fleet]
    hog = start_hog(hog_procs) if busy else None
    load = os.getloadavg()[0]
    t0 = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 900)
    finally:
        if hog is not None:
            os.killpg(hog.pid, signal.SIGKILL)
            hog.wait()
    doc = json.loads(summary.read_text()) if summary.exists() else {}
    return {"busy": busy, "rc": proc.returncode, "load_before": round(load, 2),
            "wall_s": round(time.monotonic() - t0, 1), "summary": doc,
            "stdout_tail": proc.stdout[-3000:], "stderr_tail": proc.stderr[-2000:]}


def digest(run: dict) -> dict:
    doc = run["summary"]
    per_task = defaultdict(lambda: [0, 0])
    refused = defaultdict(int)
    lat, misses, stopped = [], 0, 0
    for r in doc.get("robots", []):
        key = r["task"] + (" (streaming)" if r.get("mode") == "streaming" else "")
        per_task[key][0] += r["tasks_completed"]
        per_task[key][1] += r["tasks_completed"] + r["timeouts"]
        if r["chunks_rejected"]:
            refused[r.get("last_reject_reason") or "?"] += r["chunks_rejected"]
        lat += r.get("latency_samples_ms") or []
        misses += r.get("slo_misses", 0)
        stopped += r.get("client_state") == "stopped"
    lat.sort()
    q = (lambda p: round(lat[min(len(lat) - 1, int(p * len(lat)))], 1)) if lat else (lambda p: None)
    cpu = defaultdict(float)
    for name, frac in (doc.get("cpu_fraction") or {}).items():
        cpu[name.rpartition("/")[2]] += frac
    done = sum(v[0] for v in per_task.values())
    ended = sum(v[1] for v in per_task.values())
    return {"busy": run["busy"], "rc": run["rc"], "load_before": run["load_before"],
            "served_s": round(doc.get("duration_s", 0.0), 1), "warmup_s": doc.get("warmup_s"),
            "completed": done, "ended": ended, "success": round(done / ended, 3) if ended else None,
            "per_task": {k: f"{v[0]}/{v[1]}" for k, v in sorted(per_task.items())},
            "chunks_refused": dict(refused), "slo_misses": misses, "clients_stopped": stopped,
            "latency_ms_p50": q(0.5), "latency_ms_p99": q(0.99), "rounds": len(lat),
            "cpu_cores_by_kind": {k: round(v, 2) for k, v in sorted(cpu.items())}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fleet", default=None, help="fleet file (default: the embedded one)")
    ap.add_argument("--duration", type=float, default=60.0, help="served seconds per run")
    ap.add_argument("--runs", type=int, default=1, help="runs per condition")
    ap.add_argument("--conditions", default="idle,busy", help="comma list of idle, busy")
    ap.add_argument("--hog-procs", type=int, default=2, help="spinning processes of the busy job")
    ap.add_argument("--json", default=None, help="write the results file here")
    ap.add_argument("--out-dir", default="out/demo_success", help="each run's logs, summary and contact sheet")
    ap.add_argument("--quick", action="store_true", help="one idle run, 20 s served")
    args = ap.parse_args(argv)
    if args.quick:
        args.duration, args.runs, args.conditions = 20.0, 1, "idle"
        args.out_dir = tempfile.mkdtemp(prefix="demo_success_quick_")  # a smoke run leaves nothing in out/
    run_doc = results.start_run(
        f"physai-fleet as a user runs it ({args.fleet or 'the embedded default fleet'}: the policy server with the "
        f"trained sim_pi0, four simulated robots, real DDS, 13 processes) for {args.duration:g} s served per run, "
        f"{args.runs} run(s) per condition ({args.conditions}; busy: {args.hog_procs} processes spinning on the "
        "CPU beside it for the whole run); success from the sim robots' own task status", __file__, argv,
        quick=args.quick)
    runs = []
    for cond in [c.strip() for c in args.conditions.split(",") if c.strip()]:
        for k in range(args.runs):
            run = run_once(args.fleet, args.duration, Path(args.out_dir) / f"{cond}_{k}", cond == "busy",
                           args.hog_procs)
            d = digest(run)
            runs.append({**d, "stdout_tail": run["stdout_tail"], "stderr_tail": run["stderr_tail"]})
            print(json.dumps(d), flush=True)
    results.write_result(args.json, run_doc, {"fleet": args.fleet or "config/fleet.yaml",
                                              "duration_s": args.duration, "runs": runs})
    if args.quick:
        shutil.rmtree(args.out_dir, ignore_errors=True)
    return 0 if all(r["rc"] == 0 for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
