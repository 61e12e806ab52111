"""The plain pi0.5 path: LeRobot 0.6.1's PI05 inference math (`policies/pi05/modeling_pi05.py`,
`policies/pi_gemma.py`), written literally in torch over our weight dict. Like PlainPi0 it is
the reference the fast path is tested against.

What differs from pi0 (everything else, the SigLIP + PaliGemma prefix and its KV cache, is
shared with PlainPi0):
- no state token: the robot state is discretised into the prompt as text by the preprocessor
  (physai_ros.engine.pi05_prompt), so the suffix is the chunk's action tokens only, all in one
  attention block: each action token sees the valid prefix and every action token; RoPE
  positions continue after the valid prefix (n_valid + 0..C-1);
- the action tokens are `action_in(x_t)` alone; the flow time t enters through a conditioning
  vector cond = silu(time_out(silu(time_in(sincos(t))))) [B, width];
- every RMSNorm of the expert is adaptive (adaRMS): no weight; a dense layer maps cond to
  [scale | shift | gate] and the norm returns x * rsqrt(mean(x^2) + eps) * (1 + scale) + shift;
  the residual after attention and after the MLP is gated: x + y * gate. The final norm is
  adaptive too (its gate is unused).
"""
from __future__ import annotations

from typing import Tuple

import torch
import torch.nn.functional as F

from physai_ros.engine.pi0.modeling import (PlainPi0, attention, gemma_mlp, gemma_qkv, lin, lin_nb, rope_cos_sin,
                                            sincos_time_embedding)
from physai_ros.engine.types import PrefixCache


def ada_rms_norm(x: torch.Tensor, cond: torch.Tensor, dense_w: torch.Tensor, dense_b: torch.Tensor,
                 eps: float) -> Tuple[torch.Tensor, torch.Tensor]:
    """(normed, gate) for x [B, T, D] and cond [B, D]: scale/shift/gate from one dense layer."""
    var = x.float().pow(2).mean(-1, keepdim=True)
    normed = x * torch.rsqrt(var + eps)
    scale, shift, gate = F.linear(cond, dense_w, dense_b)[:, None].chunk(3, dim=-1)
    return (normed * (1 + scale.float()) + shift.float()).to(x.dtype), gate.to(x.dtype)


def time_condition(w, cfg, t: torch.Tensor) -> torch.Tensor:
    """cond [B, expert width] for flow times t [B] (fp32)."""
    temb = sincos_time_embedding(t, cfg.expert.width, cfg.min_period, cfg.max_period).to(w["time_in.weight"].dtype)
    return F.silu(lin(F.silu(lin(temb, w, "time_in")), w, "time_out"))


class PlainPi05(PlainPi0):
    """Reference pi0.5: `prefix` is pi0's; `velocity` is the adaRMS expert. `state` is accepted
    by `denoise`/`velocity` for one model interface and not read (it is in the prompt)."""

    def __init__(self, config, weights):
        if config.policy != "pi05":
            raise ValueError(f"PlainPi05 needs a pi05 config, got policy {config.policy!r}")
        super().__init__(config, weights)

    def velocity(self, cache: PrefixCache, state, x_t, t) -> torch.Tensor:
        """One expert forward: v_t [B, C, A] for x_t [B, C, A] at times t [B] (fp32). Not under
        no_grad, so guidance (real-time chunking) can differentiate through it."""
        cfg, w, spec = self.cfg, self.w, self.cfg.expert
        eps = cfg.rms_eps
        x = lin(x_t.to(w["action_in.weight"].dtype), w, "action_in")  # fp32 Euler sum, bf16 layers
        cond = time_condition(w, cfg, t).to(x.dtype)
        b, c, _ = x.shape
        allowed = torch.cat([cache.pad[:, None, :].expand(b, c, -1),
                             torch.ones(b, c, c, dtype=torch.bool, device=x.device)], dim=2)
        pos = cache.next_pos[:, None] + torch.arange(c, device=x.device)[None]
        cos, sin = rope_cos_sin(pos, cfg, x.dtype)
        for i in range(spec.depth):
            p = f"expert.layers.{i}."
            h, gate = ada_rms_norm(x, cond, w[p + "ada_attn.weight"], w[p + "ada_attn.bias"], eps)
            q, k, v = gemma_qkv(w, p, spec, h, cos, sin)
            k = torch.cat([cache.keys[i].transpose(1, 2), k], dim=2)
            v = torch.cat([cache.values[i].transpose(1, 2), v], dim=2)
            x = x + lin_nb(attention(q, k, v, allowed, spec.head_dim**-0.5), w[p + "o"]) * gate
            h, gate = ada_rms_norm(x, cond, w[p + "ada_mlp.weight"], w[p + "ada_mlp.bias"], eps)
            x = x + gemma_mlp(w, p, h) * gate
        x, _ = ada_rms_norm(x, cond, w["expert.ada_norm.weight"], w["expert.ada_norm.bias"], eps)
        return lin(x.to(w["action_out.weight"].dtype), w, "action_out")
