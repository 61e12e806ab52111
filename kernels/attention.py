"""Masked grouped-query attention (flash-style online softmax) for both pi0 attention patterns:
the prefix (bidirectional over image + prompt tokens, padded keys masked out) and the action
expert (suffix queries over prefix-cache + suffix keys with a block-causal mask). The caller
passes the mask as bool [B, Lq, Lk] (True = may attend); the kernel does not care which pattern
it encodes. Query rows that may attend to nothing produce zeros, not NaN.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from physai_ros.kernels import _runtime


@dataclass(frozen=True)
class AttentionConfig:
    block_m: int
    block_n: int
    num_warps: int = 4
    num_stages: int = 2


def default_config(t: torch.Tensor, head_dim: int) -> AttentionConfig:
    if not t.is_cuda:
        return AttentionConfig(64, 64, num_stages=1)  # few programs: interpreter cost
    return cuda_config(head_dim, t.element_size())


def cuda_config(head_dim: int, element_bytes: int) -> AttentionConfig:
    """The launch for a GPU. fp32 tiles take twice the shared memory of bf16 ones, and the
    tf32x3 dots that keep fp32 accurate (_runtime.dot_precision) hold more again: on an H200 the
    three-stage 64x64 config of the vision tower's heads (72 wide, padded to 128) asked 237,568
    bytes in fp32 against the 232,448 a block may have. Compiled for sm_90 (kernels/aot.py
    --dtype fp32): fp32 64x64 two stages 200,704, fp32 256-wide 32x32 two stages 140,288; bf16
    keeps 122,880 and 100,352."""
    if head_dim > 128:
        if element_bytes > 2:
            return AttentionConfig(32, 32, num_warps=4, num_stages=2)
        return AttentionConfig(64, 32, num_warps=8, num_stages=2)
    return AttentionConfig(64, 64, num_warps=4, num_stages=3 if element_bytes <= 2 else 2)


@triton.jit
def _attention_kernel(q_ptr, k_ptr, v_ptr, mask_ptr, o_ptr, scale,
                      Lq, Lk, KVH, GROUP, D,
                      sqb, sqm, sqh, sqd, skb, skn, skh, skd, svb, svn, svh, svd,
                      smb, smm, smn, sob, som, soh, sod,
                      UPCAST: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                      BLOCK_D: tl.constexpr, DOT_PRECISION: tl.constexpr):
    # Grouped-query packing: the GROUP query heads sharing one k/v head are stacked as
    # GROUP * Lq rows of one problem, so each K/V block is loaded once for all of them and
    # short query sequences (the action expert's ~51 tokens) still fill BLOCK_M rows.
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // KVH
    kvh = pid_bh % KVH
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < GROUP * Lq
    head = kvh * GROUP + rows // Lq
    pos = rows % Lq
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < D
    q_rows = b * sqb + head * sqh + pos * sqm
    q = tl.load(q_ptr + q_rows[:, None] + offs_d[None, :] * sqd,
                mask=row_ok[:, None] & d_ok[None, :], other=0.0)
    if UPCAST:
        q = q.to(tl.float32)
    m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    for n0 in range(0, Lk, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        col_ok = offs_n < Lk
        kt = tl.load(k_ptr + b * skb + kvh * skh + offs_n[None, :] * skn + offs_d[:, None] * skd,
                     mask=col_ok[None, :] & d_ok[:, None], other=0.0)
        if UPCAST:
            kt = kt.to(tl.float32)
        s = tl.dot(q, kt, input_precision=DOT_PRECISION) * scale
        allowed = tl.load(mask_ptr + b * smb + pos[:, None] * smm + offs_n[None, :] * smn,
                          mask=row_ok[:, None] & col_ok[None, :], other=0) != 0
        s = tl.where(allowed, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        # A row with no allowed key so far keeps m = -inf; shift by 0 so exp() gives 0, not NaN.
        m_shift = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp(s - m_shift[:, None])
        alpha = tl.exp(m_i - m_shift)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(v_ptr + b * svb + kvh * svh + offs_n[:, None] * svn + offs_d[None, :] * svd,
                    mask=col_ok[:, None] & d_ok[None, :], other=0.0)
        if UPCAST:
            v = v.to(tl.float32)
        else:
            p = p.to(v.dtype)
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision=DOT_PRECISION)
        m_i = m_new
    out = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]
    o_rows = b * sob + head * soh + pos * som
    tl.store(o_ptr + o_rows[:, None] + offs_d[None, :] * sod,
             out.to(o_ptr.dtype.element_ty), mask=row_ok[:, None] & d_ok[None, :])


def attention_4d(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
                 scale: float, config: AttentionConfig | None = None) -> torch.Tensor:
    """q [B, Lq, H, D], k/v [B, Lk, KVH, D], mask bool [B, Lq, Lk] -> [B, Lq, H, D]."""
    bsz, lq, h, d = q.shape
    lk, kvh = k.shape[1], k.shape[2]
    cfg = config or default_config(q, d)
    out = torch.empty((bsz, lq, h, d), device=q.device, dtype=q.dtype)
    m8 = mask.view(torch.uint8) if mask.dtype == torch.bool else mask
    grid = (triton.cdiv(lq * (h // kvh), cfg.block_m), bsz * kvh)
    _attention_kernel[grid](
        q, k, v, m8, out, float(scale), lq, lk, kvh, h // kvh, d,
        *q.stride(), *k.stride(), *v.stride(), *m8.stride(), *out.stride(),
        UPCAST=_runtime.upcast_tiles(q), BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
        BLOCK_D=max(16, triton.next_power_of_2(d)), DOT_PRECISION=_runtime.dot_precision(q.dtype),
        num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    return out
