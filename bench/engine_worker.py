"""Remote engine overhead: the same batches through a local Pi0Engine and through RemoteEngine
to a real engine_worker process over DDS (loopback), plus message sizes at pi0's image size.

    .venv/bin/python bench/engine_worker.py [--preset tiny] [--max-batch 4] [--reps 15]

Prints one JSON object:
  sizes_kib[pi0-size, 2 views][batch]: request (u8 images) / request if sent as float32 / result
  encode_ms[batch]: building one pi0-size request (2 views) in this process
  per batch size: local_ms (median engine.infer here), remote_ms (median proxy.infer round trip),
    worker_ms (the worker's own queue + compute as it reports), overhead_ms = remote - worker
    (serialisation, DDS, deserialisation, thread hand-offs), and the ratio remote / local.
Wall-clock timings on a shared machine: medians over --reps, noisy; compare ratios.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time

os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
os.environ.setdefault("ROS_DOMAIN_ID", str(60 + os.getpid() % 40))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from physai_ros.engine.engine import Pi0Engine  # noqa: E402
from physai_ros.engine.types import EngineInput, Pi0Config  # noqa: E402
from physai_ros.workers import codec  # noqa: E402


def camera_inputs(cfg: Pi0Config, batch: int, views: int, seed: int = 0) -> list[EngineInput]:
    """Inputs as the server builds them from camera bytes (so images travel as uint8)."""
    rng = np.random.default_rng(seed)
    s = cfg.vision.image_size
    out = []
    for _ in range(batch):
        img = rng.integers(0, 256, (views, 3, s, s), dtype=np.uint8)  # bytes: the engine scales them
        out.append(EngineInput(images=torch.from_numpy(img), image_masks=torch.ones(views, dtype=torch.bool),
                               tokens=torch.arange(1, 33), token_mask=torch.ones(32, dtype=torch.bool),
                               state=torch.zeros(cfg.max_state_dim),
                               noise=torch.from_numpy(rng.normal(size=(cfg.chunk_size, cfg.max_action_dim)).astype(np.float32))))
    return out


def message_sizes(max_batch: int) -> tuple[dict, dict]:
    cfg = Pi0Config.preset("pi0")
    sizes, enc = {}, {}
    for b in range(1, max_batch + 1):
        inputs = camera_inputs(cfg, b, 2)
        t0 = time.perf_counter()
        req = codec.encode_request(inputs, cfg, "x")
        enc[b] = round((time.perf_counter() - t0) * 1e3, 2)
        f32 = len(req.images_u8) * 4 + (len(req.state) + len(req.noise)) * 4 + len(req.tokens) * 4
        u8 = len(req.images_u8) + (len(req.state) + len(req.noise)) * 4 + len(req.tokens) * 4
        res = b * cfg.chunk_size * cfg.max_action_dim * (1 + cfg.num_steps) * 4
        sizes[b] = {"request_u8": round(u8 / 1024, 1), "request_f32": round(f32 / 1024, 1),
                    "result": round(res / 1024, 1)}
    return sizes, enc


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--max-batch", type=int, default=4)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--views", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(1)

    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    from physai_ros.fleet.processes import ProcessSpec, start_process, stop_processes
    from physai_ros.ros.remote_engine import RemoteEngine

    spec = ProcessSpec("bench_worker", "physai_ros.nodes.engine_worker", "",
                       {"instance_id": "bench_worker", "preset": a.preset, "seed": 3,
                        "max_batch": a.max_batch, "profile_reps": 1, "torch_threads": 1})
    logs = tempfile.mkdtemp(prefix="bench_worker_")
    proc = start_process(spec, logs)
    rclpy.init()
    node = rclpy.create_node("bench_remote")
    ex = SingleThreadedExecutor()
    ex.add_node(node)
    stop = threading.Event()

    def spin_until_stopped():
        while not stop.is_set():
            ex.spin_once(timeout_sec=0.05)

    spin = threading.Thread(target=spin_until_stopped, daemon=True)
    spin.start()
    cfg = Pi0Config.preset(a.preset)
    out: dict = {"preset": a.preset, "views": a.views, "reps": a.reps}
    try:
        proxy = RemoteEngine(node, "bench_worker", cfg)
        end = time.monotonic() + 180
        while not proxy.alive and time.monotonic() < end:
            time.sleep(0.1)
        if not proxy.alive:
            raise SystemExit(f"worker not alive: {proxy.why_not_alive()}")
        local = Pi0Engine(cfg, seed=3)
        out["worker_profile_ms"] = [round(t * 1e3, 2) for t in proxy.profile.latencies_s]
        rows = {}
        for b in range(1, a.max_batch + 1):
            inputs = camera_inputs(cfg, b, a.views, seed=b)
            local.infer(inputs)
            proxy.infer(inputs)
            loc, rem, wrk = [], [], []
            for _ in range(a.reps):
                t0 = time.perf_counter()
                local.infer(inputs)
                loc.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                o = proxy.infer(inputs)
                rem.append(time.perf_counter() - t0)
                wrk.append((o[0].timings_ms["total_ms"] + o[0].timings_ms["worker_queue_ms"]) / 1e3)
            lm, rm, wm = (statistics.median(x) * 1e3 for x in (loc, rem, wrk))
            rows[b] = {"local_ms": round(lm, 2), "remote_ms": round(rm, 2), "worker_ms": round(wm, 2),
                       "overhead_ms": round(rm - wm, 2), "remote_over_local": round(rm / lm, 3)}
        out["per_batch"] = rows
        out["network_rtt_ms_ewma"] = round(proxy.network_rtt_s * 1e3, 3)
    finally:
        stop.set()
        spin.join(2)
        stop_processes([proc])
        node.destroy_node()
        rclpy.try_shutdown()
    out["pi0_sizes_kib_2views"], out["pi0_encode_ms_2views"] = message_sizes(a.max_batch)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
