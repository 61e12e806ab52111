#!/usr/bin/env python3
"""pi0 / pi0.5 engine benchmark: our plain path, our prepared fast path and LeRobot's PI0 (0.3.2)
or PI05 (0.6.1), side by side, same weights (one LeRobot-layout checkpoint per preset), same
inputs, fp32 on this CPU.

    .venv/bin/python bench/engine.py --json                 # everything (several minutes)
    .venv/bin/python bench/engine.py --presets tiny --no-full-rss --json
    .venv/bin/python bench/engine.py --compile --clock cpu --threads 1 --json   # eager vs torch.compile
    .venv/bin/python bench/engine.py --policy pi05 --clock cpu --threads 1 --no-full-rss --json
        # pi0.5: ours vs LeRobot 0.6.1's PI05 (.venv-lerobot06)
    .venv/bin/python bench/engine.py --profile 25 --presets pi0_2layer --threads 1
        # torch.profiler op tables (self CPU, grouped by input shape) of the fast path's prefix
        # and denoise and of LeRobot's sample_actions, headline case; op counts and shapes are
        # what to compare (the profiler's own overhead inflates the times)

Reports, per preset and per (batch, views) case, prefix and denoise times (median of --repeats
runs after one warm-up) for each implementation; per preset the headline case (batch 1, 2 views,
48 prompt tokens as LeRobot pads them) as `lerobot_ms`, `plain_ms`, `fast_ms`,
`speedup_vs_lerobot` (= lerobot_ms / fast_ms); and `full_pi0_peak_rss_gb`, the peak RSS of a fresh
process that loads a full-size random pi0 checkpoint (fp32, written to a temp dir) and prepares
the fast path. LeRobot runs in its own venv (.venv-lerobot, scripts/lerobot_reference/); where it
is missing its figures are null and the reason is reported.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts" / "lerobot_reference"))

PROMPT_LEN = 48
HEADLINE = (1, 2)  # (batch, views)
POLICY = "pi0"  # --policy: pi0 (LeRobot 0.3.2 reference) or pi05 (LeRobot 0.6.1)
# Loader arguments per preset: head counts are not visible in projection shapes.
LOAD_ARGS = {"tiny": dict(head_dim=16, vision_heads=2)}


def _tensor_writer(seed: int):
    import torch

    gen = torch.Generator().manual_seed(seed)

    def make(name, shape):
        if len(shape) == 1 or name == "vision.pos":
            std = 0.1
        elif name == "vlm.embed":
            std = 1.0 / math.sqrt(shape[1])
        else:
            std = 1.0 / math.sqrt(math.prod(shape[1:]))
        return torch.empty(shape).normal_(0.0, std, generator=gen)

    return make


def bench_config(preset: str):
    """The preset for --policy: pi0.5 exists only as LeRobot >= 0.4 writes it (its variant)."""
    from physai_ros.engine import Pi0Config

    if POLICY == "pi05":
        return Pi0Config.preset(preset, policy="pi05", time_schedule="multiply", rope_style="multiply")
    return Pi0Config.preset(preset)


def write_checkpoint(preset: str, path: Path, seed: int = 0) -> Path:
    from physai_ros.engine.checkpoint.writer import save_lerobot_checkpoint

    return save_lerobot_checkpoint(path, bench_config(preset), _tensor_writer(seed))


def _inputs(cfg, batch: int, views: int, seed: int = 0):
    import torch

    from physai_ros.engine import EngineInput

    gen = torch.Generator().manual_seed(seed)
    s = cfg.vision.image_size
    return [EngineInput(
        images=torch.rand(views, 3, s, s, generator=gen) * 2 - 1,
        image_masks=torch.ones(views, dtype=torch.bool),
        tokens=torch.randint(0, cfg.vocab_size, (PROMPT_LEN,), generator=gen),
        token_mask=torch.ones(PROMPT_LEN, dtype=torch.bool),
        state=torch.randn(cfg.max_state_dim, generator=gen),
        noise=torch.randn(cfg.chunk_size, cfg.max_action_dim, generator=gen),
    ) for _ in range(batch)]


def build_ours(ckpt: Path, preset: str, fast: bool):
    from physai_ros.engine import Pi0Engine

    t0 = time.perf_counter()
    eng = Pi0Engine.from_lerobot_checkpoint(ckpt, fast=fast, **LOAD_ARGS.get(preset, {}))
    return eng, time.perf_counter() - t0


CLOCK = time.perf_counter  # --clock cpu switches to process CPU time (see main)


def time_ours(eng, label: str, batch: int, views: int, repeats: int, warmup: int) -> dict:
    import torch

    from physai_ros.engine.batching import collate

    b = collate(_inputs(eng.config, batch, views), eng.config, "cpu", torch.float32)
    pre, den = [], []
    for r in range(repeats + warmup):
        t0 = CLOCK()
        cache = eng.model.prefix(b.images, b.image_masks, b.tokens, b.token_mask)
        t1 = CLOCK()
        eng.model.denoise(cache, b.state, b.noise)
        t2 = CLOCK()
        if r >= warmup:
            pre.append((t1 - t0) * 1e3)
            den.append((t2 - t1) * 1e3)
    out = {
        "prefix_ms": statistics.median(pre), "denoise_ms": statistics.median(den),
        "total_ms": statistics.median([p + d for p, d in zip(pre, den)]),
        "total_ms_all": [round(p + d, 2) for p, d in zip(pre, den)],
    }
    print(f"[{label} b{batch} v{views}] {json.dumps(out)}", file=sys.stderr, flush=True)
    return out


_LEROBOT_CPU = """
import json, sys, time
sys.path.insert(0, {here!r})
import torch
torch.set_num_threads({threads})
time.perf_counter = time.process_time  # CPU time of this process, immune to other load
import time_lerobot
from pathlib import Path
print(json.dumps(time_lerobot.measure({preset!r}, {batch}, {views}, {prompt}, {repeats}, 1, Path({ckpt!r}))))
"""
_LEROBOT06_CPU = """
import json, sys, time
sys.path.insert(0, {here!r})
import torch
torch.set_num_threads({threads})
time.perf_counter = time.process_time  # CPU time of this process, immune to other load
import time_lerobot_pi05
from pathlib import Path
for r in time_lerobot_pi05.measure("auto", "pi05", [{batch}], [{views}], {prompt}, {repeats}, 1, Path({ckpt!r})):
    print(json.dumps(r))
