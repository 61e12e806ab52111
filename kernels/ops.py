"""Fused operations of the pi0 fast path, with one signature per op and two backends.

backend="torch" is the plain reference (any device); backend="triton" launches the Triton
kernels of this package (CUDA tensors, or CPU tensors under TRITON_INTERPRET=1). On a machine
with neither, backend="triton" falls back to the torch path (counted in `counters()`), so an
engine configured for Triton still runs on a CPU-only host. The engine's prepared fast path
calls only these functions, so switching backends never changes its code.

Conventions (realtime-vla section 4):
- `row_scale` is the per-row RMSNorm factor rsqrt(mean(x^2) + eps), applied after the matmul
  accumulation; the norm's (1 + w) affine is already folded into the weight's input columns.
- Epilogue order in `linear`: accumulate -> * row_scale -> + bias -> activation -> + residual.
- Weights are [out_features, in_features] like torch.nn.Linear; weight, bias and residual
  share x's dtype. Outputs have x's dtype.
- RoPE is Gemma/pi0's rotate-half form with per-token cos/sin of shape [B, L, head_dim].
- Attention masks are bool [B, Lq, Lk], True where a query may attend to a key; a query row
  with no allowed key returns zeros.
Invalid arguments raise ValueError with the reason and are counted in `counters()`.
"""
from __future__ import annotations

import logging
import threading
from collections import Counter
from typing import Dict, Optional, Tuple

import torch
import torch.nn.functional as F

from physai_ros.kernels import _runtime

ACTIVATIONS = (None, "gelu_tanh", "silu")
BACKENDS = ("torch", "triton")

_log = logging.getLogger(__name__)
_counts: Counter = Counter()
_counts_lock = threading.Lock()


def counters() -> Dict[str, int]:
    """Per-op counts of `rejected:<op>` (invalid input) and `fallback:<op>` (triton requested
    where no kernel can run, torch used instead)."""
    with _counts_lock:
        return dict(_counts)


def _count(key: str) -> None:
    with _counts_lock:
        first = key not in _counts
        _counts[key] += 1
    if first and key.startswith("fallback:"):
        _log.warning("%s: no CUDA device and no Triton interpreter; using the torch path", key)


def _reject(op: str, msg: str) -> ValueError:
    _count(f"rejected:{op}")
    return ValueError(f"{op}: {msg}")


def _use_triton(op: str, backend: str, x: torch.Tensor) -> bool:
    if backend == "torch":
        return False
    if backend != "triton":
        raise _reject(op, f"unknown backend {backend!r}; expected one of {BACKENDS}")
    if x.numel() == 0:
        return False  # nothing to launch; torch returns the correctly shaped empty result
    if _runtime.triton_runs_on(x):
        return True
    _count(f"fallback:{op}")
    return False


def _act(y: torch.Tensor, activation: Optional[str]) -> torch.Tensor:
    if activation is None:
        return y
    if activation == "gelu_tanh":
        return F.gelu(y, approximate="tanh")
    if activation == "silu":
        return F.silu(y)
    raise ValueError(f"unknown activation {activation!r}; expected one of {ACTIVATIONS}")


# --------------------------------------------------------------------------------- validation

