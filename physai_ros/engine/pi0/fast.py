"""The prepared fast path (realtime-vla sections 3.2 and 4), built once from the plain weights.

Rewrites, each checked against the plain path in test/engine/test_engine_fast_equivalence.py:
- norm affines folded into the next linear: Gemma RMSNorm's (1 + w) into the input columns of
  QKV / gate-up / action_out, applied with the per-row rsqrt scale in the GEMM epilogue;
  SigLIP LayerNorm's (g, b) into the next weight and bias (the mean/variance part stays);
- Q, K, V fused into one matmul, gate and up into one; the attention scale folded into Q;
- SigLIP patch conv as one GEMM over patches, position embedding as the epilogue residual;
- RoPE cos/sin tabulated once for every position the engine can see;
- action-time MLP folded: action_time_in(cat(action_in(x), temb(t))) =
  (W_a W_in) x + [W_a b_in + W_t temb(t_s) + b], the bracket tabulated for the num_steps times;
- dt folded into action_out, so the GEMM yields the Euler update dt * v directly;
- the VLM's last layer computes only K and V (nothing reads its output);
- the state token does not see the action tokens (block-causal), so its K/V per expert layer
  are computed once per denoise call instead of once per step; the prefix KV cache is computed
  once and read by all steps from static buffers that the action tokens' K/V are written into;
- on the CPU in fp32 (backend "torch"), the layers' weights are prepacked once for oneDNN
  (physai_ros.kernels.onednn): torch's `mm` calls MKL, which repacks every weight per call and
  is slow on AMD; bias, GELU / SiLU, the residual add and the gated FFN's product run in the
  GEMM epilogue. SigLIP's and the VLM's dense layer weights are dropped once packed (nothing
  else reads them); the expert keeps its dense ones for real-time chunking's autograd;
- attention skips the mask when every key is valid (no padding in the batch).

All other GEMMs and gated FFNs go through physai_ros.kernels.ops with `backend=` passed through.
The folding lives in engine/pi0/fast_weights.py, attention and RoPE in engine/pi0/fast_attention.py.
"""
from __future__ import annotations

import math
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F

from physai_ros.engine.checkpoint.params import Weights
from physai_ros.engine.pi0.fast_attention import attention, rope
from physai_ros.engine.pi0.fast_weights import (GemmaLayer, VisionLayer, fold_rms, gemma_layers,
                                                siglip_weights, take)
from physai_ros.engine.pi0.modeling import rope_angles, sincos_time_embedding
from physai_ros.engine.rtc import RtcBatch, guide_rows
from physai_ros.engine.types import GemmaSpec, Pi0Config, PrefixCache
from physai_ros.kernels import onednn, ops


