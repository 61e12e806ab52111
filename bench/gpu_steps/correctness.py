"""Correctness on the device, tiny size: each engine mode's chunks against the plain path in fp32
on the CPU (the path tests pin to LeRobot), the Triton kernels against torch at pi0's own shapes,
the language decoder's logits against the CPU decoder's (which the CPU tests pin to a full
recompute), and RTC-guided chunks against the CPU's guided chunks.

Tolerances (relative, ||out - ref|| / ||ref||; METHOD.md's bands): fp32 2e-3 (cuDNN may run the
patch embedding in TF32, ~3e-4 per op, and ten denoise steps compound it), bf16 6e-2 (bf16
operands, 1e-3..1e-2 per op, through 10 steps of a random model)."""
from __future__ import annotations

import dataclasses
import math

import torch

from common import config, dtype_of, free, guarded, inputs, parse_args, rel_err, write

TOL = {"fp32": 2e-3, "bf16": 6e-2}


def _clone(w):
    return {k: v.clone() for k, v in w.items()}


def _modes(device, policy):
    cuda = torch.device(device).type == "cuda"
    modes = {"plain": dict(fast=False), "fast": dict(fast=True), "fast+graphs": dict(fast=True, cuda_graphs=True),
             "triton": dict(fast=True, backend="triton"),
             "triton+graphs": dict(fast=True, backend="triton", cuda_graphs=True)}
    return {k: v for k, v in modes.items() if cuda or not v.get("cuda_graphs")}


def engine_modes(args, policy: str, out: dict, save) -> dict:
    from physai_ros.engine import Pi0Engine, random_weights

    cfg = config(args.size, policy)
    w = random_weights(cfg, seed=3)
    batch = inputs(cfg, 2, 2, seed=4)
    ref = [o.actions for o in Pi0Engine(cfg, _clone(w), fast=False).infer(batch)]
    for name, kw in _modes(args.device, policy).items():  # Triton last: its compiles take the longest
        for dt in ("fp32", "bf16"):
            if args.size == "tiny" and kw.get("backend") == "triton" and (policy, dt) != ("pi0", "fp32"):
                continue  # the CPU dry run: Triton's interpreter takes ~20 s per engine; once is enough
            def run(kw=kw, dt=dt):
                eng = Pi0Engine(cfg, _clone(w), device=args.device, dtype=dtype_of(dt), **kw)
                got = [o.actions for o in eng.infer(batch)]
                again = [o.actions for o in eng.infer(batch)]  # graphs replay: same inputs, same chunks
                err = max(rel_err(g, r) for g, r in zip(got, ref))
                repeat = max(rel_err(a, g) for a, g in zip(again, got))
                del eng
                free(args.device)
                return {"rel_err": err, "repeat_rel_err": repeat, "tol": TOL[dt],
                        "ok": bool(err <= TOL[dt] and repeat <= TOL[dt])}
            guarded(out, f"{policy}/{dt}/{name}", run, save)
    return out


def kernels(args, out: dict, save) -> dict:
    """Each Triton op against the torch op on the same fresh random inputs, at the real shapes of
    a 2-view pi0 prefix (816 tokens) and of the action expert (51 tokens), bf16 and fp32."""
    from physai_ros.kernels import ops

    cfg = config(args.size)
    vlm, ex = cfg.vlm, cfg.expert
    gen = torch.Generator(args.device).manual_seed(5)

    def r(*shape, dt):
        return torch.randn(*shape, generator=gen, device=args.device).to(dt)

    for dtn in ("fp32", "bf16"):
        dt = dtype_of(dtn)
        for tag, spec, n in (("vlm", vlm, 2 * cfg.vision.num_tokens + 48), ("expert", ex, cfg.chunk_size + 1)):
            k, mlp = spec.width, spec.mlp_dim
            x = r(1, n, k, dt=dt)
            cases = {
                "rms_row_scale": lambda be, x=x: ops.rms_row_scale(x, 1e-6, backend=be),
                "linear": lambda be, x=x, w=r(k, k, dt=dt) / math.sqrt(k), rs=r(1, n, dt=torch.float32).abs():
                    ops.linear(x, w, row_scale=rs, residual=x, backend=be),
                "gated_ffn": lambda be, x=x, w=r(2 * mlp, k, dt=dt) / math.sqrt(k):
                    ops.gated_ffn(x, w, backend=be),
            }
            hq, hk, d = spec.num_heads, spec.num_kv_heads, spec.head_dim
            q, kk, v = r(1, n, hq, d, dt=dt), r(1, n, hk, d, dt=dt), r(1, n, hk, d, dt=dt)
            mask = torch.ones(1, n, n, dtype=torch.bool, device=args.device).tril()
            cases["attention"] = lambda be: ops.attention(q, kk, v, mask, d ** -0.5, backend=be)
            cos, sin = r(1, n, d, dt=dt).cos(), r(1, n, d, dt=dt).sin()
            wqkv = r((hq + 2 * hk) * d, k, dt=dt) / math.sqrt(k)
            cases["qkv_rope"] = lambda be: torch.cat([t.flatten() for t in ops.qkv_rope(
                x, wqkv, cos, sin, hq, hk, d, backend=be)])
            for op, fn in cases.items():
                def run(fn=fn, dtn=dtn):
                    before = dict(ops.counters())
                    got, ref = fn("triton"), fn("torch")
                    fell_back = {k: v - before.get(k, 0) for k, v in ops.counters().items()
                                 if k.startswith("fallback:") and v != before.get(k, 0)}
                    err = rel_err(got, ref)
                    tol = 1e-2 if dtn == "bf16" else 1e-3
                    return {"rel_err": err, "tol": tol, "fell_back_to_torch": fell_back,
                            "ok": bool(err <= tol and not fell_back)}
                guarded(out, f"{dtn}/{tag}/{op}", run, save)
    return out


