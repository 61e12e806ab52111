"""Compile the kernels for NVIDIA GPUs without a GPU: Triton's full pipeline (TTIR -> TTGIR ->
LLVM -> PTX -> ptxas cubin) runs on the CPU, so a machine with no driver can still prove that
each kernel compiles for sm_80/sm_89/sm_90 and that each tile config fits in shared memory.
Nothing is executed; timing needs a real GPU (bench/kernels.py).

The Triton interpreter replaces @triton.jit functions at import time, so this must run in a
process without TRITON_INTERPRET:

    env -u TRITON_INTERPRET .venv/bin/python -m physai_ros.kernels.aot [--json]

Launch-time specialization is reproduced the way the JIT does it for contiguous pi0 tensors:
unit strides become constants, pointers and every other integer are marked 16-divisible (true
of pi0's sizes except K=588 of the patch embedding). That divisibility is what lets Triton
vectorize the K-masked loads and pipeline them over `num_stages` shared-memory buffers, so the
reported shared memory is the pipelined footprint.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from typing import Dict, Iterable, List, Set

from physai_ros.kernels.tiles import TABLES, TileConfig

# Shared memory per block, opt-in maximum (CUDA programming guide, compute capabilities).
SMEM_LIMIT = {80: 163 * 1024, 89: 99 * 1024, 90: 227 * 1024}
ARCH_CC = {"sm_80": 80, "sm_89": 89, "sm_90": 90}


@dataclass
class CompileResult:
    kernel: str
    cc: int
    config: str
    shared_bytes: int
    fits: bool
    seconds: float
    error: str = ""


def _signature(fn, pointers: Dict[str, str], floats: Set[str], constexprs: Dict[str, object]):
    sig, attrs = {}, {}
    for i, name in enumerate(fn.arg_names):
        if name in constexprs:
            sig[name] = "constexpr"
        elif name in pointers:
            sig[name] = pointers[name]
            attrs[(i,)] = [["tt.divisibility", 16]]
        elif name in floats:
            sig[name] = "fp32"
        else:
            sig[name] = "i32"
            attrs[(i,)] = [["tt.divisibility", 16]]
    return sig, attrs


def compile_kernel(fn, cc: int, pointers: Dict[str, str], constexprs: Dict[str, object],
                   num_warps: int, num_stages: int, floats: Iterable[str] = ()) -> int:
    """Compile `fn` for compute capability `cc`; returns its static shared memory in bytes."""
    import triton
    from triton.backends.compiler import GPUTarget

    sig, attrs = _signature(fn, pointers, set(floats), constexprs)
    src = triton.compiler.ASTSource(fn=fn, signature=sig, constexprs=constexprs, attrs=attrs)
    compiled = triton.compile(src, target=GPUTarget("cuda", cc, 32),
                              options={"num_warps": num_warps, "num_stages": num_stages})
    return int(compiled.metadata.shared)


def _gemm_pointers(names: Iterable[str], dtype: str) -> Dict[str, str]:
    return {n: ("*fp32" if n in ("part_ptr", "scale_ptr") else f"*{dtype}") for n in names}


def _precision(dtype: str) -> str:
    import torch

    from physai_ros.kernels import _runtime

    return _runtime.dot_precision({"bf16": torch.bfloat16, "fp32": torch.float32}[dtype])


def linear_jobs(cfg: TileConfig, act: int = 1, dtype: str = "bf16"):
    from physai_ros.kernels import gemm

    has_tail = cfg.split_from_n is not None
    yield ("linear", gemm._linear_kernel,
           _gemm_pointers(["x_ptr", "w_ptr", "y_ptr", "part_ptr", "scale_ptr", "bias_ptr",
                           "res_ptr"], dtype),
           dict(stride_xk=1, stride_wk=1, stride_yn=1, stride_rn=1,
                HAS_SCALE=True, HAS_BIAS=True, ACT=act, HAS_RES=True, UPCAST=False,
                HAS_TAIL=has_tail, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
                BLOCK_K=cfg.block_k, TAIL_BM=cfg.tail_block_m, TAIL_BN=cfg.tail_block_n,
                SPLIT_K=cfg.split_k if has_tail else 1, DOT_PRECISION=_precision(dtype)), cfg, ())
    if has_tail:
        yield ("split_reduce", gemm._split_reduce_kernel,
               _gemm_pointers(["part_ptr", "y_ptr", "scale_ptr", "bias_ptr", "res_ptr"], dtype),
               dict(stride_yn=1, stride_rn=1, HAS_SCALE=True, HAS_BIAS=True, ACT=act,
                    HAS_RES=True, SPLIT_K=cfg.split_k, BLOCK_M=cfg.tail_block_m,
                    BLOCK_N=cfg.tail_block_n), TileConfig(cfg.tail_block_m, cfg.tail_block_n, 16,
                                                          num_warps=4, num_stages=1), ())


def gate_jobs(cfg: TileConfig, dtype: str = "bf16"):
    from physai_ros.kernels import gemm

    yield ("gated_ffn", gemm._gated_kernel,
           _gemm_pointers(["x_ptr", "w_ptr", "y_ptr", "scale_ptr"], dtype),
           dict(stride_xk=1, stride_wk=1, stride_yn=1, HAS_SCALE=True, ACT=1, UPCAST=False,
                BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k,
                DOT_PRECISION=_precision(dtype)), cfg, ())


def qkv_jobs(cfg: TileConfig, dtype: str = "bf16"):
    from physai_ros.kernels import qkv_rope

    yield ("qkv_rope", qkv_rope._qkv_rope_kernel,
           {"x_ptr": f"*{dtype}", "w_ptr": f"*{dtype}", "out_ptr": f"*{dtype}",
            "scale_ptr": "*fp32", "cos_ptr": "*fp32", "sin_ptr": "*fp32"},
           dict(stride_xk=1, stride_wk=1, stride_cd=1, stride_sd=1, HAS_SCALE=True,
                UPCAST=False, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k,
                DOT_PRECISION=_precision(dtype)),
           cfg, ())


def attention_jobs(head_dim: int = 256, dtype: str = "bf16"):
    import triton

    from physai_ros.kernels import attention

    cfg = attention.cuda_config(head_dim, 4 if dtype == "fp32" else 2)
    yield ("attention", attention._attention_kernel,
           {"q_ptr": f"*{dtype}", "k_ptr": f"*{dtype}", "v_ptr": f"*{dtype}", "mask_ptr": "*u8",
            "o_ptr": f"*{dtype}"},
           dict(sqd=1, skd=1, svd=1, smn=1, sod=1, UPCAST=False, BLOCK_M=cfg.block_m,
                BLOCK_N=cfg.block_n, BLOCK_D=triton.next_power_of_2(head_dim),
                DOT_PRECISION=_precision(dtype)),
           TileConfig(cfg.block_m, cfg.block_n, 16, num_warps=cfg.num_warps,
                      num_stages=cfg.num_stages), ("scale",))


def row_scale_jobs():
    from physai_ros.kernels import gemm

    yield ("row_scale", gemm._row_scale_kernel, {"x_ptr": "*bf16", "out_ptr": "*fp32"},
           dict(stride_xk=1, BLOCK_M=4, BLOCK_K=1024), TileConfig(4, 16, 1024, num_warps=4,
                                                                   num_stages=1), ("eps",))


def jobs_for_arch(arch: str, dtype: str = "bf16"):
    """Every distinct kernel/config pair the tile table of `arch` would launch for pi0 with
    `dtype` tiles. In fp32 a GEMM entry sized for bf16 may not fit: the launch then falls back to
    the next candidate (tuning.first_that_runs); attention has no fallback, so it must fit."""
    seen = set()
    for (op, _, _, _), cfg in TABLES[arch].items():
        gen = {"linear": linear_jobs, "gate": gate_jobs, "qkv": qkv_jobs}[op](cfg, dtype=dtype)
        for job in gen:
            key = (job[0], job[4])
            if key not in seen:
                seen.add(key)
                yield job
    yield from attention_jobs(256, dtype)
    yield from attention_jobs(72, dtype)  # the vision tower's heads
    yield from row_scale_jobs()


def run(archs: Iterable[str], quick: bool = False, dtype: str = "bf16",
        kernels: Iterable[str] = ()) -> List[CompileResult]:
    """Compile the jobs of each arch; `quick` keeps the first job of each kernel kind, `kernels`
    (when given) only those kinds."""
    only = set(kernels)
    if os.environ.get("TRITON_INTERPRET") == "1":
        raise RuntimeError("unset TRITON_INTERPRET: the interpreter replaces the kernels")
    results = []
    for arch in archs:
        cc = ARCH_CC[arch]
        kinds = set()
        for name, fn, pointers, constexprs, cfg, floats in jobs_for_arch(arch, dtype):
            if (quick and name in kinds) or (only and name not in only):
                continue
            kinds.add(name)
            t0 = time.perf_counter()
            label = (f"{cfg.block_m}x{cfg.block_n}x{cfg.block_k} w{cfg.num_warps} "
                     f"s{cfg.num_stages}" + (f" split{cfg.split_k}@{cfg.split_from_n}"
                                             if cfg.split_from_n is not None else ""))
            try:
                shared = compile_kernel(fn, cc, pointers, constexprs, cfg.num_warps,
                                        cfg.num_stages, floats)
                results.append(CompileResult(name, cc, label + f" {dtype}", shared,
                                             shared <= SMEM_LIMIT[cc],
                                             time.perf_counter() - t0))
            except Exception as exc:  # reported per kernel, the sweep goes on
                results.append(CompileResult(name, cc, label + f" {dtype}", -1, False,
                                             time.perf_counter() - t0,
                                             f"{type(exc).__name__}: {exc}"))
    return results


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="compile every tile-table kernel for NVIDIA GPUs")
    ap.add_argument("--arch", action="append", choices=sorted(TABLES), help="default: all")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--quick", action="store_true", help="one config per kernel kind")
    ap.add_argument("--dtype", choices=("bf16", "fp32"), default="bf16", help="tile element type")
    ap.add_argument("--kernel", action="append", default=[],
                    help="only this kernel kind (attention, linear, ...); repeatable")
    args = ap.parse_args(argv)
    results = run(args.arch or sorted(TABLES), quick=args.quick, dtype=args.dtype,
                  kernels=args.kernel)
    if args.json:
        print(json.dumps([asdict(r) for r in results], indent=1))
    else:
        for r in results:
            status = "FAIL" if r.error else ("ok" if r.fits else "TOO MUCH SMEM")
            print(f"sm_{r.cc} {r.kernel:<13} {r.config:<28} smem {r.shared_bytes:>7} B  "
                  f"{r.seconds:5.1f} s  {status} {r.error[:200]}")
    bad = [r for r in results if r.error or not r.fits]
    print(f"{len(results) - len(bad)}/{len(results)} kernels compiled and fit", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