class FastPi0:
    def __init__(self, config: Pi0Config, weights: Weights, backend: str = "torch", consume: bool = False,
                 dtype: Optional[torch.dtype] = None, language: bool = False, pack: Optional[bool] = None):
        """Prepare from plain weights. consume=True pops every folded tensor from `weights` as it
        goes, so a full-size model never exists twice in memory. language=True keeps what text
        decoding on the prefix cache needs (language.FastLanguage): the VLM's final norm and its
        last layer whole (without it that layer computes K/V only). pack: prepack the layers'
        weights for oneDNN (None: wherever it runs, i.e. backend "torch", CPU, fp32)."""
        config.validate()
        self.cfg = cfg = config
        self.backend = backend
        first = next(iter(weights.values()))
        self.dtype = dtype or first.dtype
        self.device = first.device
        dt = self.dtype
        c = consume

        # --- SigLIP ---
        v = cfg.vision
        self.v_heads, self.v_hd = v.num_heads, v.width // v.num_heads
        sig = siglip_weights(weights, v, dt, c)
        self.patch_w, self.patch_b, self.pos = sig.patch_w, sig.patch_b, sig.pos
        self.vision_layers: List[VisionLayer] = sig.layers
        self.proj_w, self.proj_b = sig.proj_w, sig.proj_b
        # --- Gemma towers ---
        self.embed = take(weights, "vlm.embed", c).to(dt)
        self.embed_scale = torch.tensor(math.sqrt(cfg.vlm.width), dtype=dt)
        self.language = language
        self.vlm_norm = take(weights, "vlm.norm", c).to(dt) if language else None
        if c:
            weights.pop("vlm.norm", None)  # feeds only the VLM's token head, never run for actions
        self.vlm_layers = gemma_layers(weights, "vlm", cfg.vlm, dt, c, kv_only_last=not language)
        self.vlm_last_full: Optional[GemmaLayer] = None
        if language:
            # The prefix keeps its K/V-only last layer (actions stay bit-identical); text reads the whole one.
            self.vlm_last_full = self.vlm_layers[-1]
            self.vlm_layers[-1] = self.vlm_last_full.kv_only_copy(cfg.vlm)
        self._prepare_expert(weights, c)

        # RoPE tables for every position a prefix + state + chunk can reach.
        npos = cfg.max_prefix_len + 1 + cfg.chunk_size
        ang = rope_angles(torch.arange(npos), cfg.vlm.head_dim, cfg.rope_theta, cfg.rope_style)
        emb = torch.cat([ang, ang], dim=-1)
        self.rope_cos = emb.cos().to(dt).to(self.device)
        self.rope_sin = emb.sin().to(dt).to(self.device)

        if pack is None:
            pack = backend == "torch" and onednn.supported(self.device, dt)
        elif pack and not onednn.supported(self.device, dt):
            raise ValueError(f"pack=True needs fp32 weights on a CPU with oneDNN, got {dt} on {self.device}")
        self.packed = bool(pack)
        self.packed_misc: Dict[str, torch.Tensor] = {}
        if self.packed:
            self._pack()

    def _pack(self) -> None:
        """Prepack for oneDNN: SigLIP's and the VLM's layers replace their dense weights (only
        the packed path reads them); the expert's layers keep theirs (real-time chunking
        differentiates through them)."""
        for L in self.vision_layers:
            L.pack()
        for layer in self.vlm_layers + ([self.vlm_last_full] if self.vlm_last_full is not None else []):
            layer.pack(drop_dense=True)
        for layer in self.expert_layers:
            self._pack_expert_layer(layer)
        for name in ("patch_w", "proj_w", "act_out_w"):
            if getattr(self, name, None) is not None:
                self.packed_misc[name] = onednn.pack(getattr(self, name))

    def _pack_expert_layer(self, layer) -> None:
        layer.pack(drop_dense=False)

    def _prepare_expert(self, weights: Weights, c: bool) -> None:
        """The action expert's layers, head and tail (pi0: state token and action-time MLP)."""
        cfg, dt = self.cfg, self.dtype
        self.expert_layers = gemma_layers(weights, "expert", cfg.expert, dt, c, kv_only_last=False)
        e = cfg.expert.width
        self.state_w = take(weights, "state_proj.weight", c).to(dt)
        self.state_b = take(weights, "state_proj.bias", c).to(dt)
        w_ai = take(weights, "action_in.weight", c).double()
        b_ai = take(weights, "action_in.bias", c).double()
        w_in = take(weights, "action_time_in.weight", c).double()
        b_in = take(weights, "action_time_in.bias", c).double()
        w_a, w_t = w_in[:, :e], w_in[:, e:]
        times = torch.tensor(cfg.step_times(), dtype=torch.float32)
        # Computed on the CPU as the plain path does, then moved beside the weights (Pi0Engine on CUDA
        # failed here with a CPU table against CUDA weights; found by bench/language_stream.py).
        temb = sincos_time_embedding(times, e, cfg.min_period, cfg.max_period).float().double().to(w_in.device)
        self.act_w = (w_a @ w_ai).to(dt)
        self.act_b_table = (w_a @ b_ai + temb @ w_t.T + b_in).to(dt)  # [num_steps, E]
        # What the table hides, for a time off the grid (the streaming expert's per-token times):
        # W_a b_action_in, the time half of action_time_in and its bias; float64, beside the
        # weights (a meta-device model, as the launch-count tests build, has no data to copy out).
        self.action_time_parts = (w_a @ b_ai, w_t, b_in)
        self.act_out_w = take(weights, "action_time_out.weight", c).to(dt)
        self.act_out_b = take(weights, "action_time_out.bias", c).to(dt)
        norm = take(weights, "expert.norm", c)
        self.out_w = (fold_rms(take(weights, "action_out.weight", c), norm) * cfg.dt).to(dt)
        self.out_b = (take(weights, "action_out.bias", c).float() * cfg.dt).to(dt)

    # ------------------------------------------------------------------ helpers
    _rope = staticmethod(rope)

    def _attention(self, q, k, v, mask, backend: Optional[str] = None):
        return attention(q, k, v, mask, backend or self.backend, self.packed)

    def _normed(self, x, backend: Optional[str] = None):
        """(input, row_scale) for a GEMM whose weight carries the folded norm affine. A fused
        epilogue (Triton) scales the output for free; torch on the CPU would pay an extra pass
        over the wider output, so there the input is scaled instead (same product)."""
        be = backend or self.backend
        rs = ops.rms_row_scale(x, self.cfg.rms_eps, backend=be)
        if be == "torch":
            return x * rs.unsqueeze(-1).to(x.dtype), None
        return x, rs

    @staticmethod
    def _no_padding(pad: torch.Tensor) -> bool:
        """Every key valid (attention can skip the mask). CPU only: on CUDA the check would
        synchronise (and break graph capture), so there the mask is always applied."""
        return pad.device.type == "cpu" and bool(pad.all())

    @staticmethod
    def _packed_for(packed: Optional[Dict[str, torch.Tensor]], x: torch.Tensor, be: str):
        """The oneDNN weights where they serve this call: torch backend and nothing to
        differentiate (real-time chunking's guided step runs the dense torch ops)."""
        if packed is None or be != "torch" or (x.requires_grad and torch.is_grad_enabled()):
            return None
        return packed

    def _kv_only(self, w_kv, spec: GemmaSpec, x, cos, sin, packed: Optional[torch.Tensor] = None):
        """K (with RoPE) and V of a layer whose outputs nobody reads. packed: w_kv for oneDNN."""
        b, t, _ = x.shape
        xin, rs = self._normed(x)
        if packed is not None and self._packed_for({"kv": packed}, x, self.backend) is not None:
            kv = onednn.linear(xin, packed)
        else:
            kv = ops.linear(xin, w_kv, row_scale=rs, backend=self.backend)
        kv = kv.view(b, t, 2 * spec.num_kv_heads, spec.head_dim)
        return self._rope(kv[:, :, : spec.num_kv_heads], cos, sin), kv[:, :, spec.num_kv_heads:]

    def _qkv_packed(self, w: torch.Tensor, xin, cos, sin, spec: GemmaSpec):
        """ops.qkv_rope's torch path with the GEMM on a oneDNN weight."""
        b, t, _ = xin.shape
        h, kv = spec.num_heads, spec.num_kv_heads
        qkv = onednn.linear(xin, w).view(b, t, h + 2 * kv, spec.head_dim)
        return self._rope(qkv[:, :, :h], cos, sin), self._rope(qkv[:, :, h:h + kv], cos, sin), qkv[:, :, h + kv:]

    def _gemma_block(self, layer: GemmaLayer, spec: GemmaSpec, x, cos, sin, kv_sink, backend: Optional[str] = None):
        """One decoder layer over x [B, T, D]. kv_sink(k, v) stores this layer's K/V
        [B, T, KV, hd] and returns (keys, values, mask) to attend over (mask None: all valid).
        backend: override the engine's (RTC's differentiable step runs the torch ops)."""
        be = backend or self.backend
        pk = self._packed_for(layer.packed, x, be)
        xin, rs = self._normed(x, be)
        if pk is not None:
            q, k, v = self._qkv_packed(pk["qkv"], xin, cos, sin, spec)
        else:
            q, k, v = ops.qkv_rope(xin, layer.w_qkv, cos, sin, spec.num_heads, spec.num_kv_heads, spec.head_dim,
                                   row_scale=rs, backend=be)
        k_all, v_all, mask = kv_sink(k, v)
        a = self._attention(q, k_all, v_all, mask, be).reshape(x.shape[0], x.shape[1], -1)
        if pk is not None:
            x = onednn.linear(a, pk["o"], residual=x)
            xin, _ = self._normed(x, be)
            # gelu(x W_gate) * (x W_up): each product's epilogue does the elementwise work.
            f = onednn.linear(xin, pk["up"], mul=onednn.linear(xin, pk["gate"], activation="gelu_tanh"))
            return onednn.linear(f, pk["down"], residual=x)
        x = ops.linear(a, layer.w_o, residual=x, backend=be)
        xin, rs = self._normed(x, be)
        f = ops.gated_ffn(xin, layer.w_gate_up, row_scale=rs, activation="gelu_tanh", backend=be)
        return ops.linear(f, layer.w_down, residual=x, backend=be)

    def _misc_linear(self, name: str, x, bias=None, *, activation=None, residual=None, backend: Optional[str] = None):
        """ops.linear on the model weight `name` (e.g. "proj_w"), through its oneDNN copy where
        there is one and it serves this call."""
        be = backend or self.backend
        pk = self._packed_for(self.packed_misc, x, be)
        if pk is not None and name in pk:
            return onednn.linear(x, pk[name], bias, activation=activation, residual=residual)
        return ops.linear(x, getattr(self, name), bias, activation=activation, residual=residual, backend=be)

    # Public name for other modules (streaming) that run single decoder layers.
    gemma_block = _gemma_block

    # ------------------------------------------------------------------ prefix
    def vision(self, images: torch.Tensor) -> torch.Tensor:
        """images [N, 3, S, S] -> image tokens [N, P, vlm_width]."""
        cfg, be = self.cfg, self.backend
        p, n = cfg.vision.patch_size, images.shape[0]
        g = cfg.vision.image_size // p
        patches = images.to(self.dtype).reshape(n, 3, g, p, g, p).permute(0, 2, 4, 1, 3, 5).reshape(n, g * g, 3 * p * p)
        x = self._misc_linear("patch_w", patches, self.patch_b, residual=self.pos.expand(n, -1, -1))
        d, t = x.shape[-1], x.shape[1]
        hh, hd = self.v_heads, self.v_hd
        for L in self.vision_layers:
            pk = self._packed_for(L.packed, x, be)
            h = F.layer_norm(x, (d,), eps=cfg.layer_norm_eps)
            if pk is not None:
                qkv = onednn.linear(h, pk["qkv"], L.b_qkv).view(n, t, 3, hh, hd)
            else:
                qkv = ops.linear(h, L.w_qkv, L.b_qkv, backend=be).view(n, t, 3, hh, hd)
            a = self._attention(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], None).reshape(n, t, d)
            if pk is not None:
                x = onednn.linear(a, pk["o"], L.b_o, residual=x)
                h = F.layer_norm(x, (d,), eps=cfg.layer_norm_eps)
                h = onednn.linear(h, pk["fc1"], L.b_fc1, activation="gelu_tanh")
                x = onednn.linear(h, pk["fc2"], L.b_fc2, residual=x)
                continue
            x = ops.linear(a, L.w_o, L.b_o, residual=x, backend=be)
            h = F.layer_norm(x, (d,), eps=cfg.layer_norm_eps)
            h = ops.linear(h, L.w_fc1, L.b_fc1, activation="gelu_tanh", backend=be)
            x = ops.linear(h, L.w_fc2, L.b_fc2, residual=x, backend=be)
        x = F.layer_norm(x, (d,), eps=cfg.layer_norm_eps)
        return self._misc_linear("proj_w", x, self.proj_b)

    @torch.no_grad()
    def prefix(self, images, image_masks, tokens, token_mask) -> PrefixCache:
        spec = self.cfg.vlm
        b, nv = images.shape[:2]
        img = self.vision(images.flatten(0, 1))
        npatch = img.shape[1]
        lang = self.embed[tokens] * self.embed_scale
        x = torch.cat([img.reshape(b, nv * npatch, -1), lang], dim=1)
        pad = torch.cat([image_masks[:, :, None].expand(b, nv, npatch).reshape(b, -1), token_mask], dim=1)
        pos = (torch.cumsum(pad.long(), dim=1) - 1).clamp(min=0)
        cos, sin = self.rope_cos[pos], self.rope_sin[pos]
        mask = None if self._no_padding(pad) else pad[:, None, :] & pad[:, :, None]
        keys, values = [], []

        def sink(k, v):
            keys.append(k)
            values.append(v)
            return k, v, mask

        for layer in self.vlm_layers:
            if layer.kv_only:
                sink(*self._kv_only(layer.w_qkv, spec, x, cos, sin, None if layer.packed is None else layer.packed["qkv"]))
            else:
                x = self._gemma_block(layer, spec, x, cos, sin, sink)
        return PrefixCache(keys=keys, values=values, pad=pad, next_pos=pad.long().sum(1))

    # ------------------------------------------------------------------ denoise
    def _action_step(self, s: int, xt, cos, sin, sink_of, backend: str):
        """One Euler step's expert pass over the action tokens: dt * v [B, C, A] (fp32) for x_t.
        sink_of(i) is layer i's kv_sink."""
        be = backend
        h = ops.linear(xt.to(self.dtype), self.act_w, self.act_b_table[s], activation="silu", backend=be)
        h = self._misc_linear("act_out_w", h, self.act_out_b, backend=be)
        for i, layer in enumerate(self.expert_layers):
            h = self._gemma_block(layer, self.cfg.expert, h, cos, sin, sink_of(i), be)
        hin, rs = self._normed(h, be)
        return ops.linear(hin, self.out_w, self.out_b, row_scale=rs, backend=be).float()

    @torch.no_grad()
    def denoise(self, cache: PrefixCache, state, noise, rtc=None) -> Tuple[torch.Tensor, torch.Tensor]:
        """rtc: one Optional[RtcGuide] per robot (real-time chunking, rtc.py). Guided rows run a
        differentiable copy of the step with the torch ops (Triton kernels have no backward);
        rows without a guide get exactly what they get without the argument."""
        spec, be = self.cfg.expert, self.backend
        b, chunk, _ = noise.shape
        t_pre = cache.pad.shape[1]
        total = t_pre + 1 + chunk
        dev, dt = noise.device, self.dtype
        hkv, hd = spec.num_kv_heads, spec.head_dim
        # Static K/V buffers per layer: [prefix | state | actions]; every step overwrites the tail.
        kbuf = [torch.empty(b, total, hkv, hd, dtype=dt, device=dev) for _ in self.expert_layers]
        vbuf = [torch.empty(b, total, hkv, hd, dtype=dt, device=dev) for _ in self.expert_layers]
        for i in range(len(self.expert_layers)):
            kbuf[i][:, :t_pre] = cache.keys[i]
            vbuf[i][:, :t_pre] = cache.values[i]
        valid = torch.cat([cache.pad, torch.ones(b, 1 + chunk, dtype=torch.bool, device=dev)], dim=1)
        mask_act = valid[:, None, :].expand(b, chunk, total)
        # No padded key anywhere in the batch: attend without a mask (the sinks return None).
        mask_state = None if self._no_padding(cache.pad) else valid[:, None, : t_pre + 1]
        sink_mask = None if mask_state is None else mask_act

        # 1) the state token, once: it sees the prefix and itself, never the actions.
        spos = cache.next_pos[:, None]
        scos, ssin = self.rope_cos[spos], self.rope_sin[spos]
        x = ops.linear(state.to(dt)[:, None], self.state_w, self.state_b, backend=be)
        last = len(self.expert_layers) - 1
        for i, layer in enumerate(self.expert_layers):
            def sink(k, v, i=i):
                kbuf[i][:, t_pre: t_pre + 1] = k
                vbuf[i][:, t_pre: t_pre + 1] = v
                return kbuf[i][:, : t_pre + 1], vbuf[i][:, : t_pre + 1], mask_state
            if i == last:  # its last-layer output is never read: K/V only
                sink(*self._kv_only(layer.w_qkv[spec.num_heads * hd:], spec, x, scos, ssin))
            else:
                x = self._gemma_block(layer, spec, x, scos, ssin, sink)

        # 2) the Euler steps over the action tokens only.
        apos = cache.next_pos[:, None] + 1 + torch.arange(chunk, device=dev)[None]
        acos, asin = self.rope_cos[apos], self.rope_sin[apos]
        def buffer_sink(i):
            def sink(k, v):
                kbuf[i][:, t_pre + 1:] = k
                vbuf[i][:, t_pre + 1:] = v
                return kbuf[i], vbuf[i], sink_mask
            return sink

        # The action tokens' K/V follow the prefix and the state: t_pre + 1 static rows.
        return self._euler(noise, rtc, kbuf, vbuf, t_pre + 1, mask_act, acos, asin, buffer_sink)

    def _euler(self, noise, rtc, kbuf, vbuf, n_static: int, mask_act, acos, asin, buffer_sink):
        """The Euler steps over the action tokens (pi0 and pi0.5 share it): `_action_step` per
        step, guided rows (rtc) through `_guided_step_fn`. Returns (actions, updates)."""
        cfg, be = self.cfg, self.backend
        plan = RtcBatch.build(rtc, noise.device) if rtc is not None else None
        if plan is not None:
            guided_step = self._guided_step_fn(plan, kbuf, vbuf, n_static, mask_act, acos, asin)
        xt = noise.to(torch.float32)
        updates = torch.empty(cfg.num_steps, *noise.shape, dtype=torch.float32, device=noise.device)
        for s in range(cfg.num_steps):
            if plan is None:
                u = self._action_step(s, xt, acos, asin, buffer_sink, be)
            else:
                # Unguided rows: the ordinary step over the whole batch, as without guides.
                base = self._action_step(s, xt, acos, asin, buffer_sink, be) if plan.needs_base else None
                u = base if base is not None else torch.empty_like(xt)
                u[plan.rows] = guided_step(s, xt[plan.rows], None if base is None else base[plan.rows] / cfg.dt)
            updates[s] = u
            xt = xt + u
        return xt, updates

    def _guided_step_fn(self, plan: RtcBatch, kbuf, vbuf, n_static: int, mask_act, acos, asin):
        """step(s, x_rows) -> the guided dt * v of the plan's rows: the same expert pass with the
        torch ops, the first n_static rows of the static K/V (prefix, and pi0's state) of those
        rows concatenated (no in-place buffer writes, which autograd would have to track across
        layers)."""
        cfg = self.cfg
        with torch.inference_mode(False):
            rows = plan.rows
            keys = [k[rows, :n_static] for k in kbuf]
            values = [v[rows, :n_static] for v in vbuf]
            mask, cos, sin = mask_act[rows], acos[rows], asin[rows]

        def cat_sink(i):
            return lambda k, v: (torch.cat([keys[i], k], dim=1), torch.cat([values[i], v], dim=1), mask)

        times = cfg.step_times()

        def step(s: int, x_rows, base_rows=None):
            def velocity(x, _rows):
                return self._action_step(s, x, cos, sin, cat_sink, "torch") / cfg.dt
            return cfg.dt * guide_rows(velocity, x_rows, times[s], plan, base_rows)
        return step
