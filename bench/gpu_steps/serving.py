"""The serving path in one process on the device: ServingCore (validation, letterbox of raw camera
frames, tokenizer, batching scheduler, engine, horizon policy) with a full-size pi0 in bf16 (fast
path, CUDA graphs where there is CUDA), one and four robots, each sending two raw 480x640 rgb8
frames per observation as a camera would. Per round every robot submits, then the core steps
until every chunk is back: submit-to-chunk wall time per robot, p50/p99."""
from __future__ import annotations

import time

import numpy as np
import torch

from common import ROOT, config, free, guarded, parse_args, pct, write

HEIGHT, WIDTH, VIEWS, JOINTS = 480, 640, 2, 6


def build_core(args):
    from physai_ros.engine import Pi0Engine, random_weights
    from physai_ros.scheduler.base import make_scheduler
    from physai_ros.serving.serving_core import ServingCore
    from physai_ros.serving.instances import EngineSlot, default_profile
    from physai_ros.engine.processor.tokenizer import PromptTokenizer

    cfg = config(args.size)
    cuda = torch.device(args.device).type == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32
    eng = Pi0Engine(cfg, random_weights(cfg, seed=0, dtype=dtype, device=args.device), device=args.device,
                    dtype=dtype, cuda_graphs=cuda)
    return ServingCore([EngineSlot("engine_0", eng, 4, default_profile(4))], make_scheduler("fifo"),
                       PromptTokenizer(ROOT / "physai_ros" / "assets" / "tokenizer.json", 48))


def observation(robot: str, round_id: int, now: float, rng):
    from physai_ros.protocol.observation import ImageData, ObservationData

    images = tuple(ImageData(HEIGHT, WIDTH, "rgb8", WIDTH * 3, rng.integers(0, 256, (HEIGHT, WIDTH, 3), np.uint8).tobytes())
                   for _ in range(VIEWS))
    return ObservationData(robot_id=robot, task_id="pick", round_id=round_id, stamp=now, images=images,
                           state=rng.standard_normal(JOINTS).astype(np.float32), wrench=np.zeros(6, np.float32),
                           wrench_stamp=now, prompt="pick up the red cube", exec_phase_start=0.0,
                           actions_remaining=0, control_period=0.02, horizon_policy="static", horizon_params=(10.0,))


def run(args, core, robots: int) -> dict:
    from physai_ros.protocol.chunk import STATUS_OK
    from physai_ros.protocol.registration import RobotRegistration

    names = tuple(f"j{i}" for i in range(JOINTS))
    ids = [f"robot_{robots}_{i}" for i in range(robots)]
    for rid in ids:
        res = core.register(RobotRegistration(rid, "pick", f"/{rid}", "pick up the red cube",
                                              tuple(f"/{rid}/camera_{v}" for v in range(VIEWS)), VIEWS, HEIGHT, WIDTH,
                                              names, JOINTS, JOINTS, 0.02))
        if not res.accepted:
            raise RuntimeError(f"{rid}: registration refused: {res.reason}")
    rng = np.random.default_rng(robots)
    latency, errors = [], []
    rounds = args.runs + args.warmup
    for k in range(rounds):
        sent, got = {}, {}
        for rid in ids:
            now = time.time()
            sent[rid] = time.perf_counter()
            for c in core.submit(observation(rid, 2 * k + 2, now, rng), now=now):
                got[c.robot_id] = (time.perf_counter(), c)
        deadline = time.perf_counter() + 60
        while len(got) < robots and time.perf_counter() < deadline:
            for c in core.step(now=time.time()).chunks:
                got[c.robot_id] = (time.perf_counter(), c)
        if len(got) < robots:
            raise RuntimeError(f"round {k}: {robots - len(got)} robots got no chunk within 60 s")
        for rid, (t, c) in got.items():
            if c.status != STATUS_OK:
                errors.append(f"{rid}: {c.status} {getattr(c, 'message', '')}"[:200])
            elif k >= args.warmup:
                latency.append((t - sent[rid]) * 1e3)
    for rid in ids:
        core.release(rid)
    return {"robots": robots, "rounds": args.runs, "submit_to_chunk_ms_p50": pct(latency, 50),
            "submit_to_chunk_ms_p99": pct(latency, 99), "errors": errors[:5], "error_count": len(errors),
            "ok": not errors and len(latency) == robots * args.runs}


def main(argv=None) -> int:
    args = parse_args("gpu_check step 5: the serving path in one process", argv)
    res = {"device": args.device, "size": args.size, "frames": f"{VIEWS} x {HEIGHT}x{WIDTH} rgb8 per observation"}
    core = []
    guarded(res, "build", lambda: core.append(build_core(args)) or {"ok": True})
    write(args.json_out, res)
    if core:
        for robots in (1, 4):
            guarded(res, f"robots_{robots}", lambda: run(args, core[0], robots))
            write(args.json_out, res)
    free(args.device)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
