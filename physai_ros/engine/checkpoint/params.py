"""Our tensor names for pi0 and their shapes: the one schema that random init, the checkpoint
loader and the config inference share.

Weights are a flat dict name -> tensor. Linear weights are [out, in] like torch.nn.Linear.
Norm weights are stored as checkpoints store them (Gemma RMSNorm's w, applied as 1 + w).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Dict, Tuple

import torch

from physai_ros.engine.types import GemmaSpec, Pi0Config, VisionSpec

Weights = Dict[str, torch.Tensor]

def vision_shapes(v: VisionSpec, out_width: int) -> Dict[str, Tuple[int, ...]]:
    s = {
        "vision.patch.weight": (v.width, 3, v.patch_size, v.patch_size),
        "vision.patch.bias": (v.width,),
        "vision.pos": (v.num_tokens, v.width),
        "vision.post_ln.weight": (v.width,),
        "vision.post_ln.bias": (v.width,),
        "projector.weight": (out_width, v.width),
        "projector.bias": (out_width,),
    }
    for i in range(v.depth):
        p = f"vision.layers.{i}."
        for n in ("ln1", "ln2"):
            s[p + n + ".weight"] = (v.width,)
            s[p + n + ".bias"] = (v.width,)
        for n in ("q", "k", "v", "o"):
            s[p + n + ".weight"] = (v.width, v.width)
            s[p + n + ".bias"] = (v.width,)
        s[p + "fc1.weight"] = (v.mlp_dim, v.width)
        s[p + "fc1.bias"] = (v.mlp_dim,)
        s[p + "fc2.weight"] = (v.width, v.mlp_dim)
        s[p + "fc2.bias"] = (v.width,)
    return s


def gemma_shapes(prefix: str, g: GemmaSpec) -> Dict[str, Tuple[int, ...]]:
    s = {f"{prefix}.norm": (g.width,)}
    for i in range(g.depth):
        p = f"{prefix}.layers.{i}."
        s[p + "ln_attn"] = (g.width,)
        s[p + "ln_mlp"] = (g.width,)
        s[p + "q"] = (g.num_heads * g.head_dim, g.width)
        s[p + "k"] = (g.num_kv_heads * g.head_dim, g.width)
        s[p + "v"] = (g.num_kv_heads * g.head_dim, g.width)
        s[p + "o"] = (g.width, g.num_heads * g.head_dim)
        s[p + "gate"] = (g.mlp_dim, g.width)
        s[p + "up"] = (g.mlp_dim, g.width)
        s[p + "down"] = (g.width, g.mlp_dim)
    return s


def adarms_expert_shapes(g: GemmaSpec) -> Dict[str, Tuple[int, ...]]:
    """pi0.5's action expert: every RMSNorm is adaptive. Instead of a weight w (applied as 1 + w)
    it has a dense layer from the time conditioning to [scale | shift | gate] (3 * width)."""
    s = gemma_shapes("expert", g)
    for name in [n for n in s if n.endswith(("ln_attn", "ln_mlp")) or n == "expert.norm"]:
        del s[name]
    for i in range(g.depth):
        for n in ("ada_attn", "ada_mlp"):
            s[f"expert.layers.{i}.{n}.weight"] = (3 * g.width, g.width)
            s[f"expert.layers.{i}.{n}.bias"] = (3 * g.width,)
    s["expert.ada_norm.weight"] = (3 * g.width, g.width)
    s["expert.ada_norm.bias"] = (3 * g.width,)
    return s


def param_shapes(cfg: Pi0Config) -> Dict[str, Tuple[int, ...]]:
    """Every tensor of a pi0 / pi0.5 checkpoint we map, by our name, with its shape. `vlm.norm`
    is among them (checkpoints carry it) though inference never reads it: the prefix's final
    norm feeds only the VLM's token head."""
    d, e = cfg.vlm.width, cfg.expert.width
    s = vision_shapes(cfg.vision, d)
    s["vlm.embed"] = (cfg.vocab_size, d)
    s.update(gemma_shapes("vlm", cfg.vlm))
    if cfg.policy == "pi05":
        s.update(adarms_expert_shapes(cfg.expert))
        linears = {
            "action_in": (e, cfg.max_action_dim),
            "time_in": (e, e),
            "time_out": (e, e),
            "action_out": (cfg.max_action_dim, e),
        }
    else:
        s.update(gemma_shapes("expert", cfg.expert))
        linears = {
            "state_proj": (e, cfg.max_state_dim),
            "action_in": (e, cfg.max_action_dim),
            "action_time_in": (e, 2 * e),
            "action_time_out": (e, e),
            "action_out": (cfg.max_action_dim, e),
        }
    for name, (o, i) in linears.items():
        s[name + ".weight"] = (o, i)
        s[name + ".bias"] = (o,)
    return s


