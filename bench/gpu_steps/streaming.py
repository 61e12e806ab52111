"""The streaming engine (VLM stream and action-expert stream on two threads, each on its own CUDA
stream) at full pi0 widths, bf16, at the nominal 30 Hz VLM / 480 Hz action-expert rates, for one
and four robots: each stream's step alone, then both together for --seconds: achieved rates,
tick periods and missed ticks. On the CPU dry run (tiny) the rates are scaled down 10x."""
from __future__ import annotations

import statistics
import time

import torch

from common import config, free, guarded, inputs, parse_args, sync, write


def alone(core, device, reps: int) -> dict:
    tick, vlm = [], []
    t = 0.0
    for i in range(reps):
        if i % 10 == 0:
            t0 = time.perf_counter()
            core.vlm_pass(t)
            sync(device)
            vlm.append((time.perf_counter() - t0) * 1e3)
        t0 = time.perf_counter()
        core.tick(t)
        sync(device)
        tick.append((time.perf_counter() - t0) * 1e3)
        t += core.period
    return {"alone_tick_ms_p50": round(statistics.median(tick[1:]), 3),
            "alone_tick_ms_max": round(max(tick[1:]), 3),
            "alone_vlm_ms_p50": round(statistics.median(vlm[1:] or vlm), 3)}


def run(args, robots: int, built, tick: str) -> dict:
    from physai_ros.engine.streaming.expert import StreamingExpert
    from physai_ros.engine.streaming.stream_engine import StreamingEngine
    from physai_ros.engine.streaming.streams import StreamingConfig, StreamingCore

    engine, expert = built
    if tick != expert.tick:  # another tick over the same model and weights
        expert = StreamingExpert(engine.model, expert.tw, expert.force, tick=tick)
    cfg = engine.config
    scale = 1.0 if torch.device(args.device).type == "cuda" else 0.1
    scfg = StreamingConfig(vlm_hz=30.0 * scale, ae_hz=480.0 * scale, action_hz=50.0 * scale, max_robots=max(4, robots))
    core = StreamingCore(engine, expert, scfg)
    for i in range(robots):
        core.add_robot(f"r{i}", inputs(cfg, 1, 2, seed=i)[0], seed=i)
    out = {"robots": robots, "tick": tick, "rate_scale": scale, **alone(core, args.device, 60)}
    segments = [0]
    eng = StreamingEngine(core, lambda seg: segments.__setitem__(0, segments[0] + 1))
    eng.start()
    try:
        end = time.perf_counter() + args.seconds
        k = 0
        while time.perf_counter() < end:  # robot 0's camera changes at 15 Hz, as a real one would
            time.sleep(1 / 15)
            k += 1
            core.update_observation("r0", inputs(cfg, 1, 2, seed=1000 + k)[0], captured_at=time.perf_counter())
    finally:
        eng.stop()
    m = eng.metrics()
    out.update({k: (round(v, 3) if isinstance(v, float) else v) for k, v in m.items() if k != "errors"})
    out["missed_ticks"], out["scheduled_ticks"] = eng.missed_ticks, eng.scheduled_ticks
    out["segments"], out["errors"] = segments[0], eng.errors[:5]
    graphs = getattr(expert.fused, "graphs", None)
    if graphs is not None:
        out.update(graph_captures=graphs.captures, graph_replays=graphs.replays, graph_failure=graphs.failed)
    out["ok"] = bool(not eng.errors and segments[0] > 0)
    return out


def main(argv=None) -> int:
    def extra(ap):
        ap.add_argument("--ticks", default="fused,graphs",
                        help="tick implementations to run (graphs: CUDA only, skipped on the CPU)")

    args = parse_args("gpu_check step 3: the two-stream streaming engine", argv, extra)
    from physai_ros.engine import random_weights
    from physai_ros.engine.streaming.expert import StreamingExpert

    res = {"device": args.device, "size": args.size, "seconds": args.seconds}
    cfg = config(args.size)
    dtype = torch.bfloat16 if torch.device(args.device).type == "cuda" else torch.float32
    built = []

    def build():
        t0 = time.perf_counter()
        w = random_weights(cfg, seed=0, dtype=dtype, device=args.device)
        built.extend(StreamingExpert.build(cfg, w, force="random", device=args.device, dtype=dtype))
        return {"build_s": round(time.perf_counter() - t0, 2)}

    guarded(res, "build", build)
    write(args.json_out, res)
    if built:
        cuda = torch.device(args.device).type == "cuda"
        ticks = [t for t in args.ticks.split(",") if t and (cuda or t != "graphs")]
        for tick in ticks:  # the graphed tick is the new one: each tick at 1 robot, then at 4
            for robots in (1, 4):
                key = f"robots_{robots}" if tick == "fused" else f"robots_{robots}_{tick}"
                guarded(res, key, lambda: run(args, robots, built, tick))
                write(args.json_out, res)
    free(args.device)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
