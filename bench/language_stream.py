#!/usr/bin/env python3
"""OxyGen's comparison (../shared/papers/oxygen-vla-kv-cache, §3 Algorithm 1, §4.2-4.3) on our
engine, the three ways side by side in ONE run, so the ratios share the machine's state:

  isolated    actions and text as separate tasks, as a serving stack without KV sharing runs them
              (openpi's server beside a text model). Per frame: prefill + denoise for the
              actions, a second prefill of the same observation for the text, then the frame's
              texts, all N tokens within the frame: --isolated-decode frame (default) decodes the
              frame's robots together (one batch of R, as any batching server would), `each` one
              by one (the paper's "sequential isolated execution", batch 1: a baseline that
              flatters the other modes as R grows).
  shared      cross-task KV sharing ("Ours w/o batching"): one prefill feeds the actions and the
              texts; the frame's texts finish within the frame, never batched with another
              frame's. --shared-decode frame (default) decodes the frame's robots together (one
              batch of R, as the engine batches their actions); `each` decodes them one by one,
              the paper's single-robot definition for any R.
  continuous  KV sharing + cross-frame continuous batching: engine.language.frame.run_frame
              (Algorithm 1 with the f_min floor): k tokens per frame for every active request of
              every robot and frame in one batch.

Workload (the paper's Fig. 4/6): every frame brings one new observation per robot and every robot
asks for one new text of N tokens (--budgets) each frame. Greedy, no EOS, so every text runs its
full budget and token counts do not depend on the weights. In steady state `continuous` holds
R * ceil(N / k) requests; its first ceil(N / k) frames fill that pipeline and are not timed.

    .venv/bin/python bench/language_stream.py                       # sim_pi0, the full sweep
    .venv/bin/python bench/language_stream.py --json bench/results/language.json
    .venv/bin/python bench/language_stream.py --preset pi0_2layer --robots 1 --budgets 16,64 --frames 2 --cell-seconds 0
    python3 bench/language_stream.py --device cuda --preset pi0 --dtype bfloat16 --f-min 0.001
    python3 bench/language_stream.py --device cuda --preset pi0 --policy pi05 --dtype bfloat16 --f-min 5 \
        --cuda-graphs        # every prefill and action step as the server's graphed engine runs it

Reports per (robots R, budget N, mode): frames/s (the action frequency; x chunk = actions/s),
whether it holds --f-min, tokens/s, p50/p99 frame time, the split into actions / text prefill /
decode, and ratios vs isolated. --cuda-graphs (CUDA only) runs each mode's action step through
the engine's own infer_frame (collation, the captured prefix and denoise graphs, chunks copied to
the host: the policy server's path) and isolated's text prefill through the captured prefix
graph (Pi0Engine.prefill), so no mode pays host-bound eager launches the others do not. Then,
labelled PREDICTED, the roofline lower bound of the same cells for the full pi0 on an H100 (language_roofline.py, bench/physai_bench/roofline.py's model), never a
measurement. Results and the measured tables: docs/language.md.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

from physai_bench import results

ROOT = Path(__file__).resolve().parents[1]

SHIPPED = ROOT / "physai_ros" / "assets" / "policy" / "sim_pi0"
MODES = ("isolated", "shared", "continuous")
CLOCK = time.perf_counter  # --clock cpu: process CPU time (use with --threads 1)


def build_engine(args):
    """The real engine with its fast path prepared for language (Pi0Engine(..., language=True))."""
    import torch

    from physai_ros.engine import Pi0Config, Pi0Engine

    from physai_ros.engine import random_weights

    dtype = getattr(torch, args.dtype)
    # Off the CPU, the fast path's preparation makes some tables (the time embedding) with
    # torch's default device: build under the target device (weights drawn on the CPU first).
    with torch.device(args.device):
        if args.checkpoint or args.preset == "sim_pi0":
            path = args.checkpoint or SHIPPED
            return Pi0Engine.from_lerobot_checkpoint(path, device=args.device, dtype=dtype, language=True,
                                                     cuda_graphs=args.cuda_graphs)
    over = dict(policy="pi05", time_schedule="multiply", rope_style="multiply") if args.policy == "pi05" else {}
    cfg = Pi0Config.preset(args.preset, **over)
    # Drawn where they run: a full pi0 takes a minute to draw on the CPU, a second on a GPU.
    weights = random_weights(cfg, seed=0, dtype=dtype, device=args.device)
    with torch.device(args.device):
        return Pi0Engine(cfg, weights, device=args.device, dtype=dtype, language=True, cuda_graphs=args.cuda_graphs)


def frame_batches(engine, robots: int, views: int, prompt_len: int, count: int, seed: int, collated: bool = True):
    """`count` collated frames of `robots` observations (random images, prompt and noise: the
    timing does not depend on their content), cycled through the run; collated=False: the
    EngineInput lists themselves (the engine's infer_frame collates them, as in the server)."""
    import torch

    from physai_ros.engine import EngineInput
    from physai_ros.engine.batching import collate

    cfg = engine.config
    gen = torch.Generator().manual_seed(seed)
    s = cfg.vision.image_size
    out = []
    for _ in range(count):
        with torch.device("cpu"):  # the CPU generator draws them; collate moves them to the engine
            inputs = [EngineInput(
                images=torch.rand(views, 3, s, s, generator=gen) * 2 - 1,
                image_masks=torch.ones(views, dtype=torch.bool),
                tokens=torch.randint(0, cfg.vocab_size, (prompt_len,), generator=gen),
                token_mask=torch.ones(prompt_len, dtype=torch.bool),
                state=torch.randn(cfg.max_state_dim, generator=gen),
                noise=torch.randn(cfg.chunk_size, cfg.max_action_dim, generator=gen),
            ) for _ in range(robots)]
        out.append(collate(inputs, cfg, engine.device, engine.dtype) if collated else inputs)
    return out


def _last_token(b, row: int) -> int:
    return int(b.tokens[row][b.token_mask[row]][-1])


def _sync(engine) -> None:
    import torch

    if engine.device.type == "cuda":
        torch.cuda.synchronize()


class Stepper:
    """One mode's frame: returns (tokens emitted, parts in seconds, extra per-frame facts)."""

    def __init__(self, mode: str, engine, decoder, robots: int, budget: int, k: int, f_min: float,
                 shared_decode: str, isolated_decode: str = "frame"):
        from physai_ros.engine.language.kv_manager import KVCacheManager
        from physai_ros.engine.language.decoder import SamplingParams
        from physai_ros.engine.language.frame import DecodeBudget

        self.mode, self.engine, self.dec, self.robots = mode, engine, decoder, robots
        self.budget = budget
        # Whether the frame's texts decode as one batch of R (the other choice: one by one).
        self.batched = (shared_decode if mode == "shared" else isolated_decode) == "frame"
        self.params = SamplingParams(max_tokens=budget)  # greedy, no EOS: every text runs N tokens
        self.names = [f"robot_{i}" for i in range(robots)]
        self.n = 0
        if mode == "continuous":
            # Room for the steady state (ceil(N / k) live requests per robot, one more arriving)
            # so nothing is refused for memory unless the f_min floor lowers k below N / depth.
            self.manager = KVCacheManager(robot_budget_bytes=1 << 40,
                                          max_requests_per_robot=math.ceil(budget / k) + 1)
            self.dbudget = DecodeBudget(k_max=k, f_min_hz=f_min)

    def _decode_alone(self, cache, b, rows) -> int:
        """Each text on its own: batch 1, N steps on one preallocated buffer (batch_requests once,
        so the baseline pays no per-step re-batching the engine would not do either)."""
        from physai_ros.engine.language.decoder import batch_requests

        n = 0
        for row in rows:
            req = self.dec.start(cache, row, _last_token(b, row), self.params, f"{self.mode}{self.n}:{row}")
            state = batch_requests([req], self.budget)
            n += sum(len(t) for t in self.dec.decode_batched(state, self.budget))
        return n

    def frame(self, b):
        m, e = self.engine.model, self.engine
        self.n += 1
        if self.mode == "continuous":
            from physai_ros.engine.language.frame import run_frame

            ask = {r: self.params for r in self.names}
            active_before = len(self.manager.active())
            res = run_frame(e, self.dec, self.manager, self.dbudget, b, self.names, ask, clock=CLOCK)
            _sync(e)
            tokens = sum(len(t) for t in res.emitted.values())
            return tokens, {"actions_s": res.actions_s, "decode_s": res.decode_s}, {
                "k": res.k, "batch": active_before + len(res.new_requests) - len(res.refused),
                "refused": len(res.refused)}
        from physai_ros.engine.language.frame import action_step

        t0 = CLOCK()
        inputs = b if isinstance(b, list) else None  # --cuda-graphs: the engine's own action step
        _, _, cache, b = action_step(e, b)
        _sync(e)
        t1 = CLOCK()
        parts = {"actions_s": t1 - t0}
        if self.mode == "isolated":
            # The text task's own forward pass over the same observation (batched over the
            # robots like the action prefill: the only difference is the redundancy).
            cache = e.prefill(inputs) if inputs is not None else m.prefix(b.images, b.image_masks, b.tokens,
                                                                          b.token_mask)
            _sync(e)
            t2 = CLOCK()
            parts["text_prefill_s"] = t2 - t1
            t1 = t2
        rows = range(self.robots)
        if self.batched:
            from physai_ros.engine.language.decoder import batch_requests

            reqs = [self.dec.start(cache, r, _last_token(b, r), self.params, f"{self.mode}{self.n}:{r}") for r in rows]
            tokens = sum(len(t) for t in self.dec.decode_batched(batch_requests(reqs, self.budget), self.budget))
        else:
            tokens = self._decode_alone(cache, b, rows)
        _sync(e)
        parts["decode_s"] = CLOCK() - t1
        batch = self.robots if self.batched else 1
        return tokens, parts, {"k": self.budget, "batch": batch, "refused": 0}


def _pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, math.ceil(q / 100 * len(xs)) - 1))]