def random_weights(cfg: Pi0Config, seed: int = 0, dtype: torch.dtype = torch.float32, device="cpu") -> Weights:
    """Random weights with activations of a sane scale (for tests and benchmarks).

    Norm weights and biases are random too (not LeRobot's zeros/ones), so that every folding
    rewrite of the fast path is exercised by the equivalence tests. device: where they are drawn
    (a full pi0 is 3.5 G numbers: drawn on the GPU it takes a second instead of a minute on the
    CPU; another device's generator draws other numbers for the same seed).
    """
    cfg.validate()
    gen = torch.Generator(device).manual_seed(seed)
    out: Weights = {}
    for name, shape in param_shapes(cfg).items():
        if len(shape) == 1 or name == "vision.pos":
            std = 0.1
        elif name == "vlm.embed":
            std = 1.0 / math.sqrt(shape[1])
        else:
            fan_in = math.prod(shape[1:])
            std = 1.0 / math.sqrt(fan_in)
        out[name] = (torch.randn(shape, generator=gen, device=device) * std).to(dtype)
    return out


def _spec_from(shapes: Dict[str, Tuple[int, ...]], prefix: str, head_dim: int) -> GemmaSpec:
    depth = 0
    while f"{prefix}.layers.{depth}.q" in shapes:
        depth += 1
    if depth == 0:
        raise KeyError(f"no {prefix} layers found")
    q, k = shapes[f"{prefix}.layers.0.q"], shapes[f"{prefix}.layers.0.k"]
    return GemmaSpec(
        width=q[1],
        depth=depth,
        mlp_dim=shapes[f"{prefix}.layers.0.gate"][0],
        num_heads=q[0] // head_dim,
        num_kv_heads=k[0] // head_dim,
        head_dim=head_dim,
    )


def infer_config(shapes: Dict[str, Tuple[int, ...]], head_dim: int, vision_heads: int, **fields) -> Pi0Config:
    """Sizes from tensor shapes. Head counts are not visible in fused projection shapes, so the
    head dim (Gemma) and the vision head count come from the caller (LeRobot's defaults: 256, 16)."""
    vdepth = 0
    while f"vision.layers.{vdepth}.q.weight" in shapes:
        vdepth += 1
    patch = shapes["vision.patch.weight"]
    ntok = shapes["vision.pos"][0]
    side = math.isqrt(ntok)
    if side * side != ntok:
        raise ValueError(f"vision.pos has {ntok} positions, not a square grid")
    vision = VisionSpec(
        width=patch[0],
        depth=vdepth,
        mlp_dim=shapes["vision.layers.0.fc1.weight"][0] if vdepth else 0,
        num_heads=vision_heads,
        patch_size=patch[2],
        image_size=side * patch[2],
    )
    base = Pi0Config(
        vlm=_spec_from(shapes, "vlm", head_dim),
        expert=_spec_from(shapes, "expert", head_dim),
        vision=vision,
        vocab_size=shapes["vlm.embed"][0],
        # pi0.5 has no state projection (the state is text in the prompt): config.json says.
        max_state_dim=shapes["state_proj.weight"][1] if "state_proj.weight" in shapes else 32,
        max_action_dim=shapes["action_in.weight"][1],
    )
    return dataclasses.replace(base, **fields) if fields else base
