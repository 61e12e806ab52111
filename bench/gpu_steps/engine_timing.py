"""Full-size pi0 and pi0.5 (random weights drawn on the device), bf16 on CUDA: per mode (plain,
fast, fast + CUDA graphs, Triton, Triton + graphs), batch 1 with 1/2/3 views, then batch 4 and 16
with 2 views; wall time of Pi0Engine.infer (inputs from the host, chunk back on the host, as the
server calls it), p50/p99 after warm-up. Beside it, the roofline of the GPU found (bench/
roofline.py) and realtime-vla's RTX 4090 figure. Triton runs with the tile table
(PHYSAI_KERNELS_AUTOTUNE=0 unless set): timing candidates per shape would take the step's minutes.
The graphs are captured per (batch bucket, views, prompt-token bucket) (cuda_graphs.py); before
2026-11-28's second run they padded every batch to 3 views and 256 tokens."""
from __future__ import annotations

import os
import sys

os.environ.setdefault("PHYSAI_KERNELS_AUTOTUNE", "0")

import torch  # noqa: E402

from common import ROOT, config, free, guarded, inputs, parse_args, sync, time_calls, write  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
REALTIME_VLA_4090_MS = {"2": 27.3}  # ../shared/papers realtime-vla: pi0, two views, RTX 4090

MODES = {
    "fast": dict(fast=True),
    "fast+graphs": dict(fast=True, cuda_graphs=True),
    "plain": dict(fast=False),
    "triton": dict(fast=True, backend="triton"),
    "triton+graphs": dict(fast=True, backend="triton", cuda_graphs=True),
}
BATCHED = ("fast", "fast+graphs", "triton+graphs")  # batch 4 and 16 only where serving would run them


def roofline(device) -> dict:
    from physai_bench import roofline as rf

    name = torch.cuda.get_device_name(device) if torch.device(device).type == "cuda" else "cpu"
    key = "h200" if "H200" in name else "h100_sxm" if "H100" in name else None
    out = {"gpu": name, "realtime_vla_rtx4090_ms": REALTIME_VLA_4090_MS,
           "rtx4090_roofline_ms": {str(v): round(rf.total_ms(rf.GPUS["rtx4090"], v)["total"], 3) for v in (1, 2, 3)}}
    if key:
        out[f"{key}_roofline_ms"] = {str(v): round(rf.total_ms(rf.GPUS[key], v)["total"], 3) for v in (1, 2, 3)}
    return out


def split_ms(eng, cfg, device, runs: int) -> dict:
    """prefix and denoise apart (fast path, 2 views): which half the time goes to."""
    from physai_ros.engine.batching import collate

    b = collate(inputs(cfg, 1, 2, seed=1), cfg, eng.device, eng.dtype)
    cache = {}
    pre = time_calls(lambda: cache.__setitem__("c", eng.model.prefix(b.images, b.image_masks, b.tokens, b.token_mask)),
                     device, runs, 2)
    den = time_calls(lambda: eng.model.denoise(cache["c"], b.state, b.noise), device, runs, 2)
    return {"prefix": pre, "denoise": den}


def time_mode(args, cfg, policy: str, mode: str, res: dict) -> dict:
    """Times every case of one mode into res; returns what building it took."""
    import time

    from physai_ros.engine import Pi0Engine, random_weights

    kw = MODES[mode]
    if kw.get("cuda_graphs") and torch.device(args.device).type != "cuda":
        return {"skipped": "CUDA graphs need a CUDA device"}
    if args.size == "tiny" and kw.get("backend") == "triton" and policy != "pi0":
        return {"skipped": "the CPU dry run times Triton's interpreter once (pi0, batch 1, 1 view)"}
    t0 = time.perf_counter()
    dtype = torch.bfloat16 if torch.device(args.device).type == "cuda" else torch.float32
    w = random_weights(cfg, seed=0, dtype=dtype, device=args.device)
    eng = Pi0Engine(cfg, w, device=args.device, dtype=dtype, **kw)
    del w
    built = {"build_s": round(time.perf_counter() - t0, 2)}
    cases = [(1, v) for v in (1, 2, 3)] + ([(4, 2), (16, 2)] if mode in BATCHED else [])
    if args.size == "tiny" and kw.get("backend") == "triton":
        cases = cases[:1]  # the dry run: Triton's CPU interpreter takes seconds per chunk
    for batch, views in cases:
        key = f"{policy}/{mode}/b{batch}v{views}"
        runs = args.runs if kw.get("cuda_graphs") or args.eager_runs is None else args.eager_runs
        runs = runs if batch == 1 else max(5, runs // 2)
        batch_in = inputs(cfg, batch, views, seed=2)
        guarded(res, key, lambda: time_calls(lambda: eng.infer(batch_in), args.device, runs, args.warmup))
        write(args.json_out, res)
    if mode == "fast":
        guarded(res, f"{policy}/{mode}/split_b1v2", lambda: split_ms(eng, cfg, args.device, args.eager_runs or args.runs))
    if torch.device(args.device).type == "cuda":
        built["max_memory_gb"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
        torch.cuda.reset_peak_memory_stats()
    eng = None  # free the weights before the next mode builds its own
    free(args.device)
    return built


def main(argv=None) -> int:
    def extra(ap):
        ap.add_argument("--policies", default="pi0,pi05")
        ap.add_argument("--eager-runs", type=int, default=None,
                        help="timed runs per case without CUDA graphs (eager is ~200 ms a chunk on an H200)")
        ap.add_argument("--modes", default=",".join(MODES))

    args = parse_args("gpu_check step 2: full-size engine timing", argv, extra)
    res: dict = {"device": args.device, "size": args.size, "dtype": "bf16 on CUDA, fp32 on the CPU",
                 "measure": "wall ms of Pi0Engine.infer, host inputs to host chunk; prompt 48 tokens, chunk "
                            "50, 10 steps", "kernels_autotune": os.environ["PHYSAI_KERNELS_AUTOTUNE"]}
    guarded(res, "roofline", lambda: roofline(args.device))
    write(args.json_out, res)
    for policy in args.policies.split(","):
        cfg = config(args.size, policy)
        for mode in args.modes.split(","):
            guarded(res, f"{policy}/{mode}", lambda: time_mode(args, cfg, policy, mode, res))
            sync(args.device)
            write(args.json_out, res)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
