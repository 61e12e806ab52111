"""The prepared fast path for pi0.5, built once from the plain weights.

The prefix (SigLIP + VLM into the KV cache, the VLM's last layer K/V only) is FastPi0's. The
action expert's rewrites, each checked against PlainPi05 in test/engine/test_pi05_equivalence.py:
- tabulated per-step conditioning: the flow times of the Euler loop are fixed and shared by every
  robot of a batch, so cond(t_s) and from it every adaRMS layer's (1 + scale, shift, gate) are
  computed once at load for the num_steps times ([num_steps, width] tables per norm);
- the final adaRMS folded into action_out as far as it goes: dt scales the weight (the GEMM
  yields the Euler update dt * v directly) and the shift becomes a per-step bias
  (W (n (1 + sc) + sh) = W (n (1 + sc)) + W sh); the (1 + scale) is per input column and per
  step, so it stays on the activation (folding it would mean a copy of the weight per step);
- Q, K, V fused into one matmul with the attention scale folded into Q; gate and up fused;
- the gated residuals are one addcmul each;
- the prefix KV cache is copied once into static buffers that each step's action K/V overwrite;
- on the CPU in fp32 the expert's weights are also prepacked for oneDNN (FastPi0._pack; the
  dense ones stay for real-time chunking's autograd), GELU and the gated product in the GEMM
  epilogues; attention skips the mask when no key is padded.
Not applicable from pi0: the state token (pi0.5 has none) and the folded action-time MLP (the
action tokens are action_in(x_t) alone). All GEMMs go through physai_ros.kernels.ops with
`backend=` (torch or triton).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F

from physai_ros.engine.checkpoint.params import Weights
from physai_ros.engine.pi0.fast import FastPi0
from physai_ros.engine.pi0.fast_weights import take
from physai_ros.engine.pi0.modeling import sincos_time_embedding
from physai_ros.engine.types import PrefixCache
from physai_ros.kernels import onednn, ops


@dataclass
class AdaNorm:
    """One adaRMS norm's per-step modulation, tabulated: each [num_steps, width]."""

    scale1p: torch.Tensor
    shift: torch.Tensor
    gate: torch.Tensor


@dataclass
class Pi05ExpertLayer:
    w_qkv: torch.Tensor  # [(H + 2 KV) hd, D], Q rows pre-scaled by head_dim ** -0.5
    w_o: torch.Tensor
    w_gate_up: torch.Tensor  # [2 F, D]
    w_down: torch.Tensor
    attn_norm: AdaNorm
    mlp_norm: AdaNorm
    packed: Optional[Dict[str, torch.Tensor]] = None  # oneDNN: qkv, o, gate, up, down


def _modulation(cond: torch.Tensor, w: torch.Tensor, b: torch.Tensor, dt) -> AdaNorm:
    scale, shift, gate = F.linear(cond, w.float(), b.float()).chunk(3, dim=-1)
    return AdaNorm(scale1p=(1 + scale).to(dt), shift=shift.to(dt), gate=gate.to(dt))


