"""The plain pi0 path: LeRobot's PI0 inference math (lerobot 0.6.1 with transformers 5.5),
written literally in torch over our weight dict. It is the reference every fast-path rewrite is
tested against, so it favours obviousness over speed.

Semantics that are easy to get wrong (see docs/engine.md and docs/lerobot_reference.md):
- image tokens are the projector output, unscaled; prompt embeddings are scaled by sqrt(width)
  (transformers 5 GemmaTextScaledWordEmbedding); the expert's inputs are not scaled;
- the prefix is bidirectional over valid tokens; RoPE positions are cumsum(valid) - 1, so
  padding (a missing camera, a short prompt) never shifts a robot's positions;
- suffix = [state, action_1..action_C] with block-causal masking: the state token sees the
  prefix and itself, action tokens see the prefix, the state and each other; suffix positions
  continue after the number of valid prefix tokens;
- masked scores get LeRobot's additive constant (not -inf), softmax in fp32;
- Euler from t=1 to 0 with dt=-1/num_steps, t = 1.0 + step*dt as LeRobot computes it.
"""
from __future__ import annotations

import math
from typing import List, Tuple

import torch
import torch.nn.functional as F

from physai_ros.engine.checkpoint.params import Weights
from physai_ros.engine.rtc import RtcBatch, guided_velocity, select_rows
from physai_ros.engine.types import GemmaSpec, Pi0Config, PrefixCache

# openpi / LeRobot OPENPI_ATTENTION_MASK_VALUE: large negative but finite, so a fully masked
# row (a padding query) gives a uniform softmax instead of NaN.
MASK_VALUE = -2.3819763e38


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    var = x.float().pow(2).mean(-1, keepdim=True)
    return (x * torch.rsqrt(var + eps) * (1.0 + w.float())).type_as(x)


def lin(x: torch.Tensor, w: Weights, name: str) -> torch.Tensor:
    return F.linear(x, w[name + ".weight"], w.get(name + ".bias"))


