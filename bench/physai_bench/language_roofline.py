"""A PREDICTED GPU figure for bench/language_stream.py's three modes: bench/physai_bench/roofline.py's model
(each GEMM costs max(weight bytes / bandwidth, MACs / MAC rate), bf16; realtime-vla §5.1) applied
to the full pi0 (PaliGemma gemma_2b + gemma_300m expert; pi0.5 has the same sizes) for the same
workload. A lower bound: no kernel launches, no scheduling, no re-batching copies; never a
measurement.

A decode step at batch B reads the VLM's 18 layers and the tied LM head (257152 x 2048) once for
the whole batch, and each request's K/V (context L): B * L * 18 layers * (K, V) * 1 KV head * 256
* 2 bytes. That weight read shared by the batch is what cross-frame batching buys on a GPU.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Dict, List

from physai_bench import roofline
from physai_bench.roofline import GPUS, Row, row_ms

LAYERS, WIDTH, MLP, HEADS, HEAD_DIM, VOCAB = 18, 2048, 16384, 8, 256, 257152
KV_BYTES_PER_TOKEN = LAYERS * 2 * 1 * HEAD_DIM * 2  # K and V, one KV head, bf16


def _per_robot(row: Row) -> bool:
    """Rows whose 'weight' is one robot's own sequence (attention over its K/V): R robots run
    them R times; every other row is one GEMM over R times the tokens."""
    return bool(row.attention_heads) or (row.part == "expert" and row.ops in ("softmax", ""))


def frame_parts_ms(gpu, robots: int, views: int, prompt: int) -> Dict[str, float]:
    """Prefill (vision + VLM) and actions (10 expert steps) for `robots` observations."""
    parts = {"prefill": 0.0, "actions": 0.0}
    for row in roofline.pi0_rows(views, prompt):
        row = dataclasses.replace(row, times=row.times * robots) if _per_robot(row) else \
            dataclasses.replace(row, n=row.n * robots)
        parts["actions" if row.part == "expert" else "prefill"] += row_ms(row, gpu)
    return parts


def decode_step_ms(gpu, batch: int, context: float) -> float:
    rows = [Row("decode", LAYERS, batch, WIDTH, (HEADS + 2) * HEAD_DIM, "qkv"),
            Row("decode", LAYERS, batch, HEADS * HEAD_DIM, WIDTH, "o"),
            Row("decode", LAYERS, batch, WIDTH, 2 * MLP, "gate, up"),
            Row("decode", LAYERS, batch, MLP, WIDTH, "down"),
            Row("decode", 1, batch, WIDTH, VOCAB, "lm head")]
    kv_ms = batch * context * KV_BYTES_PER_TOKEN / gpu.bandwidth * 1e3
    return sum(row_ms(r, gpu) for r in rows) + kv_ms


def predict_cell(gpu, robots: int, budget: int, k: int, views: int, prompt: int) -> Dict[str, dict]:
    p = frame_parts_ms(gpu, robots, views, prompt)
    ctx = views * roofline.TOKENS_PER_VIEW + prompt + budget / 2  # mean context over a text
    depth = math.ceil(budget / k)
    frame_ms = {
        "isolated": 2 * p["prefill"] + p["actions"] + robots * budget * decode_step_ms(gpu, 1, ctx),
        "shared": p["prefill"] + p["actions"] + budget * decode_step_ms(gpu, robots, ctx),
        "continuous": p["prefill"] + p["actions"] + k * decode_step_ms(gpu, robots * depth, ctx),
    }
    return {m: {"frame_ms": round(t, 2), "frames_per_s": round(1e3 / t, 1),
                "tokens_per_s": round(robots * budget / t * 1e3, 0)} for m, t in frame_ms.items()}


def predict(robots: List[int], budgets: List[int], k: int, views: int, prompt: int, gpu: str = "h100_sxm") -> dict:
    g = GPUS[gpu]
    return {"label": f"roofline lower bound, full pi0 (gemma_2b, 18 layers, vocab {VOCAB}) bf16 on {g.name}, "
                     f"{views} views x {roofline.TOKENS_PER_VIEW} + {prompt} prompt tokens, k={k}, "
                     "no launch/scheduling overhead",
            "gpu": gpu,
            "rows": [{"robots": r, "budget": n, "modes": predict_cell(g, r, n, k, views, prompt)}
                     for r in robots for n in budgets]}
