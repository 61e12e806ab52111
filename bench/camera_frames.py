"""What the exact LeRobot image path costs on the CPU, side by side in one run: one robot, two
camera frames of a real size, from the robot's bytes to the model's float pixels at the model's
size (224 for pi0 / pi0.5):

  bytes bilinear   (before, for LeRobot checkpoints): cv2 bilinear resize of the uint8 frame
                   to LeRobot's sides, rounded to bytes, padded, then the collation's scaling
  bytes letterbox  (our own checkpoints' path, unchanged): the same with area interpolation
  LeRobot frames   (now, for LeRobot checkpoints): the frames as bytes to the collation, which
                   makes floats and resizes them as LeRobot does (engine.camera_frames)

  .venv/bin/python bench/camera_frames.py --frames 640x480,1280x720 --json bench/results/camera_frames.json

Prints the medians (ms) and their ratio; compare with a round's latency (docs/capabilities.md) to read the
share of a round.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from physai_bench import results
from physai_ros.engine.batching import model_pixels
from physai_ros.engine.camera_frames import robots_model_pixels
from physai_ros.engine.processor.images import image_to_rgb, to_model_pixels


def bytes_letterbox(frames, size: int) -> torch.Tensor:
    imgs = np.empty((len(frames), 3, size, size), dtype=np.uint8)
    for i, f in enumerate(frames):
        to_model_pixels(image_to_rgb(f, "bgr8"), size, out=imgs[i])
    return model_pixels(torch.from_numpy(imgs))


def bytes_bilinear(frames, size: int) -> torch.Tensor:
    """The removed uint8 approximation of LeRobot's resize_with_pad (kept here only to time it)."""
    import cv2

    imgs = np.zeros((len(frames), size, size, 3), dtype=np.uint8)
    for i, f in enumerate(frames):
        h, w = f.shape[:2]
        ratio = max(w / size, h / size)
        nh, nw = int(h / ratio), int(w / ratio)
        top, left = (size - nh) // 2, (size - nw) // 2
        imgs[i, top:top + nh, left:left + nw] = cv2.resize(np.ascontiguousarray(image_to_rgb(f, "bgr8")), (nw, nh),
                                                           interpolation=cv2.INTER_LINEAR)
    return model_pixels(torch.from_numpy(imgs).permute(0, 3, 1, 2))


def lerobot_frames(frames, size: int) -> torch.Tensor:
    views = tuple(torch.from_numpy(np.ascontiguousarray(image_to_rgb(f, "bgr8").transpose(2, 0, 1))) for f in frames)
    return robots_model_pixels([views], size, "cpu")[0]


def median_ms(fn, reps: int) -> float:
    fn()  # first call outside the timing
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def measure(width: int, height: int, views: int, size: int, reps: int) -> dict:
    rng = np.random.default_rng(0)
    frames = [rng.integers(0, 256, (height, width, 3), dtype=np.uint8) for _ in range(views)]
    # Interleaved, so a change in the machine's load falls on all three.
    paths = {"bytes_bilinear_ms": bytes_bilinear, "bytes_letterbox_ms": bytes_letterbox,
             "lerobot_frames_ms": lerobot_frames}
    times = {k: [] for k in paths}
    for _ in range(5):
        for k, fn in paths.items():
            times[k].append(median_ms(lambda: fn(frames, size), max(1, reps // 5)))
    ms = {k: round(statistics.median(v), 3) for k, v in times.items()}
    return {"frames": f"{views} x {width}x{height} bgr8", **ms,
            "lerobot_frames_over_bytes_bilinear": round(ms["lerobot_frames_ms"] / ms["bytes_bilinear_ms"], 2)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", default="640x480,1280x720", help="camera frame sizes, WIDTHxHEIGHT, comma-separated")
    ap.add_argument("--views", type=int, default=2)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (a serving thread's count)")
    ap.add_argument("--quick", action="store_true", help="10 repetitions")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    if args.quick:
        args.reps = 10
    torch.set_num_threads(args.threads)
    run = results.start_run(f"CPU, {args.threads} torch thread(s), {args.views} frames to {args.size}x{args.size} "
                            f"model pixels, median of {args.reps} calls, torch {torch.__version__}", __file__, argv,
                            quick=args.quick)
    cells = [measure(*map(int, f.split("x")), args.views, args.size, args.reps) for f in args.frames.split(",")]
    doc = results.write_result(args.json, run, {"model_size": args.size, "threads": args.threads, "cells": cells})
    print(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