def rope_angles(pos: torch.Tensor, head_dim: int, theta: float, style: str) -> torch.Tensor:
    """float32 angles [..., head_dim / 2] for integer positions, in the reference's formula."""
    if style == "divide":
        exponents = (2.0 / head_dim) * torch.arange(head_dim // 2, dtype=torch.float32, device=pos.device)
        return pos.to(torch.float32)[..., None] / (theta**exponents)[None, :]
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    return pos.float()[..., None] * inv_freq.to(pos.device)


def rope_cos_sin(pos: torch.Tensor, cfg: Pi0Config, dtype) -> Tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [B, T, head_dim] for integer positions [B, T] (rotate-half layout)."""
    ang = rope_angles(pos, cfg.vlm.head_dim, cfg.rope_theta, cfg.rope_style)
    emb = torch.cat([ang, ang], dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [B, H, T, hd]; cos/sin [B, T, hd]; rotate-half convention."""
    half = x.shape[-1] // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos[:, None] + rot * sin[:, None]


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed, scale: float) -> torch.Tensor:
    """Grouped-query attention. q [B, H, Tq, hd], k/v [B, KV, Tk, hd], allowed bool [B, Tq, Tk]
    or None. Query head h reads KV head h // (H / KV), as transformers' repeat_kv does.
    Returns [B, Tq, H * hd]."""
    b, h, tq, hd = q.shape
    kv = k.shape[1]
    qg = q.reshape(b, kv, h // kv, tq, hd)
    scores = torch.matmul(qg, k[:, :, None].transpose(-1, -2)) * scale
    if allowed is not None:
        bias = torch.zeros(allowed.shape, dtype=scores.dtype, device=scores.device)
        bias.masked_fill_(~allowed, MASK_VALUE)
        scores = scores + bias[:, None, None]
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
    out = torch.matmul(probs, v[:, :, None])  # [B, KV, r, Tq, hd]
    return out.reshape(b, h, tq, hd).transpose(1, 2).reshape(b, tq, h * hd)


def siglip(w: Weights, cfg: Pi0Config, images: torch.Tensor) -> torch.Tensor:
    """images [N, 3, S, S] in [-1, 1] -> projected image tokens [N, P, vlm_width]."""
    v = cfg.vision
    x = F.conv2d(images.to(w["vision.patch.weight"].dtype), w["vision.patch.weight"], w["vision.patch.bias"], stride=v.patch_size)
    x = x.flatten(2).transpose(1, 2) + w["vision.pos"][None]
    n, t, d = x.shape
    hd = d // v.num_heads
    for i in range(v.depth):
        p = f"vision.layers.{i}."
        h = F.layer_norm(x, (d,), w[p + "ln1.weight"], w[p + "ln1.bias"], cfg.layer_norm_eps)
        q, k, vv = (lin(h, w, p + n_).view(n, t, v.num_heads, hd).transpose(1, 2) for n_ in ("q", "k", "v"))
        x = x + lin(attention(q, k, vv, None, hd**-0.5), w, p + "o")
        h = F.layer_norm(x, (d,), w[p + "ln2.weight"], w[p + "ln2.bias"], cfg.layer_norm_eps)
        x = x + lin(F.gelu(lin(h, w, p + "fc1"), approximate="tanh"), w, p + "fc2")
    x = F.layer_norm(x, (d,), w["vision.post_ln.weight"], w["vision.post_ln.bias"], cfg.layer_norm_eps)
    return lin(x, w, "projector")


def embed_prefix(w, cfg, images, image_masks, tokens, token_mask):
    """[B, V*P + L, D] embeddings and the bool valid mask [B, V*P + L]."""
    b, nv = images.shape[:2]
    img = siglip(w, cfg, images.flatten(0, 1))
    npatch = img.shape[1]
    img = img.reshape(b, nv * npatch, -1)
    img_pad = image_masks[:, :, None].expand(b, nv, npatch).reshape(b, nv * npatch)
    table = w["vlm.embed"]
    lang = table[tokens] * torch.tensor(math.sqrt(cfg.vlm.width), dtype=table.dtype)
    return torch.cat([img, lang.to(img.dtype)], dim=1), torch.cat([img_pad, token_mask], dim=1)


def gemma_qkv(w, prefix: str, spec: GemmaSpec, h, cos, sin):
    b, t, _ = h.shape
    q = lin_nb(h, w[prefix + "q"]).view(b, t, spec.num_heads, spec.head_dim).transpose(1, 2)
    k = lin_nb(h, w[prefix + "k"]).view(b, t, spec.num_kv_heads, spec.head_dim).transpose(1, 2)
    v = lin_nb(h, w[prefix + "v"]).view(b, t, spec.num_kv_heads, spec.head_dim).transpose(1, 2)
    return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v


def lin_nb(x, weight):
    return F.linear(x, weight)


def gemma_mlp(w, prefix: str, h):
    return lin_nb(F.gelu(lin_nb(h, w[prefix + "gate"]), approximate="tanh") * lin_nb(h, w[prefix + "up"]), w[prefix + "down"])


def gemma_over_cache(w, prefix: str, spec: GemmaSpec, cfg: Pi0Config, x, cache: PrefixCache, allowed, cos, sin):
    """The Gemma layers `prefix`.layers.* over suffix tokens x [B, S, D] that attend to the
    prefix cache's per-layer K/V and to each other as `allowed` [B, S, P + S] says: the action
    expert's suffix (velocity) and a text block on the VLM (training.text_loss)."""
    for i in range(spec.depth):
        p = f"{prefix}.layers.{i}."
        h = rms_norm(x, w[p + "ln_attn"], cfg.rms_eps)
        q, k, v = gemma_qkv(w, p, spec, h, cos, sin)
        k = torch.cat([cache.keys[i].transpose(1, 2), k], dim=2)
        v = torch.cat([cache.values[i].transpose(1, 2), v], dim=2)
        x = x + lin_nb(attention(q, k, v, allowed, spec.head_dim**-0.5), w[p + "o"])
        x = x + gemma_mlp(w, p, rms_norm(x, w[p + "ln_mlp"], cfg.rms_eps))
    return x


class PlainPi0:
    """Reference implementation. `prefix` runs SigLIP + the VLM into a KV cache; `denoise` runs
    the 10 Euler steps of the action expert against it."""

    def __init__(self, config: Pi0Config, weights: Weights):
        config.validate()
        self.cfg = config
        self.w = weights

    @torch.no_grad()
    def prefix(self, images, image_masks, tokens, token_mask) -> PrefixCache:
        cfg, w, spec = self.cfg, self.w, self.cfg.vlm
        x, pad = embed_prefix(w, cfg, images, image_masks, tokens, token_mask)
        pos = torch.cumsum(pad.long(), dim=1) - 1
        allowed = pad[:, None, :] & pad[:, :, None]
        cos, sin = rope_cos_sin(pos, cfg, x.dtype)
        keys, values = [], []
        for i in range(spec.depth):
            p = f"vlm.layers.{i}."
            h = rms_norm(x, w[p + "ln_attn"], cfg.rms_eps)
            q, k, v = gemma_qkv(w, p, spec, h, cos, sin)
            keys.append(k.transpose(1, 2))
            values.append(v.transpose(1, 2))
            x = x + lin_nb(attention(q, k, v, allowed, spec.head_dim**-0.5), w[p + "o"])
            x = x + gemma_mlp(w, p, rms_norm(x, w[p + "ln_mlp"], cfg.rms_eps))
        # LeRobot also applies the final norm here; its output is never read, so we stop.
        return PrefixCache(keys=keys, values=values, pad=pad, next_pos=pad.long().sum(1))

    def embed_suffix(self, state, x_t, t):
        cfg, w = self.cfg, self.w
        # The Euler sum runs in fp32 (denoise); the layers take the weights' dtype (bf16 models).
        wd = w["action_in.weight"].dtype
        state_emb = lin(state.to(wd), w, "state_proj")[:, None]
        temb = sincos_time_embedding(t, cfg.expert.width, cfg.min_period, cfg.max_period).to(t.dtype)
        a = lin(x_t.to(wd), w, "action_in")
        at = torch.cat([a, temb[:, None].expand_as(a).to(a.dtype)], dim=2)
        at = lin(F.silu(lin(at, w, "action_time_in")), w, "action_time_out")
        return torch.cat([state_emb, at], dim=1)

    @torch.no_grad()
    def velocity(self, cache: PrefixCache, state, x_t, t) -> torch.Tensor:
        """One expert forward: v_t [B, C, A] for x_t [B, C, A] at times t [B] (fp32)."""
        cfg, w, spec = self.cfg, self.w, self.cfg.expert
        x = self.embed_suffix(state, x_t, t)
        b, s, _ = x.shape
        c = s - 1
        # Block-causal suffix: the state (block 1) sees only itself; actions (block 2) see all.
        suffix_allowed = torch.ones(s, s, dtype=torch.bool, device=x.device)
        suffix_allowed[0, 1:] = False
        allowed = torch.cat([cache.pad[:, None, :].expand(b, s, -1), suffix_allowed.expand(b, s, s)], dim=2)
        pos = cache.next_pos[:, None] + torch.arange(s, device=x.device)[None]
        cos, sin = rope_cos_sin(pos, cfg, x.dtype)
        x = gemma_over_cache(w, "expert", spec, cfg, x, cache, allowed, cos, sin)
        x = rms_norm(x, w["expert.norm"], cfg.rms_eps)
        return lin(x[:, -c:].to(w["action_out.weight"].dtype), w, "action_out")

    def velocity_with_grad(self, cache: PrefixCache, state, x_t, t) -> torch.Tensor:
        """This model's `velocity` without its no_grad wrapper (a subclass's too, e.g. pi0.5):
        real-time chunking (rtc.py) differentiates through it."""
        fn = type(self).velocity
        return getattr(fn, "__wrapped__", fn)(self, cache, state, x_t, t)

    @torch.no_grad()
    def denoise(self, cache: PrefixCache, state, noise, rtc=None) -> Tuple[torch.Tensor, torch.Tensor]:
        """Euler from noise [B, C, A] at t=1 to t=0. Returns (actions, updates [steps, B, C, A]).
        rtc: one Optional[RtcGuide] per robot (real-time chunking, rtc.py); robots without one
        get exactly what they get without the argument."""
        cfg = self.cfg
        plan = RtcBatch.build(rtc, noise.device) if rtc is not None else None
        if plan is not None:
            sub_cache = select_rows(cache, plan.rows)
            with torch.inference_mode(False):
                sub_state = state[plan.rows]
        x = noise
        updates: List[torch.Tensor] = []
        for t in cfg.step_times():
            tt = torch.tensor(t, dtype=torch.float32, device=x.device).expand(x.shape[0])
            if plan is None:
                u = cfg.dt * self.velocity(cache, state, x, tt)
            else:
                base = self.velocity(cache, state, x, tt) if plan.needs_base else None
                v = guided_velocity(lambda xs, rows, t=t: self.velocity_with_grad(
                    sub_cache, sub_state, xs, torch.full((xs.shape[0],), t, dtype=torch.float32, device=xs.device)),
                    x, t, plan, base)
                u = cfg.dt * v
            x = x + u
            updates.append(u)
        return x, torch.stack(updates)


def sincos_time_embedding(t: torch.Tensor, dim: int, min_period: float, max_period: float) -> torch.Tensor:
    """[B, dim] sin-cos embedding of flow times t [B], computed in float64 like LeRobot (on CPU;
    LeRobot falls back to float32 only on devices without float64)."""
    dtype = torch.float64 if t.device.type in ("cpu", "cuda") else torch.float32
    fraction = torch.linspace(0.0, 1.0, dim // 2, dtype=dtype, device=t.device)
    period = min_period * (max_period / min_period) ** fraction
    arg = (1.0 / period * 2 * math.pi)[None, :] * t[:, None]
    return torch.cat([torch.sin(arg), torch.cos(arg)], dim=1)