def language(args, policy: str, out: dict, save) -> dict:
    """Five greedy steps of two robots' texts: the device decoder's logits against the CPU fp32
    plain decoder's, both fed the CPU's choice of token so they stay on one text."""
    from physai_ros.engine import Pi0Engine, random_weights
    from physai_ros.engine.batching import collate
    from physai_ros.engine.language.decoder import SamplingParams

    cfg = config(args.size, policy)
    w = random_weights(cfg, seed=6)
    batch = inputs(cfg, 2, 2, seed=7)
    ref_eng = Pi0Engine(cfg, _clone(w), fast=False)
    for dt in ("fp32", "bf16"):
        for fast in (False, True):
            def run(dt=dt, fast=fast):
                eng = Pi0Engine(cfg, _clone(w), device=args.device, dtype=dtype_of(dt), fast=fast, language=True)
                pair = []
                for e in (ref_eng, eng):
                    b = collate(batch, cfg, e.device, e.dtype)
                    cache = e.model.prefix(b.images, b.image_masks, b.tokens, b.token_mask)
                    dec = e.language_decoder()
                    last = [int(b.tokens[r][b.token_mask[r]][-1]) for r in range(2)]
                    pair.append((dec, [dec.start(cache, r, last[r], SamplingParams(max_tokens=5), str(r))
                                       for r in range(2)]))
                worst, agree = 0.0, 0
                for _ in range(5):
                    ref_l, got_l = (d.next_logits(rs) for d, rs in pair)
                    worst = max(worst, max(rel_err(g, r) for g, r in zip(got_l, ref_l)))
                    agree += sum(int(torch.argmax(g.float().cpu())) == int(torch.argmax(r)) for g, r in zip(got_l, ref_l))
                    for _, rs in pair:
                        for r, lg in zip(rs, ref_l):
                            r.tokens.append(int(torch.argmax(lg)))
                return {"logits_rel_err": worst, "same_greedy_token": f"{agree}/10", "tol": TOL[dt],
                        "ok": bool(worst <= TOL[dt])}
            guarded(out, f"{policy}/{dt}/{'fast' if fast else 'plain'}", run, save)
    return out


def rtc(args, out: dict, save) -> dict:
    """A guided chunk on the device against the same guided chunk on the CPU, and the guide's
    pull: the delay region closer to the previous chunk than the unguided chunk is."""
    from physai_ros.engine import Pi0Engine, random_weights
    from physai_ros.engine.rtc import RtcGuide

    cfg = config(args.size)
    w = random_weights(cfg, seed=8)
    inp = inputs(cfg, 1, 2, seed=9)[0]
    prev = torch.randn(cfg.chunk_size, cfg.max_action_dim, generator=torch.Generator().manual_seed(10))
    guide = RtcGuide(prev, 3, 6)
    for fast in (False, True):
        ref = Pi0Engine(cfg, _clone(w), fast=fast).infer([dataclasses.replace(inp, rtc=guide)])[0].actions

        def run(fast=fast, ref=ref):
            eng = Pi0Engine(cfg, _clone(w), device=args.device, fast=fast)
            got = eng.infer([dataclasses.replace(inp, rtc=guide)])[0].actions.cpu()
            free_ = eng.infer([inp])[0].actions.cpu()
            pull = float((got[:3] - prev[:3]).norm() / (free_[:3] - prev[:3]).norm())
            err = rel_err(got, ref)
            return {"rel_err_vs_cpu": err, "delay_region_distance_guided_over_free": pull, "tol": TOL["fp32"],
                    "ok": bool(err <= TOL["fp32"] and pull < 1.0)}
        guarded(out, "fast" if fast else "plain", run, save)
    return out