"""


def time_lerobot_cpu(ckpt: Path, preset: str, batch: int, views: int, repeats: int, threads: int) -> dict:
    """LeRobot's own timing script run with process CPU time as its clock."""
    from reference_venvs import venv_python


    code = (_LEROBOT06_CPU if POLICY == "pi05" else _LEROBOT_CPU).format(here=str(ROOT / "scripts" / "lerobot_reference"), threads=threads, preset=preset,
                               batch=batch, views=views, prompt=PROMPT_LEN, repeats=repeats, ckpt=str(ckpt))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env["OMP_NUM_THREADS"] = str(threads)
    py = venv_python("0.6.1" if POLICY == "pi05" else "0.3.2")
    p = subprocess.run([str(py), "-c", code], capture_output=True, text=True, env=env, timeout=3600)
    if p.returncode != 0:
        return {"error": p.stderr[-500:]}
    r = json.loads(p.stdout.strip().splitlines()[-1])
    out = {k: r[k] for k in ("prefix_ms", "denoise_ms", "total_ms", "total_ms_all", "lerobot_version") if k in r}
    print(f"[{preset} lerobot(cpu) b{batch} v{views}] {json.dumps(out)}", file=sys.stderr, flush=True)
    return out


def time_lerobot(ckpt: Path, preset: str, batch: int, views: int, repeats: int, threads: int) -> dict:
    if CLOCK is not time.perf_counter:
        try:
            return time_lerobot_cpu(ckpt, preset, batch, views, repeats, threads)
        except (FileNotFoundError, ImportError, subprocess.TimeoutExpired) as e:
            return {"error": str(e)[-500:]}
    try:
        if POLICY == "pi05":
            from time_lerobot_pi05 import time_in_reference_venv
        else:
            from time_lerobot import time_in_reference_venv
    except ImportError as e:
        return {"error": f"scripts/lerobot_reference/time_lerobot*.py not importable: {e}"}
    try:
        kw = {"policy": "pi05", "preset": "auto"} if POLICY == "pi05" else {"preset": preset}
        r = time_in_reference_venv(batch=batch, views=views, prompt_len=PROMPT_LEN,
                                   repeats=repeats, threads=threads, checkpoint=str(ckpt), **kw)
    except (FileNotFoundError, RuntimeError, subprocess.TimeoutExpired) as e:
        return {"error": str(e)[-500:]}
    out = {k: r[k] for k in ("prefix_ms", "denoise_ms", "total_ms", "total_ms_all", "lerobot_version") if k in r}
    print(f"[{preset} lerobot b{batch} v{views}] {json.dumps(out)}", file=sys.stderr, flush=True)
    return out


