#!/usr/bin/env python3
"""Time each Triton kernel of physai_ros.kernels against torch on a CUDA GPU, on pi0's shapes.

For every GEMM of realtime-vla Table 2 (bf16, 2 views by default) it reports:
  cublas_ms  plain torch.matmul (the GEMM alone, no epilogue),
  torch_ms   ops.<op>(backend="torch"): matmul plus separate epilogue kernels,
  triton_ms  ops.<op>(backend="triton"): the fused kernel with its tuned tile config,
  roofline_ms (bench/physai_bench/roofline.py, for the GPU it runs on when known), and the ratios
  triton/torch and triton/roofline,
after checking that the triton result matches torch (bf16 tolerance). Attention is timed for
the VLM prefix and one action-expert step. Times are medians of triton.testing.do_bench.

    python bench/kernels.py [--views 2] [--json] [--no-autotune]

Needs a CUDA GPU: on a machine without one it explains that and exits with status 2.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass
from typing import Callable, List, Optional

from physai_bench import roofline

PI0_HEAD_DIM = 256


@dataclass
class Case:
    op: str
    label: str
    torch_fn: Callable
    triton_fn: Callable
    cublas_fn: Optional[Callable] = None
    row: Optional[roofline.Row] = None


def gemm_case(row: roofline.Row, device, dtype, head_dim: int = PI0_HEAD_DIM) -> Case:
    """One Table 2 GEMM with its fused scalar ops, as torch and triton calls of kernels.ops."""
    import torch
    from physai_ros.kernels import ops

    n_tok, k, m = row.n, row.k, row.m
    x = torch.randn(n_tok, k, device=device, dtype=dtype)
    w = torch.randn(m, k, device=device, dtype=dtype) * k ** -0.5
    cublas = lambda: x @ w.t()  # noqa: E731
    if "gate" in row.ops:
        s = ops.rms_row_scale(x)
        return Case("gated_ffn", row.label,
                    lambda: ops.gated_ffn(x, w, row_scale=s, backend="torch"),
                    lambda: ops.gated_ffn(x, w, row_scale=s, backend="triton"), cublas, row)
    if "rope" in row.ops:
        heads = m // head_dim - 2  # pi0: one k and one v head (8:1 grouped-query)
        x3 = x[None]
        cos = torch.randn(1, n_tok, head_dim, device=device)
        sin = torch.randn(1, n_tok, head_dim, device=device)
        s = ops.rms_row_scale(x3)
        return Case("qkv_rope", row.label,
                    lambda: ops.qkv_rope(x3, w, cos, sin, heads, 1, head_dim, s, backend="torch"),
                    lambda: ops.qkv_rope(x3, w, cos, sin, heads, 1, head_dim, s,
                                         backend="triton"), cublas, row)
    kw = dict(bias=torch.randn(m, device=device, dtype=dtype) if "bias" in row.ops else None,
              residual=(torch.randn(n_tok, m, device=device, dtype=dtype)
                        if "res" in row.ops else None),
              activation=("gelu_tanh" if "gelu" in row.ops else
                          "silu" if "silu" in row.ops else None))
    return Case("linear", row.label, lambda: ops.linear(x, w, backend="torch", **kw),
                lambda: ops.linear(x, w, backend="triton", **kw), cublas, row)


def attention_cases(views: int, device, dtype, tokens_per_view: int = roofline.TOKENS_PER_VIEW,
                    expert_tokens: int = roofline.EXPERT_TOKENS,
                    head_dim: int = PI0_HEAD_DIM, heads: int = 8) -> List[Case]:
    import torch
    from physai_ros.kernels import ops

    p = tokens_per_view * views
    cases = []
    for name, lq, lk in (("vlm_prefix", p, p), ("expert_step", expert_tokens, p + expert_tokens)):
        q = torch.randn(1, lq, heads, head_dim, device=device, dtype=dtype)
        k = torch.randn(1, lk, 1, head_dim, device=device, dtype=dtype)
        v = torch.randn(1, lk, 1, head_dim, device=device, dtype=dtype)
        mask = torch.ones(1, lq, lk, device=device, dtype=torch.bool)
        cases.append(Case(
            "attention", f"{name} {heads}x{lq}x{lk}x{head_dim}",
            lambda q=q, k=k, v=v, mask=mask: ops.attention(q, k, v, mask, head_dim ** -0.5),
            lambda q=q, k=k, v=v, mask=mask: ops.attention(q, k, v, mask, head_dim ** -0.5,
                                                          backend="triton")))
    return cases


def check_case(case: Case) -> None:
    """The triton result must match torch before its time means anything."""
    import torch

    got, want = case.triton_fn(), case.torch_fn()
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    for a, b in zip(got, want):
        scale = max(1.0, float(b.float().abs().max()))
        torch.testing.assert_close(a.float(), b.float(), rtol=2e-2, atol=3e-2 * scale,
                                   msg=lambda m: f"{case.label}: {m}")


def _refuse(as_json: bool) -> int:
    msg = ("bench/kernels.py times Triton kernels on a CUDA GPU, and torch sees none here. "
           "The kernels' correctness on CPU is covered by `pytest test/kernels` (Triton "
           "interpreter); run this bench on a machine with an NVIDIA GPU.")
    print(json.dumps({"status": "no_cuda", "message": msg}) if as_json else msg)
    return 2


def _this_gpu(name: str) -> Optional[roofline.Gpu]:
    """Roofline parameters of the GPU the bench runs on, or None when roofline.py lacks them."""
    name = name.lower()
    for key, needle in (("h200", "h200"), ("h100_sxm", "h100"), ("rtx4090", "4090")):
        if needle in name:
            return roofline.GPUS[key]
    return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--views", type=int, default=2, choices=(1, 2, 3))
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--no-autotune", action="store_true",
                    help="use the tile table's entries without timing candidates")
    args = ap.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET") == "1":
        print("unset TRITON_INTERPRET: the bench times compiled kernels", file=sys.stderr)
        return 2
    import torch

    if not torch.cuda.is_available():
        return _refuse(args.json)
    if args.no_autotune:
        os.environ["PHYSAI_KERNELS_AUTOTUNE"] = "0"
    return _run(args)


def _run(args) -> int:
    import torch
    import triton.testing
    from physai_ros.kernels import tuning

    torch.manual_seed(0)
    gpu_name = torch.cuda.get_device_name()
    gpu = _this_gpu(gpu_name)
    timer = lambda fn: triton.testing.do_bench(fn, warmup=10, rep=50)  # noqa: E731
    cases = [gemm_case(r, "cuda", torch.bfloat16) for r in roofline.pi0_rows(args.views)
             if not r.attention_heads]
    cases += attention_cases(args.views, "cuda", torch.bfloat16)
    results = []
    for case in cases:
        check_case(case)
        e = {"op": case.op, "shape": case.label, "torch_ms": timer(case.torch_fn),
             "triton_ms": timer(case.triton_fn)}
        e["cublas_ms"] = timer(case.cublas_fn) if case.cublas_fn else float("nan")
        e["triton_over_torch"] = e["triton_ms"] / e["torch_ms"]
        e["roofline_ms"] = case.row.seconds(gpu) * 1e3 if (gpu and case.row) else float("nan")
        e["triton_over_roofline"] = e["triton_ms"] / e["roofline_ms"]
        results.append(e)
    out = {"gpu": gpu_name, "views": args.views, "dtype": "bf16", "results": results,
           "tile_configs": {str(k): str(v) for k, v in tuning.chosen().items()}}
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    print(f"{gpu_name}, {args.views} view(s), bf16; per-call ms (median of do_bench)")
    print(f"{'op':<10} {'shape':<28} {'cublas':>8} {'torch':>8} {'triton':>8} {'tr/torch':>8} "
          f"{'roofline':>9}")
    for e in results:
        print(f"{e['op']:<10} {e['shape']:<28} {e['cublas_ms']:8.4f} {e['torch_ms']:8.4f} "
              f"{e['triton_ms']:8.4f} {e['triton_over_torch']:8.2f} {e['roofline_ms']:9.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
