"""One action-expert tick of streaming generation: every action token at its own flow time.

The chunked sampler (fast.py) gives all tokens one time per step, tabulated; streaming needs a
per-token time embedding, so the action-time bias is rebuilt here from the two small time
matrices of the checkpoint, exactly as fast.py forms its table (float64, same summation order):

    bias(tau) = W_a b_action_in + W_t temb(tau) + b_action_time_in

and one tick is one expert forward over the suffix [state, (force), a_1..a_C] against a
prefix cache, followed by a per-token Euler step  x_a += (tau_new_a - tau_a) v_a.  fast.py's
action_out already yields dt * v (dt = -1/num_steps), so the step is out * (tau_a - tau_new_a) *
num_steps; final tokens (tau = 0) are left exactly as they are.

Everything else (the expert layers with folded norms, state projection, fused QKV + RoPE,
attention, gated FFN, the ops backend) is B1's FastPi0, used as it is.

Two implementations of the tick: `step_plain` (B1's `gemma_block` per layer; the
reference, ~720 aten ops at the tiny preset) and `FusedTick` (streaming_tick.py: the same
function with the tick-invariant work prepared per model and per KV snapshot, ~100 ops, or one
torch.compile'd graph, or on a GPU a CUDA graph per snapshot shape: tick_graph.py).
`StreamingExpert(tick=...)` picks one: "fused" (default), "compiled", "graphs", "plain".
Non-torch backends (Triton) always run the plain tick.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Tuple

import torch
import torch.nn.functional as F

from physai_ros.engine.checkpoint.params import Weights, random_weights
from physai_ros.engine.engine import Pi0Engine
from physai_ros.engine.pi0.fast import FastPi0
from physai_ros.engine.pi0.modeling import rope_angles, sincos_time_embedding
from physai_ros.engine.streaming.force_token import ForceProjection
from physai_ros.engine.streaming.tick import FusedKV, FusedTick
from physai_ros.engine.streaming.tick_graph import TickGraph
from physai_ros.engine.types import Pi0Config, PrefixCache
from physai_ros.kernels import ops


@dataclass
class TimeWeights:
    """The parts of action_time_in that the per-step table of fast.py hides."""

    const: torch.Tensor  # float64 [E]: W_a b_action_in
    w_t: torch.Tensor  # float64 [E, E]: the time half of action_time_in
    b_in: torch.Tensor  # float64 [E]

    @staticmethod
    def from_weights(weights: Weights, width: int) -> "TimeWeights":
        # Host tables (time_bias embeds the tick's distinct times on the CPU), wherever the
        # weights were given: on a GPU, a device copy here met the CPU time embedding.
        w_in = weights["action_time_in.weight"].double().cpu()
        w_a = w_in[:, :width]
        return TimeWeights(const=(w_a @ weights["action_in.bias"].double().cpu()).clone(),
                           w_t=w_in[:, width:].clone(), b_in=weights["action_time_in.bias"].double().cpu().clone())


def _force_projection(force, config: Pi0Config, seed: int) -> Optional[ForceProjection]:
    if isinstance(force, str):
        if force != "random":
            raise ValueError(f"force={force!r}: expected None, 'random' or a ForceProjection")
        return ForceProjection.random(config.expert.width, seed=seed + 1)
    return force


@dataclass
class ExpertKV:
    """Static K/V buffers [B, T_prefix + S, KV, hd] per expert layer for one cache snapshot and
    one set of robot rows; each tick overwrites the suffix part."""

    keys: List[torch.Tensor]
    values: List[torch.Tensor]
    mask: torch.Tensor  # bool [B, S, T_total]
    cos: torch.Tensor  # [B, S, hd]
    sin: torch.Tensor
    t_prefix: int
    fused: Optional[FusedKV] = None  # the fused tick's view of the same snapshot


TICKS = ("fused", "compiled", "graphs", "plain")


class StreamingExpert:
    def __init__(self, model: FastPi0, time_weights: TimeWeights, force: Optional[ForceProjection] = None,
                 tick: str = "fused"):
        if tick not in TICKS:
            raise ValueError(f"tick={tick!r}: expected one of {TICKS}")
        self.model = model
        self.cfg = model.cfg
        self.tw = time_weights
        self.force = None if force is None else force.to(model.device, model.dtype)
        cfg = self.cfg
        npos = cfg.max_prefix_len + 2 + cfg.chunk_size  # + state + force
        ang = rope_angles(torch.arange(npos), cfg.vlm.head_dim, cfg.rope_theta, cfg.rope_style)
        emb = torch.cat([ang, ang], dim=-1)
        self._cos = emb.cos().to(model.dtype).to(model.device)
        self._sin = emb.sin().to(model.dtype).to(model.device)
        self._grid_times = torch.tensor(cfg.step_times(), dtype=torch.float32)  # read on the host (time_bias)
        if model.backend != "torch":
            tick = "plain"  # the fused tick is torch ops only
        if tick == "graphs" and model.device.type != "cuda":
            raise ValueError(f"tick='graphs' captures CUDA graphs; the model is on {model.device}")
        self.tick = tick
        self.fused = None if tick == "plain" else self._fused_tick()

    def _fused_tick(self) -> FusedTick:
        maker = TickGraph if self.tick == "graphs" else None
        return FusedTick(self, compile=self.tick == "compiled", graph_maker=maker)

    @property
    def force(self) -> Optional[ForceProjection]:
        return self._force

    @force.setter
    def force(self, value: Optional[ForceProjection]) -> None:
        """Setting it (e.g. None: the serving config's `force: none`) re-prepares the fused tick,
        which has the token count and the folded projection built in. Snapshots prepared
        before must be prepared again (StreamingCore does at its next VLM pass)."""
        self._force = value
        if getattr(self, "fused", None) is not None:
            self.fused = self._fused_tick()

    @property
    def has_force(self) -> bool:
        return self.force is not None

    @property
    def context_tokens(self) -> int:
        return 2 if self.has_force else 1

    @staticmethod
    def build(config: Pi0Config, weights: Optional[Weights] = None, force=None, device="cpu",
              dtype=torch.float32, backend: str = "torch", seed: int = 0,
              tick: str = "fused") -> Tuple[Pi0Engine, "StreamingExpert"]:
        """A Pi0Engine (for the VLM prefix) and a StreamingExpert over the same prepared weights.

        weights=None draws the same seeded random weights as Pi0Engine(config, seed=seed).
        force: None (take `force_proj.*` from the weights if present, else no force token),
        "random" (seeded projection, for tests and benchmarks) or a ForceProjection.
        tick: "fused" (default), "compiled" (torch.compile of the fused tick; compiles at the
        first tick of each batch shape), "graphs" (CUDA only: the fused tick captured per
        snapshot shape) or "plain" (B1's layers; the reference).
        """
        from physai_ros.engine.streaming.vlm import VLMSpec

        spec = VLMSpec(config, None if weights is None else weights, seed=seed, dtype=dtype, backend=backend)
        if weights is None:
            weights = random_weights(config, seed=seed)
        weights = dict(weights)  # Pi0Engine consumes the dict it is given, not the caller's
        from_ckpt = ForceProjection.pop_from(weights, config.expert.width)
        force = _force_projection(force, config, seed)
        force = force if force is not None else from_ckpt
        tw = TimeWeights.from_weights(weights, config.expert.width)
        engine = Pi0Engine(config, weights, device=device, dtype=dtype, fast=True, backend=backend, seed=seed)
        expert = StreamingExpert(engine.model, tw, force, tick=tick)
        expert.vlm_spec = spec if torch.device(device).type == "cpu" else None  # StreamingEngine(vlm="process")
        return engine, expert

    @staticmethod
    def can_run_over(chunked) -> bool:
        """Whether `over` can share this engine's model: a fast pi0 one (it has the action-time
        parts the ticks read)."""
        model = getattr(chunked, "model", None)
        return bool(getattr(chunked, "fast", False)) and getattr(model, "action_time_parts", None) is not None

    @staticmethod
    def over(chunked: Pi0Engine, force=None, seed: int = 0,
             tick: str = "fused") -> Tuple[Pi0Engine, "StreamingExpert"]:
        """A Pi0Engine and a StreamingExpert over another engine's prepared fast pi0 model (a
        server's chunked engine), so the weights are held once: a full-depth pi0 server with
        both modes needed 2 x 13 GB in fp32 and was killed for memory on a 24 GB host.
        force: None (no force token: a checkpoint's `force_proj.*` is not in the shared model,
        `build` takes it), "random" or a ForceProjection. No VLM process (it would need its own
        copy of the weights): vlm_spec is None."""
        m = chunked.model
        if not StreamingExpert.can_run_over(chunked):
            raise ValueError(f"streaming over a shared model needs a fast pi0 engine, not {type(m).__name__}")
        parts = m.action_time_parts
        engine = Pi0Engine(chunked.config, device=chunked.device, dtype=chunked.dtype, fast=True,
                           backend=chunked.backend, seed=seed, model=m)
        const, w_t, b_in = (t.cpu() for t in parts)  # host tables, as TimeWeights.from_weights makes
        expert = StreamingExpert(m, TimeWeights(const=const, w_t=w_t, b_in=b_in),
                                 _force_projection(force, chunked.config, seed), tick=tick)
        expert.vlm_spec = None
        return engine, expert

    # ------------------------------------------------------------------ per snapshot
    def prepare(self, cache: PrefixCache, rows: torch.Tensor, plain: Optional[bool] = None) -> ExpertKV:
        """Copy the given rows of a prefix cache into fresh static buffers for the ticks.
        plain: also (True) / only (tick="plain") the buffers of `step_plain`; default: what
        this expert's tick needs."""
        cfg, spec, m = self.cfg, self.cfg.expert, self.model
        rows = rows.to(cache.pad.device)
        fused = None if self.fused is None else self.fused.prepare(cache, rows)
        if not (plain or self.fused is None):
            return ExpertKV([], [], None, None, None, int(cache.pad.shape[1]), fused)
        pad = cache.pad.index_select(0, rows)
        next_pos = cache.next_pos.index_select(0, rows)
        b, t_pre = pad.shape
        s = self.context_tokens + cfg.chunk_size
        keys, values = [], []
        for i in range(len(m.expert_layers)):
            kb = torch.empty(b, t_pre + s, spec.num_kv_heads, spec.head_dim, dtype=m.dtype, device=m.device)
            vb = torch.empty_like(kb)
            kb[:, :t_pre] = cache.keys[i].index_select(0, rows)
            vb[:, :t_pre] = cache.values[i].index_select(0, rows)
            keys.append(kb)
            values.append(vb)
        dev = pad.device
        # Block-causal suffix: state sees prefix + itself; force sees prefix + state + itself;
        # actions see everything.
        suffix = torch.ones(s, s, dtype=torch.bool, device=dev).tril()
        suffix[self.context_tokens:, :] = True
        mask = torch.cat([pad[:, None, :].expand(b, s, t_pre), suffix.expand(b, s, s)], dim=2)
        pos = next_pos[:, None] + torch.arange(s, device=dev)[None]
        return ExpertKV(keys, values, mask.contiguous(), self._cos[pos], self._sin[pos], t_pre, fused)

    # ------------------------------------------------------------------ per tick
    def time_bias(self, tau: torch.Tensor) -> torch.Tensor:
        """tau [B, C] float64 -> [B, C, E] action-time bias in the model dtype."""
        e, n = self.cfg.expert.width, self.cfg.num_steps
        # Many tokens share a time (waiting at 1, final at 0): embed each distinct time once.
        flat, inverse = torch.unique(tau.reshape(-1).cpu(), return_inverse=True)
        t32 = flat.to(torch.float32)
        # On the chunked sampler's grid (tau = 1 - s / num_steps) use its exact float32 times
        # (config.time_schedule), whose last bits the high-frequency embedding would amplify.
        s = torch.round((1.0 - flat) * n)
        on_grid = ((1.0 - s / n - flat).abs() < 1e-9) & (s < n)
        if bool(on_grid.any()):
            t32 = torch.where(on_grid, self._grid_times[s.clamp(0, n - 1).long()], t32)
        temb = sincos_time_embedding(t32, e, self.cfg.min_period, self.cfg.max_period).float().double()
        bias = (self.tw.const + temb @ self.tw.w_t.T + self.tw.b_in).to(self.model.dtype)
        return bias[inverse].reshape(*tau.shape, e).to(self.model.device)

    @torch.no_grad()
    def step(self, kv: ExpertKV, state: torch.Tensor, wrench: Optional[torch.Tensor], x: torch.Tensor,
             tau: torch.Tensor, tau_new: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """One tick with this expert's implementation (see `step_plain` for the contract)."""
        if self.fused is not None and kv.fused is not None:
            return self.fused.step(kv.fused, state, wrench, x, tau, tau_new)
        return self.step_plain(kv, state, wrench, x, tau, tau_new)

    @torch.no_grad()
    def step_plain(self, kv: ExpertKV, state: torch.Tensor, wrench: Optional[torch.Tensor], x: torch.Tensor,
                   tau: torch.Tensor, tau_new: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """One expert forward and per-token Euler step. state [B, max_state_dim], wrench [B, 6]
        (ignored without a force projection), x [B, C, A] fp32, tau / tau_new [B, C] float64.

        Returns (x_new, preview): x_new with final tokens bit for bit unchanged; preview is the
        flow-matching clean-action estimate x_new - tau_new * v (x_t = t noise + (1 - t) a and
        v = noise - a give a = x_t - t v), equal to x_new on final tokens. Tentative nodes are
        sent as the preview, so a new wrench moves every uncommitted node on the next tick."""
        m, cfg, spec, be = self.model, self.cfg, self.cfg.expert, self.model.backend
        dt, dev = m.dtype, m.device
        parts = [ops.linear(state.to(dev, dt)[:, None], m.state_w, m.state_b, backend=be)]
        if self.force is not None:
            parts.append(self.force.embed(wrench.to(dev)))
        h = F.silu(ops.linear(x.to(dev, dt), m.act_w, residual=self.time_bias(tau), backend=be))
        parts.append(ops.linear(h, m.act_out_w, m.act_out_b, backend=be))
        h = torch.cat(parts, dim=1)
        t_pre = kv.t_prefix
        # B1's decoder layer; `gemma_block` once fast.py exposes it publicly (see docs/streaming.md).
        block = getattr(m, "gemma_block", None) or m._gemma_block
        for i, layer in enumerate(m.expert_layers):
            def sink(k, v, i=i):
                kv.keys[i][:, t_pre:] = k
                kv.values[i][:, t_pre:] = v
                return kv.keys[i], kv.values[i], kv.mask
            h = block(layer, spec, h, kv.cos, kv.sin, sink)
        ha = h[:, self.context_tokens:]
        rs = ops.rms_row_scale(ha, cfg.rms_eps, backend=be)
        out = ops.linear(ha, m.out_w, m.out_b, row_scale=rs, backend=be).float()  # dt * v
        ratio = ((tau - tau_new) * cfg.num_steps).to(dev, torch.float32)[..., None]
        x = x.to(dev, torch.float32)
        x_new = torch.where((tau <= 0).to(dev)[..., None], x, x + out * ratio)
        # v = out / dt = -num_steps * out
        t_new = (tau_new * cfg.num_steps).to(dev, torch.float32)[..., None]
        preview = torch.where((tau_new <= 0).to(dev)[..., None], x_new, x_new + out * t_new)
        return x_new, preview