def _check_float(op: str, name: str, t: torch.Tensor, like: torch.Tensor,
                 same_dtype: bool = True) -> None:
    if not isinstance(t, torch.Tensor):
        raise _reject(op, f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if not t.is_floating_point():
        raise _reject(op, f"{name} must be a floating-point tensor, got {t.dtype}")
    if t.device != like.device:
        raise _reject(op, f"{name} is on {t.device} but x is on {like.device}")
    if same_dtype and t.dtype != like.dtype:
        raise _reject(op, f"{name} has dtype {t.dtype} but x has {like.dtype}")


def _check_activation(op: str, activation: Optional[str]) -> None:
    if activation not in ACTIVATIONS:
        raise _reject(op, f"unknown activation {activation!r}; expected one of {ACTIVATIONS}")


def _check_matmul(op: str, x: torch.Tensor, weight: torch.Tensor,
                  row_scale: Optional[torch.Tensor]) -> None:
    _check_float(op, "x", x, x)
    _check_float(op, "weight", weight, x)
    if x.dim() < 1 or weight.dim() != 2:
        raise _reject(op, f"expected x [..., K] and weight [N, K], got {tuple(x.shape)} and "
                          f"{tuple(weight.shape)}")
    if x.shape[-1] != weight.shape[1]:
        raise _reject(op, f"x has K={x.shape[-1]} features but weight expects {weight.shape[1]}")
    if row_scale is not None:
        _check_float(op, "row_scale", row_scale, x, same_dtype=False)
        if tuple(row_scale.shape) != tuple(x.shape[:-1]):
            raise _reject(op, f"row_scale shape {tuple(row_scale.shape)} must be x.shape[:-1] "
                              f"= {tuple(x.shape[:-1])}")


def _rows(t: torch.Tensor) -> torch.Tensor:
    """[..., C] -> [M, C] without copying when the strides allow it."""
    return t.reshape(-1, t.shape[-1])


def _flat_scale(row_scale: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    return None if row_scale is None else row_scale.reshape(-1).float().contiguous()


# ------------------------------------------------------------------------------------- ops

def rms_row_scale(x: torch.Tensor, eps: float = 1e-6, backend: str = "torch") -> torch.Tensor:
    """rsqrt(mean(x^2) + eps) over the last dim, in fp32, shape x.shape[:-1]."""
    _check_float("rms_row_scale", "x", x, x)
    if x.dim() < 1 or x.shape[-1] == 0:
        raise _reject("rms_row_scale", f"x needs a non-empty last dim, got {tuple(x.shape)}")
    if _use_triton("rms_row_scale", backend, x):
        from physai_ros.kernels.gemm import row_scale_2d

        return row_scale_2d(_rows(x), float(eps)).reshape(x.shape[:-1])
    return torch.rsqrt(x.float().pow(2).mean(-1) + eps)


def linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor] = None,
    *,
    row_scale: Optional[torch.Tensor] = None,
    activation: Optional[str] = None,
    residual: Optional[torch.Tensor] = None,
    backend: str = "torch",
) -> torch.Tensor:
    """act((x @ weight.T) * row_scale[..., None] + bias) + residual."""
    op = "linear"
    _check_matmul(op, x, weight, row_scale)
    _check_activation(op, activation)
    n = weight.shape[0]
    if bias is not None:
        _check_float(op, "bias", bias, x)
        if tuple(bias.shape) != (n,):
            raise _reject(op, f"bias shape {tuple(bias.shape)} must be ({n},)")
    out_shape = tuple(x.shape[:-1]) + (n,)
    if residual is not None:
        _check_float(op, "residual", residual, x)
        if tuple(residual.shape) != out_shape:
            raise _reject(op, f"residual shape {tuple(residual.shape)} must be {out_shape}")
    if _use_triton(op, backend, x):
        from physai_ros.kernels.gemm import linear_2d

        y = linear_2d(_rows(x), weight, None if bias is None else bias.contiguous(),
                      _flat_scale(row_scale), activation,
                      None if residual is None else _rows(residual))
        return y.reshape(out_shape)
    y = x @ weight.t()
    if row_scale is not None:
        y = y * row_scale.unsqueeze(-1).to(y.dtype)
    if bias is not None:
        y = y + bias
    y = _act(y, activation)
    if residual is not None:
        y = y + residual
    return y


