"""GEMM kernels with fused epilogues (realtime-vla §4.1-§4.4) and their launch wrappers.

- `_linear_kernel`: y = act((x @ W^T) * row_scale + bias) + residual. One launch covers a
  "main" region of output columns with big tiles and, optionally, a split region tiled small
  and split along K (partial split-K, §4.3); the split region's fp32 partials are summed and
  given the same epilogue by `_split_reduce_kernel`.
- `_gated_kernel`: loads each input tile once, multiplies it by the gate and the up weights,
  and writes only act(gate) * up (§4.2).
- `_row_scale_kernel`: the RMSNorm statistic rsqrt(mean(x^2)+eps) per row, computed before the
  GEMM that consumes it (§4.4).

Every kernel takes UPCAST (constexpr): under the interpreter bf16 tiles must be widened to fp32
before any arithmetic; on a GPU the dots stay in bf16 with fp32 accumulation.
"""
from __future__ import annotations

from typing import Optional

import torch
import triton
import triton.language as tl

from physai_ros.kernels import _runtime
from physai_ros.kernels import tuning
from physai_ros.kernels.tiles import TileConfig

ACT_CODES = {None: 0, "gelu_tanh": 1, "silu": 2}


@triton.jit
def _gelu_tanh(x):
    # 0.5*x*(1 + tanh(u)) with tanh(u) = 2*sigmoid(2u) - 1 (no libdevice tanh under the
    # interpreter) simplifies to x*sigmoid(2u).
    u = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    return x * tl.sigmoid(2.0 * u)


@triton.jit
def _activate(y, ACT: tl.constexpr):
    if ACT == 1:
        y = _gelu_tanh(y)
    elif ACT == 2:
        y = y * tl.sigmoid(y)
    return y


@triton.jit
def _load_tile_pair(x_ptr, w_ptr, offs_m, offs_n, kk, M, N, k_end,
                    stride_xm, stride_xk, stride_wn, stride_wk, UPCAST: tl.constexpr):
    a = tl.load(x_ptr + offs_m[:, None] * stride_xm + kk[None, :] * stride_xk,
                mask=(offs_m[:, None] < M) & (kk[None, :] < k_end), other=0.0)
    # W is [N, K]; the tile is loaded transposed as [BLOCK_K, BLOCK_N] for the dot.
    b = tl.load(w_ptr + offs_n[None, :] * stride_wn + kk[:, None] * stride_wk,
                mask=(offs_n[None, :] < N) & (kk[:, None] < k_end), other=0.0)
    if UPCAST:
        a = a.to(tl.float32)
        b = b.to(tl.float32)
    return a, b


@triton.jit
def _mma(x_ptr, w_ptr, offs_m, offs_n, k_start, k_end, M, N,
         stride_xm, stride_xk, stride_wn, stride_wk,
         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
         UPCAST: tl.constexpr, DOT_PRECISION: tl.constexpr):
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    offs_k = tl.arange(0, BLOCK_K)
    for k0 in range(k_start, k_end, BLOCK_K):
        a, b = _load_tile_pair(x_ptr, w_ptr, offs_m, offs_n, k0 + offs_k, M, N, k_end,
                               stride_xm, stride_xk, stride_wn, stride_wk, UPCAST)
        acc = tl.dot(a, b, acc, input_precision=DOT_PRECISION)
    return acc