def full_pi0_peak_rss(tmp: Path) -> dict:
    """Write a full-size random pi0 checkpoint, then load it + prepare the fast path in a fresh
    process and read that process's peak RSS."""
    ckpt = tmp / "pi0_full"
    t0 = time.perf_counter()
    subprocess.run([sys.executable, __file__, "--_write-checkpoint", "pi0", str(ckpt)], check=True)
    write_s = time.perf_counter() - t0
    size_gb = (ckpt / "model.safetensors").stat().st_size / 1e9
    res = {"checkpoint_gb": round(size_gb, 2), "write_s": round(write_s, 1)}
    for mode in ("load", "engine"):
        t0 = time.perf_counter()
        p = subprocess.run([sys.executable, __file__, "--_rss", mode, str(ckpt)], check=True,
                           capture_output=True, text=True)
        res[f"{mode}_peak_rss_gb"] = json.loads(p.stdout.strip().splitlines()[-1])["peak_rss_gb"]
        res[f"{mode}_s"] = round(time.perf_counter() - t0, 1)
    (ckpt / "model.safetensors").unlink()
    return res


def _child_rss(mode: str, ckpt: str) -> None:
    import resource

    from physai_ros.engine import Pi0Engine, load_lerobot_checkpoint

    # ru_maxrss is the process's peak, so nothing needs to stay referenced until it is read.
    if mode == "load":
        load_lerobot_checkpoint(ckpt, progress=lambda m: print(m, file=sys.stderr))
    else:
        Pi0Engine.from_lerobot_checkpoint(ckpt, fast=True, progress=lambda m: print(m, file=sys.stderr))
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"peak_rss_gb": round(peak_kb * 1024 / 1e9, 2)}))


_LEROBOT_PROFILE = """
import sys
sys.path.insert(0, {here!r})
import torch
torch.set_num_threads({threads})
import lerobot_compat as lc, reference
from torch.profiler import profile, ProfilerActivity
spec = reference.spec_for({preset!r})
policy = reference.build_policy(spec, 0, randomize=False)
gen = torch.Generator().manual_seed(0)
s, b = spec.sizes.image_size, {batch}
images = [torch.rand(b, 3, s, s, generator=gen) * 2 - 1 for _ in range({views})]
masks = [torch.ones(b, dtype=torch.bool) for _ in range({views})]
tokens = torch.randint(1, spec.sizes.vocab_size, (b, {prompt}), generator=gen)
args = (images, masks, tokens, torch.ones(b, {prompt}, dtype=torch.bool),
        torch.randn(b, spec.max_state_dim, generator=gen))
noise = torch.randn(b, spec.chunk_size, spec.max_action_dim, generator=gen)
with torch.no_grad():
    policy.model.sample_actions(*args, noise=noise.clone())
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        policy.model.sample_actions(*args, noise=noise.clone())
print(prof.key_averages(group_by_input_shape=True).table(sort_by="self_cpu_time_total", row_limit={rows},
      max_name_column_width=32, max_shapes_column_width=70))
"""


