"""The streaming action-expert tick with its tick-invariant work done once.

`StreamingExpert.step_plain` runs B1's `FastPi0.gemma_block` per layer: ~720 aten ops per tick
at the tiny preset (validation, views, RoPE by rotate_half, K/V written into static buffers, a
time embedding per distinct tau through `torch.unique`), so on the CPU the tick is bound by
Python and op dispatch, not by its ~0.8 MFLOP. `FusedTick` computes the same function with
everything that does not change between ticks prepared ahead:

- once per model: every weight transposed for `x @ W` (each GEMM one `mm`/`addmm` with its bias
  or residual fused, in the orientation MKL runs fastest for 10-row inputs: [10, 32] x [32, 224]
  ~3.7 us here, the transposed product ~12 us); RoPE's rotate_half folded into the QKV weight as
  extra columns (a signed permutation of rows of W: exact), so RoPE is one mul + one addcmul
  over [q | k | v] (cos = 1 and sin = 0 on the v columns); the force scale folded into the force
  projection; RMS statistics as one addmm with a 1/D column and eps as its bias; the sin-cos
  frequencies of the time embedding;
- once per KV snapshot (`prepare`, at the VLM rate): the prefix K^T and V^T per layer,
  repeated per query head (grouped-query attention without a per-tick repeat), in a static
  buffer whose suffix columns each tick overwrites (the prefix is never copied per tick); the
  block-causal + padding mask as an additive bias of the scores' shape; the RoPE cos/sin of the
  suffix positions in the QKV column layout;
- per tick: one pass over all suffix tokens of all robots (rows of one [B*S, E] hidden state:
  state, force, actions): per layer one QKV GEMM, RoPE, one strided copy of the new K/V into
  the static buffer, one baddbmm (scores + mask) over every head, softmax, one bmm, one addmm
  for W_o + residual, one GEMM for gate/up, one addmm for down + residual. The per-token
  scalars (time embedding, Euler and preview coefficients) are a dozen numpy ops on the host
  (`host_inputs`). One robot: 111 top-level aten ops (22 GEMMs), 246 at all levels.

`_tick` is a pure function of tensors, so `torch.compile` (inductor, CPU: C++ kernels, needs a
C++ compiler) can take it whole with fixed shapes: `FusedTick(compile=True)`, i.e.
`StreamingExpert(tick="compiled")`; it compiles at the first tick of each (batch, prefix
length) and reports the seconds in `compile_s`.

Numerics: the same quantities in a different summation/fusion order (norm scale applied to the
GEMM input instead of its output, mask added instead of filled, force scale folded, float64
time projection summed once): equal to `step_plain` within fp32 rounding
(test_streaming_tick.py asserts 2e-5; measured < 2e-6). The time embedding is formed exactly as
`StreamingExpert.time_bias` does (float32 times, chunked-grid snapping, float64 sin-cos rounded
to float32, float64 projection).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, List, Optional, Tuple

import numpy as np
import torch

from physai_ros.engine.pi0.modeling import MASK_VALUE
from physai_ros.engine.streaming.tick_graph import SnapshotGraphs
from physai_ros.engine.types import PrefixCache


@dataclass
class FusedKV:
    """Per snapshot and robot rows: what every tick of that snapshot reads."""

    kv_t: List[torch.Tensor]  # per layer [B, 2, KV, r, hd, T_pre + S]: K^T and V^T per query head, the
    # prefix filled once, the suffix columns overwritten by every tick (static: no prefix copy per tick)
    mask_bias: torch.Tensor  # [B*H or 1, S, T_pre + S]: 0 where a query may attend, MASK_VALUE where not
    cos: torch.Tensor  # [B*S, (H + KV) * hd + KV * hd]: RoPE of the q and k columns, 1 on the v columns
    sin: torch.Tensor  # same, 0 on the v columns
    batch: int


def _rotate_rows(w: torch.Tensor, heads: int, hd: int) -> torch.Tensor:
    """Rows of W such that (rows) @ x = rotate_half(W @ x) per head: a signed permutation."""
    w = w.reshape(heads, hd, -1)
    half = hd // 2
    return torch.cat([-w[:, half:], w[:, :half]], dim=1).reshape(heads * hd, -1)


class FusedTick:
    def __init__(self, expert, compile: bool = False, pad_prefix: Optional[bool] = None,
                 graph_maker: Optional[Callable] = None):
        """compile: torch.compile the tick (inductor). pad_prefix (default: = compile): prepare
        every snapshot at max_prefix_len keys (padding masked), so shapes depend on the robot
        count only. graph_maker: capture the tick per snapshot shape (tick_graph.TickGraph: a CUDA
        graph; StaticTick: the same static-buffer contract without capture, for CPU tests)."""
        m, cfg = expert.model, expert.cfg
        spec = cfg.expert
        self.cfg, self.spec = cfg, spec
        self.dtype, self.device = m.dtype, m.device
        self.ctx = expert.context_tokens
        self.has_force = expert.has_force
        h, kv, hd = spec.num_heads, spec.num_kv_heads, spec.head_dim
        self.heads, self.kv_heads, self.group, self.hd = h, kv, h // kv, hd
        self.qkv_cols = (h + 2 * kv) * hd  # [q | k | v] after RoPE
        dt = m.dtype
        self.layers = []
        for layer in m.expert_layers:
            w = layer.w_qkv.float()
            wq, wk = w[: h * hd], w[h * hd:(h + kv) * hd]
            # GEMM columns [q | k | v | rot(q) | rot(k) | 0]: RoPE is then one mul + one addcmul
            # over [q | k | v] with cos = 1, sin = 0 on the v columns.
            w_ext = torch.cat([w, _rotate_rows(wq, h, hd), _rotate_rows(wk, kv, hd),
                               torch.zeros(kv * hd, w.shape[1], device=w.device)])
            f = layer.w_gate_up.shape[0] // 2
            self.layers.append((w_ext.t().to(dt).contiguous(), layer.w_o.t().to(dt).contiguous(),
                                layer.w_gate_up.t().to(dt).contiguous(), layer.w_down.t().to(dt).contiguous(), f))
        e = spec.width
        self.state_w_t, self.state_b = m.state_w.t().contiguous(), m.state_b
        if expert.force is not None:
            fp = expert.force
            self.force_w_t = (fp.weight.float() / fp.scale[None, :].float()).t().to(dt).contiguous()
            self.force_b = fp.bias
        else:
            self.force_w_t = self.force_b = None
        self.act_w_t = m.act_w.t().contiguous()
        self.act_out_w_t, self.act_out_b = m.act_out_w.t().contiguous(), m.act_out_b
        self.out_w_t, self.out_b = m.out_w.t().contiguous(), m.out_b
        # Time embedding on the host (numpy, float64 like model.sincos_time_embedding).
        tw = expert.tw
        self._tconst_np = (tw.const + tw.b_in).cpu().numpy()  # [E]
        self._tw_t_np = tw.w_t.t().contiguous().cpu().numpy()  # [E, E]
        fraction = torch.linspace(0.0, 1.0, e // 2, dtype=torch.float64)
        period = cfg.min_period * (cfg.max_period / cfg.min_period) ** fraction
        self._freq_np = (1.0 / period * 2 * math.pi)[None, :].numpy()  # [1, E/2]
        self._grid_np = np.asarray(cfg.step_times(), dtype=np.float32)
        self._np_dtype = {torch.float32: np.float32, torch.float64: np.float64, torch.float16: np.float16}.get(dt)
        if self._np_dtype is None:  # bfloat16: numpy has none; the bias is cast on the device
            self._np_dtype = np.float32
        self.n = cfg.num_steps
        # RMS: mean of squares as one addmm with a 1/D column and eps as its bias.
        self.mean_col = torch.full((e, 1), 1.0 / e, dtype=dt, device=self.device)
        self.eps_row = torch.full((1, 1), cfg.rms_eps, dtype=dt, device=self.device)
        self._cos, self._sin = expert._cos, expert._sin
        self.compiled = bool(compile)
        self.pad_prefix = self.compiled if pad_prefix is None else bool(pad_prefix)
        self.compile_s: Optional[float] = None
        self._compiled_for = set()
        self._fn = self._tick
        if compile and graph_maker is not None:
            raise ValueError("a tick is either torch.compile'd or captured as a graph, not both")
        if compile:
            self._fn = torch.compile(self._tick, dynamic=False, fullgraph=True)
        self.graphs = None if graph_maker is None else SnapshotGraphs(self._tick, graph_maker)
        self._static: dict = {}  # with graphs: one FusedKV per shape, refilled by each snapshot

    # ------------------------------------------------------------------ per snapshot
    def prepare(self, cache: PrefixCache, rows: torch.Tensor) -> FusedKV:
        rows = rows.to(cache.pad.device)
        pad = cache.pad.index_select(0, rows)
        next_pos = cache.next_pos.index_select(0, rows)
        b, t_pre = pad.shape
        if self.pad_prefix and t_pre < self.cfg.max_prefix_len:
            # Compiled: one prefix length (the longest the config allows, padding masked out),
            # so a new prompt length never recompiles; only a new robot count does.
            extra = self.cfg.max_prefix_len - t_pre
            pad = torch.cat([pad, torch.zeros(b, extra, dtype=torch.bool, device=pad.device)], 1)
            cache = PrefixCache(keys=[torch.nn.functional.pad(k, (0, 0, 0, 0, 0, extra)) for k in cache.keys],
                                values=[torch.nn.functional.pad(v, (0, 0, 0, 0, 0, extra)) for v in cache.values],
                                pad=cache.pad, next_pos=cache.next_pos)
            t_pre = self.cfg.max_prefix_len
        c = self.cfg.chunk_size
        s = self.ctx + c
        kv, r, hd, h = self.kv_heads, self.group, self.hd, self.heads
        kv_t = []
        for i in range(len(self.layers)):
            k = cache.keys[i].index_select(0, rows).permute(0, 2, 3, 1)  # [B, KV, hd, T]
            v = cache.values[i].index_select(0, rows).permute(0, 2, 3, 1)
            buf = torch.zeros(b, 2, kv, r, hd, t_pre + s, dtype=self.dtype, device=k.device)
            buf[..., :t_pre] = torch.stack([k, v], 1)[:, :, :, None]
            kv_t.append(buf)
        dev = pad.device
        suffix = torch.ones(s, s, dtype=torch.bool, device=dev).tril()
        suffix[self.ctx:, :] = True
        allowed = torch.cat([pad[:, None, :].expand(b, s, t_pre), suffix.expand(b, s, s)], dim=2)  # [B, S, T]
        bias = torch.zeros(allowed.shape, dtype=self.dtype, device=dev).masked_fill_(~allowed, MASK_VALUE)
        bias = bias[:, None].expand(b, h, s, t_pre + s).reshape(b * h, s, t_pre + s)
        pos = next_pos[:, None] + torch.arange(s, device=dev)[None]  # [B, S]

        def cols_of(t, v_fill):  # [B, S, hd] -> [B*S, (H + KV) hd + KV hd]
            t = t.reshape(b * s, 1, hd)
            return torch.cat([t.expand(b * s, h + kv, hd).reshape(b * s, -1),
                              torch.full((b * s, kv * hd), v_fill, dtype=t.dtype, device=dev)], 1).to(self.dtype).contiguous()

        fresh = FusedKV(kv_t, bias.contiguous(), cols_of(self._cos[pos], 1.0), cols_of(self._sin[pos], 0.0), b)
        return fresh if self.graphs is None else self._refill(fresh)

    def _refill(self, fresh: FusedKV) -> FusedKV:
        """With graphs, a snapshot's values go into the buffers of the last snapshot of the same
        shape, so the graph captured against those buffers serves every later snapshot: one
        capture per shape (robot count, prefix length), not one per VLM pass (at 30 Hz a capture
        per pass would cost an eager tick and a capture each time). prepare and the ticks run on
        the same thread and stream, so a refill never races a replay."""
        key = (fresh.batch, tuple(fresh.kv_t[0].shape), tuple(fresh.mask_bias.shape))
        static = self._static.get(key)
        if static is None:
            self._static[key] = fresh
            return fresh
        for dst, src in zip(static.kv_t, fresh.kv_t):
            dst.copy_(src)
        static.mask_bias.copy_(fresh.mask_bias)
        static.cos.copy_(fresh.cos)
        static.sin.copy_(fresh.sin)
        return static

    # ------------------------------------------------------------------ per tick
    def host_inputs(self, tau: torch.Tensor, tau_new: torch.Tensor):
        """Per-token scalars of a tick, on the host in numpy (a dozen tiny array ops; as torch
        ops each would cost a dispatch): the action-time bias [B*C, E] formed exactly as
        `StreamingExpert.time_bias` does (float32 times snapped to the chunked grid, float64
        sin-cos rounded to float32, float64 projection), and the Euler / preview coefficients
        [B, C, 1] with the masks of tokens left as they are (final before / after the step)."""
        ta = tau.numpy() if tau.device.type == "cpu" else tau.cpu().numpy()
        tn = tau_new.numpy() if tau_new.device.type == "cpu" else tau_new.cpu().numpy()
        flat = ta.reshape(-1)
        n = self.n
        step = np.round((1.0 - flat) * n)
        on_grid = (np.abs(1.0 - step / n - flat) < 1e-9) & (step < n)
        t32 = np.where(on_grid, self._grid_np[np.clip(step, 0, n - 1).astype(np.int64)],
                       flat.astype(np.float32)).astype(np.float64)
        arg = t32[:, None] * self._freq_np
        temb = np.concatenate([np.sin(arg), np.cos(arg)], axis=1).astype(np.float32).astype(np.float64)
        t_bias = (temb @ self._tw_t_np + self._tconst_np).astype(self._np_dtype)  # [B*C, E]
        shape = ta.shape + (1,)
        coef_x = ((ta - tn) * n).astype(np.float32).reshape(shape)
        coef_p = (tn * n).astype(np.float32).reshape(shape)
        out = (t_bias, coef_x, (ta <= 0).reshape(shape), coef_p, (tn <= 0).reshape(shape))
        if self.device.type == "cpu":
            return tuple(torch.from_numpy(a) for a in out)
        return tuple(torch.from_numpy(a).to(self.device, non_blocking=True) for a in out)

    def _tick(self, kv_t: List[torch.Tensor], mask_bias, cos, sin, state, wrench, x,
              t_bias, coef_x, final_x, coef_p, final_p):
        """Pure tensor function (torch.compile takes it whole). state [B, Sd], wrench [B, 6] or
        None (model dtype), x [B, C, A] fp32, the rest from host_inputs. Tokens are rows
        (robot, token) of one [B*S, E] hidden state; attention runs per query head.
        Returns (x_new, preview) fp32 [B, C, A]."""
        b, c, a = x.shape
        kv, hd, nh = self.kv_heads, self.hd, self.heads
        s = self.ctx + c
        mean = self.mean_col
        eps = self.eps_row
        # x is the fp32 Euler state; the layers run in the model dtype (bf16 on a GPU)
        wd = self.act_w_t.dtype
        act = torch.nn.functional.silu(torch.addmm(t_bias.to(wd), x.view(b * c, a).to(wd), self.act_w_t))
        act = torch.addmm(self.act_out_b, act, self.act_out_w_t)  # [B*C, E]
        st = torch.addmm(self.state_b, state, self.state_w_t)  # [B, E]
        if b == 1:
            parts = [st, torch.addmm(self.force_b, wrench, self.force_w_t)] if self.has_force else [st]
            h = torch.cat(parts + [act])  # [S, E]
        else:
            parts = [st.view(b, 1, -1)]
            if self.has_force:
                parts.append(torch.addmm(self.force_b, wrench, self.force_w_t).view(b, 1, -1))
            parts.append(act.view(b, c, -1))
            h = torch.cat(parts, dim=1).view(b * s, -1)  # [B*S, E]
        n3 = self.qkv_cols
        nq = nh * hd
        t_pre = kv_t[0].shape[-1] - s
        for (w_ext, w_o, w_gu, w_down, f), kv_all in zip(self.layers, kv_t):
            xin = h * torch.rsqrt(torch.addmm(eps, h * h, mean))
            y = torch.mm(xin, w_ext)  # [B*S, 2 (H + 2 KV) hd]: q k v | rot(q) rot(k) 0
            qkv = torch.addcmul(y[:, :n3] * cos, y[:, n3:], sin)  # RoPE on q, k; v as it is
            q = qkv[:, :nq].view(b, s, nh, hd).transpose(1, 2).reshape(b * nh, s, hd)
            kv_all[..., t_pre:] = qkv[:, nq:].view(b, s, 2, kv, 1, hd).permute(0, 2, 3, 4, 5, 1)
            if b == 1:
                k_all, v_all = kv_all.view(2, nh, hd, -1).unbind(0)
            else:
                k_all, v_all = kv_all[:, 0].reshape(b * nh, hd, -1), kv_all[:, 1].reshape(b * nh, hd, -1)
            p = torch.softmax(torch.baddbmm(mask_bias, q, k_all), dim=-1)  # [B*H, S, T]
            o = torch.bmm(p, v_all.transpose(1, 2))  # [B*H, S, hd]
            o = o.view(b, nh, s, hd).transpose(1, 2).reshape(b * s, nq)
            h = torch.addmm(h, o, w_o)
            xin = h * torch.rsqrt(torch.addmm(eps, h * h, mean))
            gu = torch.mm(xin, w_gu)
            h = torch.addmm(h, torch.nn.functional.gelu(gu[:, :f], approximate="tanh") * gu[:, f:], w_down)
        ha = h[self.ctx:] if b == 1 else h.view(b, s, -1)[:, self.ctx:].reshape(b * c, -1)
        xin = ha * torch.rsqrt(torch.addmm(eps, ha * ha, mean))
        out = torch.addmm(self.out_b, xin, self.out_w_t).view(b, c, a)  # dt * v
        x_new = torch.where(final_x, x, torch.addcmul(x, out, coef_x))
        preview = torch.where(final_p, x_new, torch.addcmul(x_new, out, coef_p))
        return x_new, preview

    def step(self, kv: FusedKV, state, wrench, x, tau, tau_new) -> Tuple[torch.Tensor, torch.Tensor]:
        dev, dt = self.device, self.dtype
        state = state if state.dtype == dt and state.device == dev else state.to(dev, dt)
        if self.has_force:
            wrench = wrench if wrench.dtype == dt and wrench.device == dev else wrench.to(dev, dt)
        else:
            wrench = None
        if x.dtype != torch.float32 or x.device != dev or not x.is_contiguous():
            x = x.to(dev, torch.float32).contiguous()
        args = (kv.kv_t, kv.mask_bias, kv.cos, kv.sin, state, wrench, x,
                *self.host_inputs(tau, tau_new))
        if self.graphs is not None:
            return self.graphs.step(kv, args[:4], args[4:])
        if not self.compiled:
            return self._fn(*args)
        shape = (tuple(x.shape), int(kv.mask_bias.shape[-1]))
        if shape in self._compiled_for:
            return self._fn(*args)
        t0 = time.perf_counter()
        out = self._fn(*args)  # compiles for this shape
        self._compiled_for.add(shape)
        self.compile_s = (self.compile_s or 0.0) + time.perf_counter() - t0
        return out
