"""The fast path's weights, folded and fused once from the plain checkpoint tensors (the
rewrites are listed in engine/pi0/fast.py's docstring; each is checked against the plain path in
test/engine/test_engine_fast_equivalence.py).

Every function takes ``consume``: True pops each tensor from the weights as it is folded, so a
full-size model never exists twice in memory.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional

import torch

from physai_ros.engine.checkpoint.params import Weights
from physai_ros.engine.types import GemmaSpec, VisionSpec
from physai_ros.kernels import onednn


@dataclass
class VisionLayer:
    w_qkv: Optional[torch.Tensor]  # dense weights: None once packed (`packed` holds them)
    b_qkv: torch.Tensor
    w_o: Optional[torch.Tensor]
    b_o: torch.Tensor
    w_fc1: Optional[torch.Tensor]
    b_fc1: torch.Tensor
    w_fc2: Optional[torch.Tensor]
    b_fc2: torch.Tensor
    packed: Optional[Dict[str, torch.Tensor]] = None  # oneDNN weights: qkv, o, fc1, fc2

    def pack(self) -> None:
        """Only the packed path reads SigLIP's weights once packed: the dense ones go."""
        self.packed = {k: onednn.pack(getattr(self, "w_" + k)) for k in ("qkv", "o", "fc1", "fc2")}
        self.w_qkv = self.w_o = self.w_fc1 = self.w_fc2 = None


@dataclass
class GemmaLayer:
    w_qkv: Optional[torch.Tensor]  # [(H + 2 KV) hd, D], (1 + ln_attn) folded, Q rows pre-scaled
    w_o: Optional[torch.Tensor]  # None (and kv_only): the layer only produces K/V
    w_gate_up: Optional[torch.Tensor]  # [2 F, D], (1 + ln_mlp) folded
    w_down: Optional[torch.Tensor]
    kv_only: bool = False
    # oneDNN weights (onednn.pack): qkv, o, gate, up, down (kv only: qkv). Where the dense ones
    # are None, only these exist.
    packed: Optional[Dict[str, torch.Tensor]] = None

    def pack(self, drop_dense: bool) -> None:
        dense = {"qkv": self.w_qkv}
        if not self.kv_only:
            f = self.w_gate_up.shape[0] // 2
            dense.update(o=self.w_o, gate=self.w_gate_up[:f], up=self.w_gate_up[f:], down=self.w_down)
        self.packed = {k: onednn.pack(w) for k, w in dense.items()}
        if drop_dense:
            self.w_qkv = self.w_o = self.w_gate_up = self.w_down = None

    def kv_only_copy(self, spec: GemmaSpec) -> "GemmaLayer":
        """The same layer computing only K and V: the K/V rows of its fused weight (the same
        values and GEMM shape, so what it produces is bit-identical)."""
        return GemmaLayer(w_qkv=self.w_qkv[spec.num_heads * spec.head_dim:], w_o=None, w_gate_up=None,
                          w_down=None, kv_only=True)


@dataclass
class SiglipWeights:
    patch_w: torch.Tensor  # the patch conv as a GEMM weight [width, 3 p p]
    patch_b: torch.Tensor
    pos: torch.Tensor  # position embedding, added as the patch GEMM's residual
    layers: List[VisionLayer]
    proj_w: torch.Tensor  # post-LayerNorm affine folded into the projector
    proj_b: torch.Tensor


def take(w: Weights, name: str, consume: bool) -> torch.Tensor:
    return w.pop(name) if consume else w[name]


def fold_rms(weight: torch.Tensor, norm_w: torch.Tensor) -> torch.Tensor:
    """Gemma RMSNorm's (1 + w) into the next linear's input columns."""
    return weight.float() * (1.0 + norm_w.float())[None, :]


def fold_ln(weight: torch.Tensor, bias: Optional[torch.Tensor], g: torch.Tensor, b: torch.Tensor):
    """W (xhat * g + b) + c = (W * g) xhat + (W b + c)."""
    w32 = weight.float()
    new_b = w32 @ b.float() + (bias.float() if bias is not None else 0.0)
    return w32 * g.float()[None, :], new_b


def siglip_weights(weights: Weights, v: VisionSpec, dt: torch.dtype, c: bool) -> SiglipWeights:
    """LayerNorm affines folded into the next weight and bias, Q, K, V fused with the attention
    scale folded into Q."""
    vscale = (v.width // v.num_heads) ** -0.5
    layers = []
    for i in range(v.depth):
        p = f"vision.layers.{i}."
        g1, b1 = take(weights, p + "ln1.weight", c), take(weights, p + "ln1.bias", c)
        ws, bs = [], []
        for n, s in (("q", vscale), ("k", 1.0), ("v", 1.0)):
            wf, bf = fold_ln(take(weights, p + n + ".weight", c), take(weights, p + n + ".bias", c), g1, b1)
            ws.append(wf * s)
            bs.append(bf * s)
        g2, b2 = take(weights, p + "ln2.weight", c), take(weights, p + "ln2.bias", c)
        w1, bb1 = fold_ln(take(weights, p + "fc1.weight", c), take(weights, p + "fc1.bias", c), g2, b2)
        layers.append(VisionLayer(
            w_qkv=torch.cat(ws).to(dt), b_qkv=torch.cat(bs).to(dt),
            w_o=take(weights, p + "o.weight", c).to(dt), b_o=take(weights, p + "o.bias", c).to(dt),
            w_fc1=w1.to(dt), b_fc1=bb1.to(dt),
            w_fc2=take(weights, p + "fc2.weight", c).to(dt), b_fc2=take(weights, p + "fc2.bias", c).to(dt),
        ))
    patch_w = take(weights, "vision.patch.weight", c).reshape(v.width, -1).to(dt)
    patch_b = take(weights, "vision.patch.bias", c).to(dt)
    pos = take(weights, "vision.pos", c).to(dt)
    wp, bp = fold_ln(take(weights, "projector.weight", c), take(weights, "projector.bias", c),
                     take(weights, "vision.post_ln.weight", c), take(weights, "vision.post_ln.bias", c))
    return SiglipWeights(patch_w, patch_b, pos, layers, wp.to(dt), bp.to(dt))


def gemma_layers(w: Weights, prefix: str, spec: GemmaSpec, dt: torch.dtype, c: bool,
                 kv_only_last: bool) -> List[GemmaLayer]:
    """Q, K, V fused (scale folded into Q), gate and up fused, RMSNorm affines folded; with
    kv_only_last the last layer keeps only its K/V rows (nothing reads its output)."""
    scale = spec.head_dim**-0.5
    layers = []
    for i in range(spec.depth):
        p = f"{prefix}.layers.{i}."
        ln_a, ln_m = take(w, p + "ln_attn", c), take(w, p + "ln_mlp", c)
        last_kv = kv_only_last and i == spec.depth - 1
        q = take(w, p + "q", c)
        parts = [] if last_kv else [q.float() * scale]
        parts += [take(w, p + "k", c).float(), take(w, p + "v", c).float()]
        w_qkv = fold_rms(torch.cat(parts), ln_a).to(dt)
        del q
        o, gate, up, down = (take(w, p + n, c) for n in ("o", "gate", "up", "down"))
        if last_kv:
            layers.append(GemmaLayer(w_qkv=w_qkv, w_o=None, w_gate_up=None, w_down=None, kv_only=True))
            continue
        gu = fold_rms(torch.cat([gate, up]), ln_m).to(dt)
        del gate, up
        layers.append(GemmaLayer(w_qkv=w_qkv, w_o=o.to(dt), w_gate_up=gu, w_down=down.to(dt)))
    return layers
