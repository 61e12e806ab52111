"""Fused QKV projection with rotary embedding in the epilogue (realtime-vla §3.2, §4.4).

W_qkv stacks the q, k and v heads: [(H + 2*KVH) * D, K]. A program computes the first and the
second half of one head's columns side by side (two accumulators over the same input tile), so
the rotate-half RoPE of Gemma/pi0,
    out[:D/2] = x1*cos[:D/2] - x2*sin[:D/2],   out[D/2:] = x2*cos[D/2:] + x1*sin[D/2:],
is applied in registers before the single store. v heads skip the rotation. The output is one
[M, H + 2*KVH, D] buffer; q, k and v are views of it.
"""
from __future__ import annotations

from typing import Optional

import torch
import triton
import triton.language as tl

from physai_ros.kernels import _runtime, tuning
from physai_ros.kernels.gemm import _load_tile_pair
from physai_ros.kernels.tiles import TileConfig


@triton.jit
def _qkv_rope_kernel(x_ptr, w_ptr, out_ptr, scale_ptr, cos_ptr, sin_ptr,
                     M, K, HALF, ROT_HEADS, TILES_PER_HEAD,
                     stride_xm, stride_xk, stride_wn, stride_wk, stride_om, stride_oh,
                     stride_cm, stride_cd, stride_sm, stride_sd,
                     HAS_SCALE: tl.constexpr, UPCAST: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                     DOT_PRECISION: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    head = pid_n // TILES_PER_HEAD
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_j = (pid_n % TILES_PER_HEAD) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    w_head = w_ptr + head * 2 * HALF * stride_wn
    acc1 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc2 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + offs_k
        a, w1 = _load_tile_pair(x_ptr, w_head, offs_m, offs_j, kk, M, HALF, K,
                                stride_xm, stride_xk, stride_wn, stride_wk, UPCAST)
        w2 = tl.load(w_head + (HALF + offs_j[None, :]) * stride_wn + kk[:, None] * stride_wk,
                     mask=(offs_j[None, :] < HALF) & (kk[:, None] < K), other=0.0)
        if UPCAST:
            w2 = w2.to(tl.float32)
        acc1 = tl.dot(a, w1, acc1, input_precision=DOT_PRECISION)
        acc2 = tl.dot(a, w2, acc2, input_precision=DOT_PRECISION)
    row_ok = offs_m < M
    mask = row_ok[:, None] & (offs_j[None, :] < HALF)
    if HAS_SCALE:
        s = tl.load(scale_ptr + offs_m, mask=row_ok, other=0.0).to(tl.float32)
        acc1 = acc1 * s[:, None]
        acc2 = acc2 * s[:, None]
    out1 = acc1
    out2 = acc2
    if head < ROT_HEADS:
        c_off = offs_m[:, None] * stride_cm + offs_j[None, :] * stride_cd
        s_off = offs_m[:, None] * stride_sm + offs_j[None, :] * stride_sd
        c1 = tl.load(cos_ptr + c_off, mask=mask, other=0.0).to(tl.float32)
        c2 = tl.load(cos_ptr + c_off + HALF * stride_cd, mask=mask, other=0.0).to(tl.float32)
        s1 = tl.load(sin_ptr + s_off, mask=mask, other=0.0).to(tl.float32)
        s2 = tl.load(sin_ptr + s_off + HALF * stride_sd, mask=mask, other=0.0).to(tl.float32)
        out1 = acc1 * c1 - acc2 * s1
        out2 = acc2 * c2 + acc1 * s2
    o = out_ptr + offs_m[:, None] * stride_om + head * stride_oh + offs_j[None, :]
    tl.store(o, out1.to(out_ptr.dtype.element_ty), mask=mask)
    tl.store(o + HALF, out2.to(out_ptr.dtype.element_ty), mask=mask)


def qkv_rope_2d(x2: torch.Tensor, w_qkv: torch.Tensor, cos2: torch.Tensor, sin2: torch.Tensor,
                n_heads: int, n_kv_heads: int, head_dim: int,
                row_scale: Optional[torch.Tensor],
                config: Optional[TileConfig] = None) -> torch.Tensor:
    """[M, K] -> [M, n_heads + 2*n_kv_heads, head_dim] with RoPE applied to the q and k heads."""
    m, k = x2.shape
    heads = n_heads + 2 * n_kv_heads
    half = head_dim // 2
    out = torch.empty((m, heads, head_dim), device=x2.device, dtype=x2.dtype)
    scale = row_scale if row_scale is not None else out

    def run(cfg: TileConfig) -> None:
        tiles_per_head = triton.cdiv(half, cfg.block_n)
        grid = (triton.cdiv(m, cfg.block_m), heads * tiles_per_head)
        _qkv_rope_kernel[grid](
            x2, w_qkv, out, scale, cos2, sin2, m, k, half, n_heads + n_kv_heads, tiles_per_head,
            x2.stride(0), x2.stride(1), w_qkv.stride(0), w_qkv.stride(1),
            out.stride(0), out.stride(1), cos2.stride(0), cos2.stride(1),
            sin2.stride(0), sin2.stride(1),
            HAS_SCALE=row_scale is not None, UPCAST=_runtime.upcast_tiles(x2),
            BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k,
            DOT_PRECISION=_runtime.dot_precision(x2.dtype),
            num_warps=cfg.num_warps, num_stages=cfg.num_stages)

    cfg = config or tuning.select("qkv", x2, m, k, heads * head_dim, run)
    run(cfg)
    return out
