"""The fast path's attention and rotary embedding (engine/pi0/fast.py).

On the CPU (backend "torch") attention is a lean grouped matmul, or per robot a oneDNN product
when the model is prepacked; other backends go through physai_ros.kernels.ops.
"""
from __future__ import annotations

import torch

from physai_ros.engine.pi0.modeling import MASK_VALUE
from physai_ros.kernels import ops


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [B, T, H, hd]; cos/sin [B, T, hd]."""
    half = x.shape[-1] // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos[:, :, None] + rot * sin[:, :, None]


def attention(q, k, v, mask, backend: str, packed_model: bool):
    """q [B, Tq, H, D] (scale folded into W_q), k/v [B, Tk, KV, D], mask bool [B, Tq, Tk] or
    None (every key valid for every query). The torch backend uses a lean grouped matmul (no
    K/V repeat, no fp32 round trip): on the CPU the reference op's validation and upcasts
    cost more than the tiny attention itself. Query rows are token-major within a KV group,
    so with one KV head (pi0) q and the output need no transposed copy. packed_model: the
    model's weights are prepacked for oneDNN, so this CPU takes oneDNN's products."""
    b, tq, h, d = q.shape
    if backend != "torch":
        if mask is None:
            mask = torch.ones(b, tq, k.shape[1], dtype=torch.bool, device=q.device)
        return ops.attention(q, k, v, mask, 1.0, backend=backend)
    kv = k.shape[2]
    r = h // kv
    if kv == 1 and packed_model and not (torch.is_grad_enabled() and q.requires_grad):
        return attention_onednn(q, k, v, mask)
    qg = q.reshape(b, 1, tq * h, d) if kv == 1 else q.view(b, tq, kv, r, d).transpose(1, 2).reshape(b, kv, tq * r, d)
    s = torch.matmul(qg, k.permute(0, 2, 3, 1))
    if mask is not None:
        s.view(b, kv, tq, r, -1).masked_fill_(~mask[:, None, :, None], MASK_VALUE)
    p = torch.softmax(s, dim=-1, dtype=torch.float32).to(q.dtype)
    o = torch.matmul(p, v.permute(0, 2, 1, 3))  # [B, KV, Tq * r, D]
    if kv == 1:
        return o.view(b, tq, h, d)
    return o.view(b, kv, tq, r, d).transpose(1, 2).reshape(b, tq, h, d)


def attention_onednn(q, k, v, mask):
    """attention for one KV head on the CPU: per robot, the scores q K^T as a oneDNN product
    with K [Tk, D] as the (unpacked) weight, which runs ~1.5x faster than MKL's batched matmul
    at pi0's shapes ([400, 256] x [256, 611]); softmax; P V with matmul."""
    b, tq, h, d = q.shape
    out = torch.empty(b, tq, h, d, dtype=q.dtype, device=q.device)
    for i in range(b):
        s = torch.ops.mkldnn._linear_pointwise(q[i].reshape(tq * h, d), k[i, :, 0].contiguous(), None,
                                               "none", [], "")
        if mask is not None:
            s.view(tq, h, -1).masked_fill_(~mask[i][:, None, :], MASK_VALUE)
        p = torch.softmax(s, dim=-1, dtype=torch.float32).to(q.dtype)
        torch.matmul(p, v[i, :, 0], out=out[i].view(tq * h, d))
    return out