def profile_tables(presets, batch: int, views: int, rows: int, threads: int) -> None:
    """Print torch.profiler tables (self CPU time, grouped by op and input shapes) of the fast
    path's prefix and denoise and of LeRobot 0.3.2's whole sample_actions (pi0 only) on
    random weights, after one warm-up call each."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from physai_ros.engine import Pi0Engine
    from physai_ros.engine.batching import collate

    def table(prof):
        return prof.key_averages(group_by_input_shape=True).table(
            sort_by="self_cpu_time_total", row_limit=rows, max_name_column_width=32, max_shapes_column_width=70)

    for preset in presets:
        cfg = bench_config(preset)
        m = Pi0Engine(cfg).model
        b = collate(_inputs(cfg, batch, views), cfg, "cpu", torch.float32)
        args = (b.images, b.image_masks, b.tokens, b.token_mask)
        with torch.no_grad():
            cache = m.prefix(*args)
            m.denoise(cache, b.state, b.noise)
            with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
                cache = m.prefix(*args)
            print(f"== {preset} fast prefix b{batch} v{views} ({type(m).__name__}, packed={m.packed})\n{table(prof)}")
            with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
                m.denoise(cache, b.state, b.noise)
            print(f"== {preset} fast denoise b{batch} v{views}\n{table(prof)}")
        if POLICY != "pi0":
            continue
        from reference_venvs import venv_python

        code = _LEROBOT_PROFILE.format(here=str(ROOT / "scripts" / "lerobot_reference"), threads=threads,
                                       preset=preset, batch=batch, views=views, prompt=PROMPT_LEN, rows=rows)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
        p = subprocess.run([str(venv_python("0.3.2")), "-c", code], capture_output=True, text=True, env=env, timeout=3600)
        out = p.stdout if p.returncode == 0 else p.stderr[-2000:]
        print(f"== {preset} LeRobot 0.3.2 sample_actions (prefix + denoise) b{batch} v{views}\n{out}")


def compile_comparison(presets, cases, reps: int, warm: int) -> dict:
    """Fast path eager vs the same model with torch.compile (inductor) of prefix and denoise:
    same weights (one model object), same inputs. The first compiled call per shape is the
    compile and is reported apart (wall and this process's CPU time; inductor's worker
    processes are not in the CPU figure). Outputs are compared to eager (max abs diff)."""
    import torch

    from physai_ros.engine import Pi0Config, Pi0Engine
    from physai_ros.engine.batching import collate

    out = {}
    for preset in presets:
        cfg = Pi0Config.preset(preset)
        m = Pi0Engine(cfg).model
        pc, dc = torch.compile(m.prefix, dynamic=False), torch.compile(m.denoise, dynamic=False)
        res = {}
        for batch, views in cases:
            b = collate(_inputs(cfg, batch, views), cfg, "cpu", torch.float32)
            args = (b.images, b.image_masks, b.tokens, b.token_mask)
            row, eager_acts = {}, None
            for label, pre_fn, den_fn in (("eager", m.prefix, m.denoise), ("compiled", pc, dc)):
                if label == "compiled":
                    w0, c0 = time.perf_counter(), time.process_time()
                    cache = pc(*args)
                    w1, c1 = time.perf_counter(), time.process_time()
                    acts, _ = dc(cache, b.state, b.noise)
                    w2, c2 = time.perf_counter(), time.process_time()
                    row["compile_wall_s"] = {"prefix": round(w1 - w0, 1), "denoise": round(w2 - w1, 1)}
                    row["compile_cpu_s"] = {"prefix": round(c1 - c0, 1), "denoise": round(c2 - c1, 1)}
                    row["max_abs_diff_vs_eager"] = (acts - eager_acts).abs().max().item()
                pre, den = [], []
                for r in range(reps + warm):
                    t0 = CLOCK()
                    cache = pre_fn(*args)
                    t1 = CLOCK()
                    acts, _ = den_fn(cache, b.state, b.noise)
                    t2 = CLOCK()
                    if r >= warm:
                        pre.append((t1 - t0) * 1e3)
                        den.append((t2 - t1) * 1e3)
                if label == "eager":
                    eager_acts = acts
                row[label] = {"prefix_ms": round(statistics.median(pre), 2), "denoise_ms": round(statistics.median(den), 2),
                              "total_ms": round(statistics.median([p + d for p, d in zip(pre, den)]), 2)}
            e, c = row["eager"], row["compiled"]
            row["speedup"] = {k: round(e[k] / c[k], 2) for k in ("prefix_ms", "denoise_ms", "total_ms")}
            res[f"b{batch}_v{views}"] = row
            print(f"[{preset} compile b{batch} v{views}] {json.dumps(row)}", file=sys.stderr, flush=True)
        out[preset] = res
    return out


def _time_one(impl: str, preset: str, ckpt: str, args) -> None:
    """One implementation in this (fresh) process, the --big-cases at --big-repeats: what
    bench/engine_full_depth.py runs so that two full-size models never share a process's memory.
    Prints one JSON object: build seconds, the cases, and the peak RSS of this process and of the
    largest child (LeRobot runs in its reference venv's python)."""
    import resource

    cases = [tuple(map(int, c.split("x"))) for c in args.big_cases.split(",")]
    out = {"impl": impl, "cases": {}}
    if impl == "lerobot":
        for batch, views in cases:
            out["cases"][f"b{batch}_v{views}"] = time_lerobot(Path(ckpt), preset, batch, views, args.big_repeats,
                                                              args.threads)
    else:
        eng, out["build_s"] = build_ours(Path(ckpt), preset, impl == "fast")
        for batch, views in cases:
            out["cases"][f"b{batch}_v{views}"] = time_ours(eng, f"{preset} {impl}", batch, views,
                                                           args.big_repeats, args.big_warmup)
    kb = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    out["peak_rss_gb"] = round(kb * 1024 / 1e9, 2)
    print(json.dumps(out))


def main() -> int:
    ap = argparse.ArgumentParser(description="pi0 engine benchmark")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--presets", default="tiny,pi0_2layer")
    ap.add_argument("--batches", default="1,4")
    ap.add_argument("--views", default="1,2")
    ap.add_argument("--repeats", type=int, default=3, help="timed runs per case (tiny presets)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed runs per case (tiny presets)")
    ap.add_argument("--big-repeats", type=int, default=1, help="timed runs per case at real widths")
    ap.add_argument("--big-warmup", type=int, default=1, help="untimed runs per case at real widths")
    ap.add_argument("--big-cases", default="1x1,1x2,4x1,4x2", help="batch x views cases at real widths")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="cpu: process CPU time for all three (robust on a shared machine; use --threads 1)")
    ap.add_argument("--no-lerobot", action="store_true")
    ap.add_argument("--policy", choices=("pi0", "pi05"), default="pi0",
                    help="pi05: pi0.5 weights, LeRobot 0.6.1's PI05 as the reference")
    ap.add_argument("--no-full-rss", action="store_true")
    ap.add_argument("--compile", action="store_true",
                    help="only compare the fast path eager vs torch.compile (presets x --compile-cases)")
    ap.add_argument("--compile-cases", default="1x1,1x2", help="batch x views cases for --compile")
    ap.add_argument("--profile", type=int, metavar="ROWS", default=0,
                    help="only print torch.profiler op tables (top ROWS by self CPU time, by input shape) of "
                         "the fast path's prefix and denoise and of LeRobot's sample_actions, headline case")
    ap.add_argument("--_write-checkpoint", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--_rss", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--_time-one", nargs=3, metavar=("IMPL", "PRESET", "CKPT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    global CLOCK, POLICY
    POLICY = args.policy  # before the hidden modes: the checkpoint writer reads it
    if args._write_checkpoint:
        write_checkpoint(args._write_checkpoint[0], Path(args._write_checkpoint[1]))
        return 0
    if args._rss:
        _child_rss(*args._rss)
        return 0

    import torch

    torch.set_num_threads(args.threads)
    CLOCK = time.process_time if args.clock == "cpu" else time.perf_counter
    if args._time_one:
        _time_one(*args._time_one, args)
        return 0
    if args.profile:
        profile_tables([p for p in args.presets.split(",") if p], HEADLINE[0], HEADLINE[1], args.profile, args.threads)
        return 0
    if args.compile:
        cc = [tuple(map(int, c.split("x"))) for c in args.compile_cases.split(",")]
        result = {"clock": args.clock, "threads": args.threads, "load_avg_start": os.getloadavg(),
                  "repeats": args.repeats, "warmup": args.warmup,
                  "compile": compile_comparison([p for p in args.presets.split(",") if p], cc, args.repeats, args.warmup),
                  "load_avg_end": os.getloadavg()}
        print(json.dumps(result, indent=None if args.json else 2))
        return 0
    cases = [(b, v) for b in map(int, args.batches.split(",")) for v in map(int, args.views.split(","))]
    result = {"policy": args.policy, "clock": args.clock, "machine": {"cpus": os.cpu_count(), "threads": args.threads, "load_avg_start": os.getloadavg()},
              "prompt_len": PROMPT_LEN, "headline_case": f"b{HEADLINE[0]}_v{HEADLINE[1]}", "presets": {}}
    with tempfile.TemporaryDirectory(prefix="physai_bench_") as tmp:
        tmp = Path(tmp)
        for preset in [p for p in args.presets.split(",") if p]:
            ckpt = write_checkpoint(preset, tmp / preset)
            big = not preset.startswith("tiny")
            pc = [tuple(map(int, c.split("x"))) for c in args.big_cases.split(",")] if big else cases
            reps, warm = (args.big_repeats, args.big_warmup) if big else (args.repeats, args.warmup)
            plain, plain_s = build_ours(ckpt, preset, False)
            fast, fast_s = build_ours(ckpt, preset, True)
            entry = {"repeats": reps, "warmup": warm, "plain": {"build_s": plain_s, "cases": {}},
                     "fast": {"build_s": fast_s, "cases": {}}, "lerobot": {"cases": {}}}
            # Case by case (headline first), so an interrupted run still has comparable figures.
            for batch, views in pc:
                c = f"b{batch}_v{views}"
                entry["plain"]["cases"][c] = time_ours(plain, f"{preset} plain", batch, views, reps, warm)
                entry["fast"]["cases"][c] = time_ours(fast, f"{preset} fast", batch, views, reps, warm)
                if args.no_lerobot:
                    entry["lerobot"]["error"] = "skipped (--no-lerobot)"
                else:
                    r = time_lerobot(ckpt, preset, batch, views, reps, args.threads)
                    if "error" in r:
                        entry["lerobot"]["error"] = r["error"]
                    else:
                        entry["lerobot"]["cases"][c] = r
            del plain, fast
            key = result["headline_case"]

            def headline(impl):
                c = entry[impl].get("cases", {}).get(key)
                return round(c["total_ms"], 2) if c else None

            entry["lerobot_ms"], entry["plain_ms"], entry["fast_ms"] = headline("lerobot"), headline("plain"), headline("fast")
            entry["speedup_vs_lerobot"] = (round(entry["lerobot_ms"] / entry["fast_ms"], 2)
                                           if entry["lerobot_ms"] and entry["fast_ms"] else None)
            entry["speedup_vs_plain"] = round(entry["plain_ms"] / entry["fast_ms"], 2) if entry["fast_ms"] else None
            per_case = {}
            for c in entry["fast"]["cases"]:
                f = entry["fast"]["cases"][c]
                lr = entry["lerobot"]["cases"].get(c)
                per_case[c] = {
                    "fast_vs_plain": round(entry["plain"]["cases"][c]["total_ms"] / f["total_ms"], 2),
                    "fast_vs_lerobot": round(lr["total_ms"] / f["total_ms"], 2) if lr else None,
                    "prefix_fast_vs_lerobot": round(lr["prefix_ms"] / f["prefix_ms"], 2) if lr and "prefix_ms" in lr else None,
                    "denoise_fast_vs_lerobot": round(lr["denoise_ms"] / f["denoise_ms"], 2) if lr and "denoise_ms" in lr else None,
                }
            entry["ratios"] = per_case
            result["presets"][preset] = entry
            (ckpt / "model.safetensors").unlink()
            if not args.json:
                print(f"{preset}: lerobot {entry['lerobot_ms']} ms, plain {entry['plain_ms']} ms, "
                      f"fast {entry['fast_ms']} ms, x{entry['speedup_vs_lerobot']} vs lerobot", file=sys.stderr)
        if args.no_full_rss:
            result["full_pi0_peak_rss_gb"] = None
        else:
            rss = full_pi0_peak_rss(tmp)
            result["full_pi0"] = rss
            result["full_pi0_peak_rss_gb"] = rss["engine_peak_rss_gb"]
    result["machine"]["load_avg_end"] = os.getloadavg()
    print(json.dumps(result, indent=None if args.json else 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
