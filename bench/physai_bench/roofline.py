#!/usr/bin/env python3
"""Roofline lower bound of pi0's GEMMs (realtime-vla §5.1, Table 2).

For one bf16 GEMM of N x K x M (N tokens, K inputs, M outputs) the bound is
    t = max(2*K*M / bandwidth, N*K*M / mac_rate):
only the K x M weight is counted against memory (activations are assumed to sit in L2), and the
MACs against the tensor cores. The softmax-attention rows of the VLM have no weights: they cost
2*H*L^2*D MACs (QK^T and PV) and no HBM traffic. Summing the parts over the vision tower, the
VLM (17 attention/FFN layers: the last layer only feeds its K/V to the expert) and 10 action
expert steps gives the bound per inference.

    python bench/physai_bench/roofline.py            # table for the RTX 4090, H100 SXM and H200, 1-3 views
    python bench/physai_bench/roofline.py --json     # machine-readable, with rtx4090_ms keyed "1", "2", "3"
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from typing import Dict, List


@dataclass(frozen=True)
class Gpu:
    name: str
    bandwidth: float  # bytes/s of HBM/GDDR
    macs: float  # dense bf16 multiply-accumulates/s with fp32 accumulation


# RTX 4090: the paper's figures (1.01 TB/s; 91.4 TMAC/s at the observed 2.79 GHz boost).
# H100 SXM5 and H200 SXM: NVIDIA's data-sheet bandwidth and dense bf16 989.4 TFLOP/s (= MAC/s x2).
GPUS = {
    "rtx4090": Gpu("RTX 4090", 1.01e12, 91.4e12),
    "h100_sxm": Gpu("H100 SXM", 3.35e12, 989.4e12 / 2),
    "h200": Gpu("H200 SXM", 4.8e12, 989.4e12 / 2),
}

# The paper's measured kernel-synchronization overhead on the RTX 4090 with a software barrier
# (§5.2, Table 3); not known for other GPUs.
RTX4090_SYNC_MS = 0.86


@dataclass(frozen=True)
class Row:
    part: str  # vision | vlm | expert
    times: int
    n: int
    k: int
    m: int
    ops: str
    attention_heads: int = 0  # > 0: weightless attention row, n = k = sequence, m = head dim

    @property
    def label(self) -> str:
        if self.attention_heads:
            return f"attn {self.attention_heads}x{self.n}^2x{self.m}"
        return f"{self.n}x{self.k}x{self.m}"

    def seconds(self, gpu: Gpu) -> float:
        if self.attention_heads:
            return 2 * self.attention_heads * self.n * self.n * self.m / gpu.macs
        return max(2 * self.k * self.m / gpu.bandwidth, self.n * self.k * self.m / gpu.macs)


TOKENS_PER_VIEW = 256  # SigLIP 224 px / 14 = 16 x 16 patches
EXPERT_TOKENS = 64  # 1 state token + 63 action tokens, as in Table 2
STEPS = 10


def pi0_rows(views: int, prompt_tokens: int = 0) -> List[Row]:
    """Table 2's GEMMs, generalized to any number of views (Table 2 itself is views=2)."""
    img = TOKENS_PER_VIEW * views
    p = img + prompt_tokens
    a = EXPERT_TOKENS
    act = a - 1
    layers = 18
    return [
        Row("vision", 1, img, 588, 1152, "img2col, bias"),
        Row("vision", 27, img, 1152, 3456, "ln, bias"),
        Row("vision", 27, img, img, 72, "softmax", attention_heads=16),
        Row("vision", 27, img, 1152, 1152, "bias, res"),
        Row("vision", 27, img, 1152, 4304, "ln, gelu"),
        Row("vision", 27, img, 4304, 1152, "bias, res"),
        Row("vlm", 1, img, 1152, 2048, "ln, bias"),
        Row("vlm", layers, p, 2048, 2560, "rms, rope"),
        Row("vlm", layers - 1, p, p, 256, "softmax", attention_heads=8),
        Row("vlm", layers - 1, p, 2048, 2048, "res"),
        Row("vlm", layers - 1, p, 2048, 32768, "rms, gate"),
        Row("vlm", layers - 1, p, 16384, 2048, "res"),
        Row("expert", 1, 1, 32, 1024, "bias"),
        Row("expert", STEPS, act, 32, 1024, "bias, silu"),
        Row("expert", STEPS, act, 1024, 1024, "bias"),
        Row("expert", STEPS * layers, a, 1024, 2560, "rms, rope"),
        Row("expert", STEPS * layers, 8 * a, 256, p + a, "softmax"),
        Row("expert", STEPS * layers, 8 * a, p + a, 256, ""),
        Row("expert", STEPS * layers, a, 2048, 1024, "res"),
        Row("expert", STEPS * layers, a, 1024, 8192, "rms, gate"),
        Row("expert", STEPS * layers, a, 4096, 1024, "res"),
        Row("expert", STEPS, act, 1024, 32, "res"),
    ]


def row_ms(row: Row, gpu: Gpu) -> float:
    return row.times * row.seconds(gpu) * 1e3


def total_ms(gpu: Gpu, views: int) -> Dict[str, float]:
    parts: Dict[str, float] = {"vision": 0.0, "vlm": 0.0, "expert": 0.0}
    for row in pi0_rows(views):
        parts[row.part] += row_ms(row, gpu)
    parts["total"] = sum(parts.values())
    return parts


def report() -> dict:
    out: dict = {"formula": "max(2*K*M/bandwidth, N*K*M/mac_rate) per GEMM, summed",
                 "gpus": {k: asdict(g) for k, g in GPUS.items()}}
    for key, gpu in GPUS.items():
        out[f"{key}_ms"] = {str(v): round(total_ms(gpu, v)["total"], 3) for v in (1, 2, 3)}
        out[f"{key}_parts_ms"] = {str(v): {p: round(t, 3) for p, t in total_ms(gpu, v).items()}
                                  for v in (1, 2, 3)}
    out["rtx4090_with_sync_ms"] = {v: round(t + RTX4090_SYNC_MS, 3)
                                   for v, t in out["rtx4090_ms"].items()}
    out["table2_rtx4090_2views"] = [
        {"times": r.times, "shape": r.label, "ops": r.ops,
         "roofline_ms": round(row_ms(r, GPUS["rtx4090"]), 3)}
        for r in pi0_rows(2)]
    return out


def _print_table(rep: dict) -> None:
    print("Table 2 rows, RTX 4090, 2 views (ms):")
    for r in rep["table2_rtx4090_2views"]:
        print(f"  {r['times']:>4}  {r['shape']:<22} {r['ops']:<14} {r['roofline_ms']:7.3f}")
    print("\nRoofline lower bound per inference (ms):")
    print(f"  {'GPU':<10} {'1 view':>8} {'2 views':>8} {'3 views':>8}")
    for key, gpu in GPUS.items():
        ms = rep[f"{key}_ms"]
        print(f"  {gpu.name:<10} {ms['1']:8.2f} {ms['2']:8.2f} {ms['3']:8.2f}")
    s = rep["rtx4090_with_sync_ms"]
    print(f"  {'4090+sync':<10} {s['1']:8.2f} {s['2']:8.2f} {s['3']:8.2f}"
          f"   (+{RTX4090_SYNC_MS} ms, §5.2)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = ap.parse_args(argv)
    rep = report()
    if args.json:
        json.dump(rep, sys.stdout, indent=1)
        print()
    else:
        _print_table(rep)
    return 0


if __name__ == "__main__":
    sys.exit(main())