def _summary(frame_s, toks, parts, extra, untimed, engine, f_min) -> dict:
    total = sum(frame_s)
    hz = len(frame_s) / total
    return {
        "frames": len(frame_s), "untimed_frames": untimed,
        "frames_per_s": round(hz, 3), "actions_per_s": round(hz * engine.config.chunk_size, 2),
        "holds_f_min": hz >= f_min,
        "frames_within_f_min": round(sum(s <= 1 / f_min for s in frame_s) / len(frame_s), 3),
        "tokens_per_s": round(toks / total, 1), "tokens": toks,
        "p50_ms": round(statistics.median(frame_s) * 1e3, 2), "p99_ms": round(_pct(frame_s, 99) * 1e3, 2),
        "split_ms_per_frame": {k.replace("_s", "_ms"): round(v / len(frame_s) * 1e3, 2) for k, v in parts.items()},
        "k_mean": round(statistics.mean(extra["k"]), 2), "batch_mean": round(statistics.mean(extra["batch"]), 1),
        "refused": extra["refused"],
    }


def run_cells(modes, engine, decoder, robots, budget, args, batches) -> dict:
    """All modes of one (robots, budget) cell, their timed frames interleaved round-robin so a
    change in the machine's load falls on every mode alike (the ratios are the point)."""
    steppers = {m: Stepper(m, engine, decoder, robots, budget, args.k, args.f_min, args.shared_decode,
                           args.isolated_decode) for m in modes}
    # Untimed: warm-up frames, and continuous's pipeline fill (ceil(N / k) frames until the
    # steady state of R * ceil(N / k) live requests).
    untimed = {m: args.warmup + (math.ceil(budget / args.k) if m == "continuous" else 0) for m in modes}
    frame_no = {m: 0 for m in modes}
    for m, st in steppers.items():
        for _ in range(untimed[m]):
            st.frame(batches[frame_no[m] % len(batches)])
            frame_no[m] += 1
    rec = {m: ([], [0], {}, {"k": [], "batch": [], "refused": 0}) for m in modes}
    while True:
        for m, st in steppers.items():
            frame_s, toks, parts, extra = rec[m]
            t0 = CLOCK()
            n, p, x = st.frame(batches[frame_no[m] % len(batches)])
            frame_s.append(CLOCK() - t0)
            frame_no[m] += 1
            toks[0] += n
            for key, v in p.items():
                parts[key] = parts.get(key, 0.0) + v
            extra["k"].append(x["k"])
            extra["batch"].append(x["batch"])
            extra["refused"] += x["refused"]
        done = len(rec[modes[0]][0])
        spent = sum(sum(r[0]) for r in rec.values())
        if done >= args.max_frames or (done >= args.frames and spent >= args.cell_seconds * len(modes)):
            break
    out = {}
    for m in modes:
        frame_s, toks, parts, extra = rec[m]
        out[m] = _summary(frame_s, toks[0], parts, extra, untimed[m], engine, args.f_min)
        print(f"[{m} R{robots} N{budget}] {json.dumps(out[m])}", file=sys.stderr, flush=True)
    return out


