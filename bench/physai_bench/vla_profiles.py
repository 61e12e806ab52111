#!/usr/bin/env python3
"""Latency-vs-batch profiles of pi0 / pi0.5 on an edge RTX A6000 and a cloud A100, derived from
bench/physai_bench/roofline.py's GEMM model (realtime-vla §5.1) and calibrated on realtime-vla's measurements.

Why derived rather than measured: no A6000 (the Kairos testbed's edge GPU, §5.1) is available
here, and bench/scheduler.py needs a latency-vs-batch curve per model to study scheduling. The
numbers written into bench/workloads/libero_a6000.yaml come from this script:

    .venv/bin/python bench/physai_bench/vla_profiles.py            # table
    .venv/bin/python bench/physai_bench/vla_profiles.py --yaml     # the profile lines for the workload file

Model (every step is an assumption, stated):
1. Roofline R_gpu(b) of one batch of b requests: bench/physai_bench/roofline.py's rows for pi0 with V views,
   the action expert resized to the model's chunk (pi0: 63 actions + state token; pi0.5 on
   LIBERO: openpi's pi05_libero uses action_horizon=10), weights read once per batch, tokens
   (compute) x b; per-request attention and KV-cache rows x b.
2. Achieved latency = c + k x R_gpu(b). c and k are a least-squares fit of realtime-vla Table 1's
   openpi/JAX row (43.8 / 53.7 / 67.6 ms for 1 / 2 / 3 views, pi0, RTX 4090) against the 4090
   roofline for 1 / 2 / 3 views: c ~ 22 ms of fixed per-call overhead (launches, host work),
   k ~ 1.7 (kernel efficiency). The same c and k are applied to the other GPUs and to batches > 1
   (untested: larger batches usually run kernels more efficiently, so this errs slow).
3. GPU figures: A6000 768 GB/s, 154.8 TFLOP/s dense bf16 (77.4 TMAC/s); A100 80GB SXM
   2.04 TB/s, 312 TFLOP/s dense bf16 (data-sheet numbers).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from physai_bench import roofline

GPUS = {
    "rtx4090": roofline.GPUS["rtx4090"],
    "a6000": roofline.Gpu("RTX A6000", 768e9, 154.8e12 / 2),
    "a100": roofline.Gpu("A100 80GB SXM", 2.039e12, 312e12 / 2),
}
# realtime-vla Table 1, openpi/jax row: pi0, RTX 4090, empty prompt, 63-action chunk.
OPENPI_4090_MS = {1: 43.8, 2: 53.7, 3: 67.6}
MODELS = {  # views, prompt tokens, expert tokens (actions + state token where the model has one)
    "pi0": {"views": 2, "prompt": 48, "expert_tokens": 51},     # chunk 50 (openpi Pi0Config)
    "pi05": {"views": 2, "prompt": 48, "expert_tokens": 10},    # chunk 10 (openpi pi05_libero)
}
BATCHES = (1, 2, 4, 8, 16, 32)


def rows(views: int, prompt: int, expert_tokens: int, batch: int) -> list:
    """roofline.pi0_rows with the expert resized and a batch of `batch` requests."""
    base = roofline.pi0_rows(views, prompt)
    a0 = roofline.EXPERT_TOKENS
    p = roofline.TOKENS_PER_VIEW * views + prompt
    remap = {a0: expert_tokens, a0 - 1: max(1, expert_tokens - 1), 8 * a0: 8 * expert_tokens,
             p + a0: p + expert_tokens}
    out = []
    for r in base:
        if r.part == "expert":
            r = dataclasses.replace(r, n=remap.get(r.n, r.n), k=remap.get(r.k, r.k), m=remap.get(r.m, r.m))
        per_request = r.attention_heads or (r.part == "expert" and r.ops in ("softmax", ""))
        if per_request:   # attention / KV-cache rows: each request has its own
            out.append(dataclasses.replace(r, times=r.times * batch))
        else:             # weight GEMMs: weights once, tokens x batch
            out.append(dataclasses.replace(r, n=r.n * batch))
    return out


def roofline_ms(gpu, views: int, prompt: int = 0, expert_tokens: int = roofline.EXPERT_TOKENS,
                batch: int = 1) -> float:
    return sum(roofline.row_ms(r, gpu) for r in rows(views, prompt, expert_tokens, batch))


def calibration() -> tuple[float, float]:
    """(c_ms, k): least-squares line through (4090 roofline, openpi measured) for 1-3 views."""
    xs = [roofline_ms(GPUS["rtx4090"], v) for v in OPENPI_4090_MS]
    ys = list(OPENPI_4090_MS.values())
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    k = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return my - k * mx, k


def profile(model: str, gpu: str, batches=BATCHES) -> list[list[float]]:
    c, k = calibration()
    m = MODELS[model]
    return [[b, round((c + k * roofline_ms(GPUS[gpu], m["views"], m["prompt"], m["expert_tokens"], b)) / 1e3, 4)]
            for b in batches]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--yaml", action="store_true", help="print profile lines for the workload file")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    c, k = calibration()
    out = {"calibration": {"c_ms": round(c, 2), "k": round(k, 3)},
           "profiles_s": {f"{m}/{g}": profile(m, g) for m in MODELS for g in ("a6000", "a100")}}
    if args.json:
        print(json.dumps(out, indent=1))
    elif args.yaml:
        for key, prof in out["profiles_s"].items():
            print(f"# {key}\nprofile: {json.dumps(prof)}")
    else:
        print(f"calibration: latency = {c:.1f} ms + {k:.2f} x roofline")
        for key, prof in out["profiles_s"].items():
            print(f"{key:12s}", "  ".join(f"b{b}: {s * 1e3:6.1f} ms" for b, s in prof))
    return 0


if __name__ == "__main__":
    sys.exit(main())