def streaming_tick(args, out: dict, save) -> dict:
    """The streaming tick captured as a CUDA graph per snapshot shape (tick_graph.TickGraph) against
    the eager fused tick, over ticks that cross a snapshot change and a robot-count change, the
    Euler state carried over. Same ops in the same order: equal up to cuBLAS picking another
    algorithm under capture. On the CPU dry run StaticTick (the same contract, no capture)."""
    from physai_ros.engine import random_weights
    from physai_ros.engine.streaming.expert import StreamingExpert
    from physai_ros.engine.streaming.tick import FusedTick
    from physai_ros.engine.streaming.tick_graph import StaticTick, TickGraph

    cfg = config(args.size)
    cuda = torch.device(args.device).type == "cuda"
    for dt in ("fp32", "bf16") if cuda else ("fp32",):
        def run(dt=dt):
            w = random_weights(cfg, seed=3, dtype=dtype_of(dt), device=args.device)
            engine, expert = StreamingExpert.build(cfg, w, force="random", device=args.device, dtype=dtype_of(dt))
            eager, graphed = expert.fused, FusedTick(expert, graph_maker=TickGraph if cuda else StaticTick)
            caches = [engine.prefix(inputs(cfg, 3, 2, seed=s)) for s in (7, 8)]
            gen = torch.Generator().manual_seed(9)
            x_e = x_g = None
            errs = []
            # (cache, robots, a new snapshot?): three snapshots of two shapes, so 2 captures and 5
            # replays (the second three-robot snapshot refills the first one's buffers)
            for c, b, fresh in ((0, 3, True), (0, 3, False), (0, 3, False), (1, 3, True), (1, 3, False),
                                (1, 2, True), (1, 2, False)):
                if fresh:
                    rows = torch.arange(b)
                    kv_e, kv_g = eager.prepare(caches[c], rows), graphed.prepare(caches[c], rows)
                    if x_e is None or x_e.shape[0] != b:
                        x_e = x_g = torch.randn(b, cfg.chunk_size, cfg.max_action_dim, generator=gen)
                tau = torch.rand(b, cfg.chunk_size, generator=gen, dtype=torch.float64)
                tau[:, 0] = 0.0
                new = (tau - 1.0 / cfg.num_steps).clamp(min=0.0)
                state, wrench = torch.randn(b, cfg.max_state_dim, generator=gen), torch.randn(b, 6, generator=gen)
                ref = eager.step(kv_e, state, wrench, x_e, tau, new)
                got = graphed.step(kv_g, state, wrench, x_g, tau, new)
                errs.append(max(rel_err(g, r) for g, r in zip(got, ref)))
                x_e, x_g = ref[0], got[0]  # the Euler state carries over, as in the stream
            tol = 1e-5 if dt == "fp32" else 1e-2
            g = graphed.graphs
            return {"rel_err": max(errs), "per_tick": errs, "captures": g.captures, "replays": g.replays,
                    "tol": tol, "ok": bool(max(errs) <= tol and g.captures == 2 and g.replays == 5)}
        guarded(out, dt, run, save)
    return out


# pi0 first through every kind of check, then pi0.5: a step stopped at its time box has still
# looked at each kind once. Each check: (args, its result dict, save) -> None.
CHECKS = {"engine_pi0": lambda args, out, save: engine_modes(args, "pi0", out, save),
          "language_pi0": lambda args, out, save: language(args, "pi0", out, save),
          "rtc": rtc,
          "kernels": kernels,
          "streaming_tick": streaming_tick,
          "engine_pi05": lambda args, out, save: engine_modes(args, "pi05", out, save),
          "language_pi05": lambda args, out, save: language(args, "pi05", out, save)}
GROUPS = tuple(CHECKS)


def main(argv=None) -> int:
    def extra(ap):
        ap.add_argument("--groups", default=",".join(GROUPS),
                        help="which checks, in this order (a rerun of what a time box cut off)")

    args = parse_args("gpu_check step 1: correctness on the device", argv, extra)
    torch.manual_seed(0)
    res = {"device": args.device, "size": args.size}

    def save():
        write(args.json_out, res)

    wanted = [g for g in args.groups.split(",") if g]
    unknown = sorted(set(wanted) - set(GROUPS))
    if unknown:
        raise SystemExit(f"unknown groups {unknown}; known: {', '.join(GROUPS)}")
    for key in wanted:
        fn = CHECKS[key]
        res[key] = {}  # filled case by case, saved after each
        guarded(res, key, lambda: fn(args, res[key], save))
        save()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