def ratios(cells: dict) -> dict:
    """Each mode vs isolated, same (robots, budget): frames/s, tokens/s, p50 speed-up."""
    base = cells.get("isolated")
    out = {}
    if not base:
        return out
    for mode, c in cells.items():
        if mode == "isolated":
            continue
        out[mode] = {"frames_per_s": round(c["frames_per_s"] / base["frames_per_s"], 2),
                     "tokens_per_s": round(c["tokens_per_s"] / base["tokens_per_s"], 2) if base["tokens_per_s"] else None,
                     "p50_speedup": round(base["p50_ms"] / c["p50_ms"], 2)}
    return out


def print_table(result: dict, file=sys.stdout) -> None:
    f_min = result["f_min_hz"]
    print(f"\n{result['model']} | {result['host']['device']}, {result['host']['threads']} threads, "
          f"clock {result['clock']} | k={result['k']} tokens/frame | f_min={f_min} frames/s", file=file)
    hdr = (f"{'R':>3} {'N':>4} {'mode':<11} {'frames/s':>9} {'f_min':>5} {'tok/s':>8} {'p50 ms':>9} {'p99 ms':>9}"
           f" {'batch':>6} {'x fps':>6} {'x tok/s':>7}")
    print(hdr, file=file)
    print("-" * len(hdr), file=file)
    for row in result["cells"]:
        for mode, c in row["modes"].items():
            r = row["ratios"].get(mode, {})
            print(f"{row['robots']:>3} {row['budget']:>4} {mode:<11} {c['frames_per_s']:>9.3f} "
                  f"{'yes' if c['holds_f_min'] else 'NO':>5} {c['tokens_per_s']:>8.1f} {c['p50_ms']:>9.1f} "
                  f"{c['p99_ms']:>9.1f} {c['batch_mean']:>6.1f} {r.get('frames_per_s', 1.0):>6.2f} "
                  f"{r.get('tokens_per_s', 1.0) or 0:>7.2f}", file=file)
    pred = result.get("gpu_prediction")
    if pred:
        print(f"\nPREDICTED, not measured: {pred['label']}", file=file)
        for row in pred["rows"]:
            print("  R{robots:>2} N{budget:>3}: ".format(**row) + "  ".join(
                f"{m} {v['frames_per_s']:.1f} f/s {v['tokens_per_s']:.0f} tok/s" for m, v in row["modes"].items()),
                file=file)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="sim_pi0",
                    help="sim_pi0 (the shipped checkpoint) or a Pi0Config preset with random weights "
                         "(tiny, tiny_mqa, pi0_1layer, pi0_2layer, pi0)")
    ap.add_argument("--checkpoint", default=None, help="a LeRobot checkpoint directory instead of --preset")
    ap.add_argument("--policy", choices=("pi0", "pi05"), default="pi0", help="for random-weight presets")
    ap.add_argument("--robots", default="1,4,16")
    ap.add_argument("--budgets", default="16,64,256", help="tokens per text request (N)")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--k", type=int, default=8, help="continuous: tokens decoded per request per frame (k_max)")
    ap.add_argument("--f-min", type=float, default=1.0,
                    help="action-rate floor in frames/s; continuous lowers k to hold it (default 1: the sim "
                         "fleet's 10-action chunks at 10 Hz last 1 s)")
    ap.add_argument("--shared-decode", choices=("frame", "each"), default="frame")
    ap.add_argument("--isolated-decode", choices=("frame", "each"), default="frame",
                    help="isolated: the frame's texts as one batch (a batching server) or one by one")
    ap.add_argument("--quick", action="store_true", help="the tiny preset, 1-2 robots, 4-8 tokens, 2 frames")
    ap.add_argument("--views", type=int, default=2)
    ap.add_argument("--prompt-len", type=int, default=48)
    ap.add_argument("--frames", type=int, default=3, help="timed frames per cell, at least")
    ap.add_argument("--cell-seconds", type=float, default=2.0, help="more timed frames until this much time")
    ap.add_argument("--max-frames", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=1, help="untimed frames per cell (continuous adds its fill)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--cuda-graphs", action="store_true",
                    help="CUDA only: action steps and isolated's text prefill through the engine's captured graphs")
    ap.add_argument("--no-prediction", action="store_true", help="skip the roofline GPU prediction")
    ap.add_argument("--json", default=None, help="write the result (with the results header) here")
    ap.add_argument("--out", default=None, help="the same as --json (kept for older commands)")
    args = ap.parse_args(argv)
    if args.quick:
        args.preset, args.robots, args.budgets, args.k = "tiny", "1,2", "4,8", 4
        args.frames, args.cell_seconds, args.max_frames, args.f_min = 2, 0.0, 2, 0.001
    path = args.json or args.out
    if args.cuda_graphs and not args.device.startswith("cuda"):
        ap.error("--cuda-graphs needs --device cuda (CUDA graphs are captured on a GPU)")

    import torch

    global CLOCK
    torch.set_num_threads(args.threads)
    CLOCK = time.process_time if args.clock == "cpu" else time.perf_counter
    engine = build_engine(args)
    decoder = engine.language_decoder()
    cfg = engine.config
    if engine.device.type == "cuda":
        # The language path builds its masks, positions and batched buffers with torch's default
        # device (engine/language/decoder.py): point it at the GPU once the engine and inputs are built.
        torch.set_default_device(engine.device)
    robots = [int(x) for x in args.robots.split(",") if x]
    budgets = [int(x) for x in args.budgets.split(",") if x]
    modes = [m for m in args.modes.split(",") if m]
    bad = [m for m in modes if m not in MODES]
    if bad or args.k < 1:
        ap.error(f"unknown modes {bad} (known: {', '.join(MODES)})" if bad else "--k must be >= 1")
    prompt_len = min(args.prompt_len, cfg.max_tokens)
    name = args.checkpoint or (str(SHIPPED.relative_to(ROOT)) if args.preset == "sim_pi0" else f"{args.preset} (random weights)")
    result = {
        "model": f"{name}: vlm width {cfg.vlm.width} x {cfg.vlm.depth} layers, vocab {cfg.vocab_size}, "
                 f"{args.views} views x {cfg.vision.num_tokens} + {prompt_len} prompt tokens, {cfg.policy}",
        "host": {"device": str(engine.device) if engine.device.type != "cpu" else f"cpu ({os.cpu_count()} cores)",
                    "threads": args.threads, "load_avg_start": os.getloadavg(), "torch": torch.__version__},
        "clock": args.clock, "cuda_graphs": args.cuda_graphs, "k": args.k, "f_min_hz": args.f_min,
        "shared_decode": args.shared_decode, "isolated_decode": args.isolated_decode,
        "workload": "one new observation and one new N-token text request per robot per frame (paper Fig. 4)",
        "cells": [],
    }
    run = results.start_run(f"{result['model']}; {result['host']['device']}, {args.threads} torch thread(s), "
                            f"{args.dtype}{', CUDA graphs' if args.cuda_graphs else ', eager'}; f_min {args.f_min:g} "
                            f"frames/s, k {args.k}; isolated texts decoded "
                            f"{'as one batch per frame' if args.isolated_decode == 'frame' else 'one by one'}",
                            __file__, argv, quick=args.quick)
    t_start = time.perf_counter()
    with torch.no_grad():  # as the engine's own prefix/denoise/decoders run
        for r in robots:
            batches = frame_batches(engine, r, args.views, prompt_len, 2, seed=r, collated=not args.cuda_graphs)
            for n in budgets:
                cells = run_cells(modes, engine, decoder, r, n, args, batches)
                result["cells"].append({"robots": r, "budget": n, "modes": cells, "ratios": ratios(cells)})
                _write(path, result)  # after every cell: a run cut short keeps what it measured
    result["seconds"] = round(time.perf_counter() - t_start, 1)
    result["host"]["load_avg_end"] = os.getloadavg()
    if not args.no_prediction:
        from physai_bench import language_roofline

        result["gpu_prediction"] = language_roofline.predict(robots, budgets, args.k, args.views, prompt_len)
    print_table(result)
    results.write_result(path, run, result)
    return 0


def _write(path, result) -> None:
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
