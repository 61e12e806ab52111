"""CPU GEMMs of the fast path through oneDNN with the weights prepacked once at load time.

Why (measured at pi0_2layer widths, 1 thread, fp32, on this AMD EPYC): torch's CPU
`mm` / `F.linear` call MKL's sgemm, which repacks the weight matrix on every call and does not
run its fastest kernels on AMD; oneDNN's inner product with a weight reordered once into its
blocked layout (`torch.ops.mkldnn._reorder_linear_weight`, what inductor's CPU freezing uses)
runs the action expert's GEMMs ([50, 1024] x [1024, 8192] and friends) 1.4-1.9x faster and
the prefix's ([560, 2048] x [2048, 16384], SigLIP's [256, 1152] x ...) 1.2-1.4x faster, with
bias, GELU-tanh / SiLU, a residual add or an elementwise multiply fused into the epilogue.
Results differ from torch's by fp32 rounding only (summation order), ~1e-6 relative.

The packed tensor is opaque (layout torch._mkldnn): it cannot be sliced, has no autograd, and
lives only on the CPU. Callers keep a dense weight where something else needs one (autograd
through real-time chunking's guided step, Triton, CUDA).
"""
from __future__ import annotations

from typing import Optional

import torch

_ACT = {None: ("none", [], ""), "gelu_tanh": ("gelu", [], "tanh"), "silu": ("swish", [], "")}


def supported(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether prepacked oneDNN GEMMs can run for weights on `device` in `dtype` (fp32 CPU)."""
    return (torch.device(device).type == "cpu" and dtype == torch.float32
            and torch.backends.mkldnn.is_available()
            and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
            and hasattr(torch.ops.mkldnn, "_linear_pointwise"))


def pack(weight: torch.Tensor, batch_hint: int = 64) -> torch.Tensor:
    """weight [N, K] (dense, fp32, CPU) -> an opaque oneDNN tensor for `linear`. batch_hint is
    the number of rows oneDNN tunes the layout for; any row count runs (measured: the hint
    changes the time by < 5% between 1 and 560 rows)."""
    if weight.dim() != 2:
        raise ValueError(f"pack: weight must be [N, K], got {tuple(weight.shape)}")
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach().contiguous(), batch_hint)


def linear(x: torch.Tensor, packed: torch.Tensor, bias: Optional[torch.Tensor] = None, *,
           activation: Optional[str] = None, residual: Optional[torch.Tensor] = None,
           mul: Optional[torch.Tensor] = None) -> torch.Tensor:
    """act(x @ W.T + bias), then + residual or * mul (at most one of activation, residual, mul:
    oneDNN's attribute takes one post-op here). x [..., K]; residual / mul [..., N]."""
    if residual is not None or mul is not None:
        if activation is not None or (residual is not None and mul is not None):
            raise ValueError("onednn.linear: one of activation, residual, mul")
        other = residual if residual is not None else mul
        return torch.ops.mkldnn._linear_pointwise.binary(
            x, other.contiguous(), packed, bias, "add" if residual is not None else "mul")
    attr, scalars, algorithm = _ACT[activation]
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, attr, scalars, algorithm)