class FastPi05(FastPi0):
    def __init__(self, config, weights: Weights, **kwargs):
        if config.policy != "pi05":
            raise ValueError(f"FastPi05 needs a pi05 config, got policy {config.policy!r}")
        super().__init__(config, weights, **kwargs)

    def _prepare_expert(self, weights: Weights, c: bool) -> None:
        cfg, dt, spec = self.cfg, self.dtype, self.cfg.expert
        # cond(t_s) for every step, in float32 exactly as the plain path forms it per call.
        times = torch.tensor(cfg.step_times(), dtype=torch.float32)
        temb = sincos_time_embedding(times, spec.width, cfg.min_period, cfg.max_period).to(torch.float32)
        w_ti, b_ti = take(weights, "time_in.weight", c).float(), take(weights, "time_in.bias", c).float()
        w_to, b_to = take(weights, "time_out.weight", c).float(), take(weights, "time_out.bias", c).float()
        cond = F.silu(F.linear(F.silu(F.linear(temb.to(w_ti.device), w_ti, b_ti)), w_to, b_to))
        scale = spec.head_dim**-0.5
        self.expert_layers: List[Pi05ExpertLayer] = []
        for i in range(spec.depth):
            p = f"expert.layers.{i}."
            w_qkv = torch.cat([take(weights, p + "q", c).float() * scale, take(weights, p + "k", c).float(),
                               take(weights, p + "v", c).float()]).to(dt)
            w_gu = torch.cat([take(weights, p + "gate", c), take(weights, p + "up", c)]).to(dt)
            self.expert_layers.append(Pi05ExpertLayer(
                w_qkv=w_qkv, w_o=take(weights, p + "o", c).to(dt), w_gate_up=w_gu,
                w_down=take(weights, p + "down", c).to(dt),
                attn_norm=_modulation(cond, take(weights, p + "ada_attn.weight", c), take(weights, p + "ada_attn.bias", c), dt),
                mlp_norm=_modulation(cond, take(weights, p + "ada_mlp.weight", c), take(weights, p + "ada_mlp.bias", c), dt),
            ))
        final = _modulation(cond, take(weights, "expert.ada_norm.weight", c), take(weights, "expert.ada_norm.bias", c), dt)
        self.final_scale1p = final.scale1p
        w_out = take(weights, "action_out.weight", c).double()
        b_out = take(weights, "action_out.bias", c).double()
        self.out_w = (w_out * cfg.dt).to(dt)
        self.out_b_table = ((final.shift.double() @ w_out.T + b_out) * cfg.dt).to(dt)  # [num_steps, A]
        self.act_in_w = take(weights, "action_in.weight", c).to(dt)
        self.act_in_b = take(weights, "action_in.bias", c).to(dt)

    def _pack_expert_layer(self, layer: Pi05ExpertLayer) -> None:
        f = layer.w_gate_up.shape[0] // 2
        layer.packed = {k: onednn.pack(w) for k, w in (("qkv", layer.w_qkv), ("o", layer.w_o),
                        ("gate", layer.w_gate_up[:f]), ("up", layer.w_gate_up[f:]), ("down", layer.w_down))}

    def _ada(self, x: torch.Tensor, norm: AdaNorm, s: int, backend: str) -> torch.Tensor:
        """adaRMS at step s: x * rsqrt(mean(x^2) + eps) * (1 + scale_s) + shift_s."""
        rs = ops.rms_row_scale(x, self.cfg.rms_eps, backend=backend)
        return torch.addcmul(norm.shift[s], x * rs.unsqueeze(-1).to(x.dtype), norm.scale1p[s])

    def _expert_layer(self, layer: Pi05ExpertLayer, s: int, x, cos, sin, kv_sink, be: str):
        spec = self.cfg.expert
        pk = self._packed_for(layer.packed, x, be)
        h = self._ada(x, layer.attn_norm, s, be)
        if pk is not None:
            q, k, v = self._qkv_packed(pk["qkv"], h, cos, sin, spec)
        else:
            q, k, v = ops.qkv_rope(h, layer.w_qkv, cos, sin, spec.num_heads, spec.num_kv_heads, spec.head_dim, backend=be)
        k_all, v_all, mask = kv_sink(k, v)
        a = self._attention(q, k_all, v_all, mask, be).reshape(x.shape[0], x.shape[1], -1)
        if pk is not None:
            x = torch.addcmul(x, onednn.linear(a, pk["o"]), layer.attn_norm.gate[s])
            h = self._ada(x, layer.mlp_norm, s, be)
            f = onednn.linear(h, pk["up"], mul=onednn.linear(h, pk["gate"], activation="gelu_tanh"))
            return torch.addcmul(x, onednn.linear(f, pk["down"]), layer.mlp_norm.gate[s])
        x = torch.addcmul(x, ops.linear(a, layer.w_o, backend=be), layer.attn_norm.gate[s])
        f = ops.gated_ffn(self._ada(x, layer.mlp_norm, s, be), layer.w_gate_up, activation="gelu_tanh", backend=be)
        return torch.addcmul(x, ops.linear(f, layer.w_down, backend=be), layer.mlp_norm.gate[s])

    def _action_step(self, s: int, xt: torch.Tensor, cos, sin, sink_of, backend: str) -> torch.Tensor:
        """dt * v at Euler step s for x_t [B, C, A] (fp32); sink_of(i) is expert layer i's
        kv_sink (the static buffers, or RTC's differentiable concatenation)."""
        h = ops.linear(xt.to(self.dtype), self.act_in_w, self.act_in_b, backend=backend)
        for i, layer in enumerate(self.expert_layers):
            h = self._expert_layer(layer, s, h, cos, sin, sink_of(i), backend)
        rs = ops.rms_row_scale(h, self.cfg.rms_eps, backend=backend)
        hin = h * self.final_scale1p[s]
        return ops.linear(hin, self.out_w, self.out_b_table[s], row_scale=rs, backend=backend).float()

    def denoise_buffers(self, cache: PrefixCache, chunk: int):
        """Static K/V buffers [prefix | actions] per expert layer, the attention mask and the
        action tokens' RoPE tables."""
        spec, dev, dt = self.cfg.expert, cache.pad.device, self.dtype
        b, t_pre = cache.pad.shape
        total = t_pre + chunk
        kbuf = [torch.empty(b, total, spec.num_kv_heads, spec.head_dim, dtype=dt, device=dev) for _ in self.expert_layers]
        vbuf = [torch.empty(b, total, spec.num_kv_heads, spec.head_dim, dtype=dt, device=dev) for _ in self.expert_layers]
        for i in range(len(self.expert_layers)):
            kbuf[i][:, :t_pre] = cache.keys[i]
            vbuf[i][:, :t_pre] = cache.values[i]
        valid = torch.cat([cache.pad, torch.ones(b, chunk, dtype=torch.bool, device=dev)], dim=1)
        mask = valid[:, None, :].expand(b, chunk, total)  # RTC's guided rows always take it
        apos = cache.next_pos[:, None] + torch.arange(chunk, device=dev)[None]
        return kbuf, vbuf, mask, self.rope_cos[apos], self.rope_sin[apos], t_pre

    @torch.no_grad()
    def denoise(self, cache: PrefixCache, state, noise, rtc=None) -> Tuple[torch.Tensor, torch.Tensor]:
        """Euler from noise [B, C, A] at t=1 to t=0; `state` is unused (it is in the prompt).
        rtc: one Optional[RtcGuide] per robot (real-time chunking, rtc.py), as FastPi0: guided
        rows run a differentiable torch-ops copy of the step, the others the ordinary one."""
        kbuf, vbuf, mask, cos, sin, t_pre = self.denoise_buffers(cache, noise.shape[1])
        sink_mask = None if self._no_padding(cache.pad) else mask  # no padded key: attend unmasked

        def buffer_sink(i):
            def sink(k, v):
                kbuf[i][:, t_pre:] = k
                vbuf[i][:, t_pre:] = v
                return kbuf[i], vbuf[i], sink_mask
            return sink

        return self._euler(noise, rtc, kbuf, vbuf, t_pre, mask, cos, sin, buffer_sink)