def gated_ffn(
    x: torch.Tensor,
    w_gate_up: torch.Tensor,
    *,
    row_scale: Optional[torch.Tensor] = None,
    activation: str = "gelu_tanh",
    backend: str = "torch",
) -> torch.Tensor:
    """act(x @ W_gate.T) * (x @ W_up.T), with w_gate_up = cat([W_gate, W_up]) of shape [2F, K]."""
    op = "gated_ffn"
    _check_matmul(op, x, w_gate_up, row_scale)
    _check_activation(op, activation)
    if w_gate_up.shape[0] % 2:
        raise _reject(op, f"w_gate_up has {w_gate_up.shape[0]} rows; expected 2F (gate, up)")
    if _use_triton(op, backend, x):
        from physai_ros.kernels.gemm import gated_2d

        y = gated_2d(_rows(x), w_gate_up, _flat_scale(row_scale), activation)
        return y.reshape(tuple(x.shape[:-1]) + (w_gate_up.shape[0] // 2,))
    gu = linear(x, w_gate_up, row_scale=row_scale)
    gate, up = gu.chunk(2, dim=-1)
    return _act(gate, activation) * up


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def qkv_rope(
    x: torch.Tensor,
    w_qkv: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    n_heads: int,
    n_kv_heads: int,
    head_dim: int,
    row_scale: Optional[torch.Tensor] = None,
    backend: str = "torch",
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Fused QKV projection + RoPE. x [B, L, K], w_qkv [(H + 2*KVH) * D, K] stacking q, k, v
    rows; cos/sin [B, L, D]. Returns q [B, L, H, D], k and v [B, L, KVH, D] (RoPE on q and k)."""
    op = "qkv_rope"
    _check_matmul(op, x, w_qkv, row_scale)
    if x.dim() != 3:
        raise _reject(op, f"x must be [B, L, K], got {tuple(x.shape)}")
    if min(n_heads, n_kv_heads, head_dim) < 1 or head_dim % 2:
        raise _reject(op, f"need positive heads and an even head_dim, got n_heads={n_heads}, "
                          f"n_kv_heads={n_kv_heads}, head_dim={head_dim}")
    heads = n_heads + 2 * n_kv_heads
    if w_qkv.shape[0] != heads * head_dim:
        raise _reject(op, f"w_qkv has {w_qkv.shape[0]} rows; (n_heads + 2*n_kv_heads) * "
                          f"head_dim = {heads * head_dim}")
    b, seq = x.shape[0], x.shape[1]
    for name, t in (("cos", cos), ("sin", sin)):
        _check_float(op, name, t, x, same_dtype=False)
        if tuple(t.shape) != (b, seq, head_dim):
            raise _reject(op, f"{name} shape {tuple(t.shape)} must be {(b, seq, head_dim)}")
    if _use_triton(op, backend, x):
        from physai_ros.kernels.qkv_rope import qkv_rope_2d

        out = qkv_rope_2d(_rows(x), w_qkv, cos.reshape(-1, head_dim), sin.reshape(-1, head_dim),
                          n_heads, n_kv_heads, head_dim, _flat_scale(row_scale))
        out = out.view(b, seq, heads, head_dim)
        return (out[:, :, :n_heads], out[:, :, n_heads:n_heads + n_kv_heads],
                out[:, :, n_heads + n_kv_heads:])
    qkv = linear(x, w_qkv, row_scale=row_scale).view(b, seq, heads, head_dim)
    q = qkv[:, :, :n_heads]
    k = qkv[:, :, n_heads:n_heads + n_kv_heads]
    v = qkv[:, :, n_heads + n_kv_heads:]
    c = cos.unsqueeze(2).to(x.dtype)
    s = sin.unsqueeze(2).to(x.dtype)
    return q * c + rotate_half(q) * s, k * c + rotate_half(k) * s, v


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor,
    scale: float,
    backend: str = "torch",
) -> torch.Tensor:
    """softmax(q k^T * scale, masked) v with grouped-query heads. q [B, Lq, H, D], k/v
    [B, Lk, KVH, D] (H a multiple of KVH), mask bool [B, Lq, Lk]. Returns [B, Lq, H, D]."""
    op = "attention"
    _check_float(op, "q", q, q)
    _check_float(op, "k", k, q)
    _check_float(op, "v", v, q)
    if q.dim() != 4 or k.dim() != 4 or v.shape != k.shape:
        raise _reject(op, f"expected q [B, Lq, H, D] and k, v [B, Lk, KVH, D], got "
                          f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    b, lq, h, d = q.shape
    _, lk, kvh, dk = k.shape
    if k.shape[0] != b or dk != d:
        raise _reject(op, f"k {tuple(k.shape)} does not match q {tuple(q.shape)} in B or D")
    if kvh < 1 or h % kvh:
        raise _reject(op, f"n_heads={h} must be a multiple of n_kv_heads={kvh}")
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        raise _reject(op, "mask must be a bool tensor (True = may attend)")
    if tuple(mask.shape) != (b, lq, lk) or mask.device != q.device:
        raise _reject(op, f"mask shape {tuple(mask.shape)} on {mask.device} must be "
                          f"{(b, lq, lk)} on {q.device}")
    if _use_triton(op, backend, q):
        from physai_ros.kernels.attention import attention_4d

        return attention_4d(q, k, v, mask, float(scale))
    rep = h // kvh
    kf = k.float().repeat_interleave(rep, dim=2)
    vf = v.float().repeat_interleave(rep, dim=2)
    scores = torch.einsum("bqhd,bkhd->bhqk", q.float(), kf) * scale
    scores = scores.masked_fill(~mask[:, None], float("-inf"))
    # Rows with no allowed key are all -inf: softmax gives NaN there, defined here as 0.
    p = torch.nan_to_num(torch.softmax(scores, dim=-1), nan=0.0)
    return torch.einsum("bhqk,bkhd->bqhd", p, vf).to(q.dtype)