@triton.jit
def _epilogue_store(acc, offs_m, offs_n, M, N, y_ptr, stride_ym, stride_yn,
                    scale_ptr, bias_ptr, res_ptr, stride_rm, stride_rn,
                    HAS_SCALE: tl.constexpr, HAS_BIAS: tl.constexpr, ACT: tl.constexpr,
                    HAS_RES: tl.constexpr):
    row_ok = offs_m < M
    col_ok = offs_n < N
    if HAS_SCALE:
        s = tl.load(scale_ptr + offs_m, mask=row_ok, other=0.0).to(tl.float32)
        acc = acc * s[:, None]
    if HAS_BIAS:
        bias = tl.load(bias_ptr + offs_n, mask=col_ok, other=0.0).to(tl.float32)
        acc = acc + bias[None, :]
    acc = _activate(acc, ACT)
    mask = row_ok[:, None] & col_ok[None, :]
    if HAS_RES:
        r = tl.load(res_ptr + offs_m[:, None] * stride_rm + offs_n[None, :] * stride_rn,
                    mask=mask, other=0.0).to(tl.float32)
        acc = acc + r
    tl.store(y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn,
             acc.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _linear_kernel(x_ptr, w_ptr, y_ptr, part_ptr, scale_ptr, bias_ptr, res_ptr,
                   M, N, K, N_MAIN, K_PER_SPLIT,
                   stride_xm, stride_xk, stride_wn, stride_wk, stride_ym, stride_yn,
                   stride_rm, stride_rn,
                   HAS_SCALE: tl.constexpr, HAS_BIAS: tl.constexpr, ACT: tl.constexpr,
                   HAS_RES: tl.constexpr, UPCAST: tl.constexpr, HAS_TAIL: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                   TAIL_BM: tl.constexpr, TAIL_BN: tl.constexpr, SPLIT_K: tl.constexpr,
                   DOT_PRECISION: tl.constexpr):
    pid = tl.program_id(0)
    main_tiles_n = tl.cdiv(N_MAIN, BLOCK_N)
    main_tiles = tl.cdiv(M, BLOCK_M) * main_tiles_n
    if pid < main_tiles:
        offs_m = (pid // main_tiles_n) * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = (pid % main_tiles_n) * BLOCK_N + tl.arange(0, BLOCK_N)
        acc = _mma(x_ptr, w_ptr, offs_m, offs_n, 0, K, M, N_MAIN,
                   stride_xm, stride_xk, stride_wn, stride_wk, BLOCK_M, BLOCK_N, BLOCK_K, UPCAST,
                   DOT_PRECISION)
        _epilogue_store(acc, offs_m, offs_n, M, N_MAIN, y_ptr, stride_ym, stride_yn,
                        scale_ptr, bias_ptr, res_ptr, stride_rm, stride_rn,
                        HAS_SCALE, HAS_BIAS, ACT, HAS_RES)
    elif HAS_TAIL:
        # Split region: program t handles K slice (t % SPLIT_K) of tile (t // SPLIT_K) and
        # writes an fp32 partial; the epilogue needs the full sum, so it runs in the reducer.
        # Names differ from the main branch: Triton merges same-named values of both branches,
        # and the tiles have different shapes.
        t = pid - main_tiles
        split = t % SPLIT_K
        tile = t // SPLIT_K
        tail_n = N - N_MAIN
        tiles_n = tl.cdiv(tail_n, TAIL_BN)
        rows_t = (tile // tiles_n) * TAIL_BM + tl.arange(0, TAIL_BM)
        cols_t = (tile % tiles_n) * TAIL_BN + tl.arange(0, TAIL_BN)
        k_start = split * K_PER_SPLIT
        k_end = tl.minimum(K, k_start + K_PER_SPLIT)
        part = _mma(x_ptr, w_ptr + N_MAIN * stride_wn, rows_t, cols_t, k_start, k_end, M, tail_n,
                    stride_xm, stride_xk, stride_wn, stride_wk, TAIL_BM, TAIL_BN, BLOCK_K, UPCAST,
                    DOT_PRECISION)
        mask_t = (rows_t[:, None] < M) & (cols_t[None, :] < tail_n)
        tl.store(part_ptr + split * M * tail_n + rows_t[:, None] * tail_n + cols_t[None, :],
                 part, mask=mask_t)


@triton.jit
def _split_reduce_kernel(part_ptr, y_ptr, scale_ptr, bias_ptr, res_ptr,
                         M, N, N_MAIN, stride_ym, stride_yn, stride_rm, stride_rn,
                         HAS_SCALE: tl.constexpr, HAS_BIAS: tl.constexpr, ACT: tl.constexpr,
                         HAS_RES: tl.constexpr, SPLIT_K: tl.constexpr,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_t = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    tail_n = N - N_MAIN
    mask = (offs_m[:, None] < M) & (offs_t[None, :] < tail_n)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for s in range(SPLIT_K):
        acc += tl.load(part_ptr + s * M * tail_n + offs_m[:, None] * tail_n + offs_t[None, :],
                       mask=mask, other=0.0)
    _epilogue_store(acc, offs_m, N_MAIN + offs_t, M, N, y_ptr, stride_ym, stride_yn,
                    scale_ptr, bias_ptr, res_ptr, stride_rm, stride_rn,
                    HAS_SCALE, HAS_BIAS, ACT, HAS_RES)


@triton.jit
def _gated_kernel(x_ptr, w_ptr, y_ptr, scale_ptr, M, F, K,
                  stride_xm, stride_xk, stride_wn, stride_wk, stride_ym, stride_yn,
                  HAS_SCALE: tl.constexpr, ACT: tl.constexpr, UPCAST: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  DOT_PRECISION: tl.constexpr):
    pid = tl.program_id(0)
    tiles_n = tl.cdiv(F, BLOCK_N)
    offs_m = (pid // tiles_n) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = (pid % tiles_n) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc_g = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_u = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + offs_k
        # One input tile serves both weight tiles: this shared load is the point of §4.2.
        a, g = _load_tile_pair(x_ptr, w_ptr, offs_m, offs_n, kk, M, F, K,
                               stride_xm, stride_xk, stride_wn, stride_wk, UPCAST)
        u = tl.load(w_ptr + (F + offs_n[None, :]) * stride_wn + kk[:, None] * stride_wk,
                    mask=(offs_n[None, :] < F) & (kk[:, None] < K), other=0.0)
        if UPCAST:
            u = u.to(tl.float32)
        acc_g = tl.dot(a, g, acc_g, input_precision=DOT_PRECISION)
        acc_u = tl.dot(a, u, acc_u, input_precision=DOT_PRECISION)
    row_ok = offs_m < M
    if HAS_SCALE:
        s = tl.load(scale_ptr + offs_m, mask=row_ok, other=0.0).to(tl.float32)
        acc_g = acc_g * s[:, None]
        acc_u = acc_u * s[:, None]
    y = _activate(acc_g, ACT) * acc_u
    mask = row_ok[:, None] & (offs_n[None, :] < F)
    tl.store(y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn,
             y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _row_scale_kernel(x_ptr, out_ptr, M, K, stride_xm, stride_xk, eps,
                      BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_k = tl.arange(0, BLOCK_K)
    ss = tl.zeros((BLOCK_M,), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + offs_k
        v = tl.load(x_ptr + offs_m[:, None] * stride_xm + kk[None, :] * stride_xk,
                    mask=(offs_m[:, None] < M) & (kk[None, :] < K), other=0.0).to(tl.float32)
        ss += tl.sum(v * v, axis=1)
    tl.store(out_ptr + offs_m, 1.0 / tl.sqrt(ss / K + eps), mask=offs_m < M)


# ---------------------------------------------------------------------------------------------
# Launch wrappers. Inputs arrive validated and flattened to 2-D by ops.py.

def launch_linear(x2: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                  row_scale: Optional[torch.Tensor], activation: Optional[str],
                  res2: Optional[torch.Tensor], out: torch.Tensor, cfg: TileConfig) -> torch.Tensor:
    m, k = x2.shape
    n = weight.shape[0]
    start = cfg.split_region(n)
    n_main = n if start is None else start
    has_tail = start is not None
    split = cfg.split_k if has_tail else 1
    k_per_split = triton.cdiv(triton.cdiv(k, split), cfg.block_k) * cfg.block_k
    part = (torch.empty((split, m, n - n_main), device=x2.device, dtype=torch.float32)
            if has_tail else out)
    # Triton needs a real pointer even for operands a constexpr flag disables: pass `out`.
    scale = row_scale if row_scale is not None else out
    b = bias if bias is not None else out
    r = res2 if res2 is not None else out
    flags = dict(HAS_SCALE=row_scale is not None, HAS_BIAS=bias is not None,
                 ACT=ACT_CODES[activation], HAS_RES=res2 is not None)
    grid = (cfg.programs(m, n),)
    _linear_kernel[grid](
        x2, weight, out, part, scale, b, r, m, n, k, n_main, k_per_split,
        x2.stride(0), x2.stride(1), weight.stride(0), weight.stride(1),
        out.stride(0), out.stride(1), r.stride(0), r.stride(1),
        UPCAST=_runtime.upcast_tiles(x2), HAS_TAIL=has_tail,
        BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k,
        TAIL_BM=cfg.tail_block_m, TAIL_BN=cfg.tail_block_n, SPLIT_K=split,
        DOT_PRECISION=_runtime.dot_precision(x2.dtype),
        num_warps=cfg.num_warps, num_stages=cfg.num_stages, **flags)
    if has_tail:
        grid2 = (triton.cdiv(m, cfg.tail_block_m), triton.cdiv(n - n_main, cfg.tail_block_n))
        _split_reduce_kernel[grid2](
            part, out, scale, b, r, m, n, n_main, out.stride(0), out.stride(1),
            r.stride(0), r.stride(1), SPLIT_K=split,
            BLOCK_M=cfg.tail_block_m, BLOCK_N=cfg.tail_block_n, num_warps=4, **flags)
    return out


def linear_2d(x2, weight, bias, row_scale, activation, res2,
              config: Optional[TileConfig] = None) -> torch.Tensor:
    m, k = x2.shape
    n = weight.shape[0]
    out = torch.empty((m, n), device=x2.device, dtype=x2.dtype)

    def run(cfg: TileConfig) -> None:
        launch_linear(x2, weight, bias, row_scale, activation, res2, out, cfg)

    cfg = config or tuning.select("linear", x2, m, k, n, run)
    run(cfg)
    return out


def gated_2d(x2, w_gate_up, row_scale, activation,
             config: Optional[TileConfig] = None) -> torch.Tensor:
    m, k = x2.shape
    f = w_gate_up.shape[0] // 2
    out = torch.empty((m, f), device=x2.device, dtype=x2.dtype)
    scale = row_scale if row_scale is not None else out

    def run(cfg: TileConfig) -> None:
        grid = (triton.cdiv(m, cfg.block_m) * triton.cdiv(f, cfg.block_n),)
        _gated_kernel[grid](
            x2, w_gate_up, out, scale, m, f, k,
            x2.stride(0), x2.stride(1), w_gate_up.stride(0), w_gate_up.stride(1),
            out.stride(0), out.stride(1),
            HAS_SCALE=row_scale is not None, ACT=ACT_CODES[activation],
            UPCAST=_runtime.upcast_tiles(x2),
            BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k,
            DOT_PRECISION=_runtime.dot_precision(x2.dtype),
            num_warps=cfg.num_warps, num_stages=cfg.num_stages)

    cfg = config or tuning.select("gate", x2, m, k, 2 * f, run)
    run(cfg)
    return out


def row_scale_2d(x2: torch.Tensor, eps: float) -> torch.Tensor:
    m, k = x2.shape
    out = torch.empty((m,), device=x2.device, dtype=torch.float32)
    block_m = 4 if x2.is_cuda else 64
    block_k = min(1024, triton.next_power_of_2(k)) if x2.is_cuda else 256
    _row_scale_kernel[(triton.cdiv(m, block_m),)](
        x2, out, m, k, x2.stride(0), x2.stride(1), eps, BLOCK_M=block_m, BLOCK_K=block_k)
    return out
