#!/usr/bin/env python3
"""The prepared GPU check: one command, within 9 minutes on an H100/H200, with that machine's own
python3, torch and triton (nothing installed, nothing fetched). Each step runs in its own process
under its own time box (bench/gpu_steps/), so a hang, a crash or a CUDA error costs that step
alone; whatever a step wrote before it stopped is kept.

    python3 bench/gpu_check.py --commit <sha>           # on the GPU machine; results in bench/results/gpu
    python3 bench/gpu_check.py --cpu-dry-run --out /tmp/x  # every step at tiny size on the CPU (make test)
    python3 bench/gpu_check.py --steps engine_timing --box engine_timing=120 \
        --step-args "engine_timing=--policies pi05 --runs 20"   # a rerun of what a first run left out

Steps, in order: correctness (CUDA paths against the CPU fp32 reference, tiny size), engine_timing
(full-size pi0 / pi0.5, bf16, per mode and case, p50/p99), streaming (two CUDA streams, 30 Hz VLM
and 480 Hz action expert, missed ticks), language (bench/language_stream.py at full size), serving
(ServingCore, raw frames in, chunks out, one and four robots), chunk_profile (one eager chunk under
torch.profiler: GPU kernel time against wall time, launches, host syncs). Writes gpu_check_<stamp>.json (every
figure, stamped with GPU, driver, torch, triton, commit) and gpu_check_<stamp>.md (the short table),
and prints the table last.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STEPS_DIR = ROOT / "bench" / "gpu_steps"
sys.path.insert(0, str(STEPS_DIR))

from report import markdown  # noqa: E402  (bench/gpu_steps/report.py)

# (step, time box in s on the GPU, extra arguments on the GPU, extra arguments in the dry run)
# Sized from the H200 runs (bench/results/gpu): correctness needs ~250 s in all (a 140 s box
# reached the kernels; the rest took 210 s in a rerun), eager timing ~13 s a case at 50 runs (now
# 20), streaming 58 s for two 25 s runs (now four of 15 s: fused and graphed ticks), language
# 20-34 s, serving 11 s, the profile 22 s. The whole run took 401 s of a 570 s call on 2026-11-29.
STEPS = (
    ("correctness", 150, [], []),
    ("engine_timing", 140, ["--runs", "50", "--eager-runs", "20", "--warmup", "3"],
     ["--runs", "2", "--warmup", "1"]),
    ("streaming", 100, ["--seconds", "15"], ["--seconds", "2"]),
    ("language", 45, [], []),
    ("serving", 35, ["--runs", "30", "--warmup", "3"], ["--runs", "3", "--warmup", "1"]),
    ("chunk_profile", 35, [], []),
)


def _run_quiet(cmd) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception as exc:  # a missing tool is a stamp that says so, never a failed check
        return f"unavailable ({type(exc).__name__})"


def stamp(args) -> dict:
    import torch

    try:
        import triton
        triton_version = triton.__version__
    except Exception as exc:
        triton_version = f"not importable ({type(exc).__name__})"
    cuda = torch.cuda.is_available()
    commit = args.commit or _run_quiet(["git", "-C", str(ROOT), "rev-parse", "HEAD"]) or "unknown"
    return {
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S"),
        "commit": commit,
        "mode": "cpu dry run (tiny)" if args.cpu_dry_run else "gpu",
        "gpu": torch.cuda.get_device_name(0) if cuda else None,
        "gpu_memory_gb": round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1) if cuda else None,
        "driver": _run_quiet(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]) if cuda else None,
        "cuda_runtime": torch.version.cuda,
        "torch": torch.__version__,
        "triton": triton_version,
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "load_avg_start": list(os.getloadavg()),
        "kernels_autotune": os.environ.get("PHYSAI_KERNELS_AUTOTUNE", "0 (gpu_check's default)"),
    }


def run_step(name: str, box: float, extra: list, args, out_dir: Path) -> dict:
    part = out_dir / "steps" / f"{name}.json"
    part.unlink(missing_ok=True)
    cmd = [sys.executable, str(STEPS_DIR / f"{name}.py"), "--device", "cpu" if args.cpu_dry_run else "cuda",
           "--size", "tiny" if args.cpu_dry_run else "full", "--json-out", str(part), *extra]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    # The tile table, not per-shape timing of candidates: tuning would take the steps' minutes.
    env.setdefault("PHYSAI_KERNELS_AUTOTUNE", "0")
    if args.cpu_dry_run:
        env["TRITON_INTERPRET"] = "1"  # the Triton backend runs its kernels through the interpreter
    t0 = time.perf_counter()
    with open(out_dir / "steps" / f"{name}.log", "w") as log:
        try:
            rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, timeout=box, cwd=STEPS_DIR).returncode
            status = "done" if rc == 0 else f"exit {rc}"
        except subprocess.TimeoutExpired:
            status = f"stopped at its {box:g} s box"
    result = json.loads(part.read_text()) if part.exists() else {}
    print(f"gpu_check: {name}: {status} in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    return {"status": status, "seconds": round(time.perf_counter() - t0, 1), "result": result}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "gpu"))
    ap.add_argument("--cpu-dry-run", action="store_true", help="every step at tiny size on the CPU")
    ap.add_argument("--steps", default=",".join(s[0] for s in STEPS))
    ap.add_argument("--commit", default="", help="the commit checked (the GPU machine's copy has no .git)")
    ap.add_argument("--budget-s", type=float, default=520, help="all steps together; later steps get what is left")
    ap.add_argument("--box", action="append", default=[], metavar="STEP=S", help="another time box for a step")
    ap.add_argument("--step-args", action="append", default=[], metavar="STEP=ARGS",
                    help="more arguments for a step (a rerun of what a first run left out), e.g. "
                         "'engine_timing=--policies pi05 --runs 20'")
    args = ap.parse_args(argv)
    boxes = {k: float(v) for k, v in (b.split("=", 1) for b in args.box)}
    more = {k: shlex.split(v) for k, v in (a.split("=", 1) for a in args.step_args)}
    wanted = [s for s in args.steps.split(",") if s]
    unknown = sorted(set(wanted) - {s[0] for s in STEPS})
    if unknown:
        ap.error(f"unknown steps {unknown}; known: {', '.join(s[0] for s in STEPS)}")
    out_dir = Path(args.out)
    (out_dir / "steps").mkdir(parents=True, exist_ok=True)  # each step's JSON and log
    report = {"stamp": stamp(args), "steps": {}}
    tag = report["stamp"]["date_utc"].replace(" ", "_").replace(":", "").replace("-", "")
    name = f"gpu_check_{'dryrun_' if args.cpu_dry_run else ''}{tag}"
    end = time.monotonic() + args.budget_s
    interrupted = False
    try:
        for step, box, gpu_extra, dry_extra in STEPS:
            if step not in wanted:
                continue
            left = end - time.monotonic()
            if left < 10:
                report["steps"][step] = {"status": "not run: the budget was spent", "seconds": 0, "result": {}}
                continue
            extra = (dry_extra if args.cpu_dry_run else gpu_extra) + more.get(step, [])
            # The dry run is not held to the GPU's minutes (a busy CI machine); --box still applies.
            box = boxes.get(step, 900 if args.cpu_dry_run else box)
            if not args.cpu_dry_run:
                box = min(box, left)
            report["steps"][step] = run_step(step, box, extra, args, out_dir)
            (out_dir / f"{name}.json").write_text(json.dumps(report, indent=1, default=str))
    except KeyboardInterrupt:  # Ctrl-C: the step's process is gone (subprocess.run killed it);
        interrupted = True     # what the finished steps measured is still written out below
        print("gpu_check: interrupted; writing what the finished steps measured", file=sys.stderr, flush=True)
    report["stamp"]["load_avg_end"] = list(os.getloadavg())
    (out_dir / f"{name}.json").write_text(json.dumps(report, indent=1, default=str))
    table = markdown(report)
    (out_dir / f"{name}.md").write_text(table)
    print(table)
    return 130 if interrupted else 0


if __name__ == "__main__":
    raise SystemExit(main())
