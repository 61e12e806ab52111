"""What the exact LeRobot image path costs on the CPU, side by side in one run: one robot, two
camera frames of a real size, from the robot's bytes to the model's float pixels at the model's
size (224 for pi0 / pi0.5):

  bytes bilinear   (before, for LeRobot checkpoints): cv2 bilinear resize of the uint8 frame
                   to LeRobot's sides, rounded to bytes, padded, then the collation's scaling
  bytes letterbox  (our own checkpoints' path, unchanged): the same with area interpolation
  LeRobot frames   (now, for LeRobot checkpoints): the frames as bytes to the collation, which
                   makes floats and resizes them as LeRobot does (engine.camera_frames)

  .venv/bin/python bench/camera_frames.py --width 640 --height 480 --reps 200 --json out/camera_frames.json

Prints the medians (ms) and their ratio; compare with a round's latency (README) to read the
share of a round.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import time
from pathlib import Path

import numpy as np
import torch

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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--width", type=int, default=640)
    ap.add_argument("--height", type=int, default=480)
    ap.add_argument("--views", type=int, default=2)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (a serving thread's count)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    frames = [rng.integers(0, 256, (args.height, args.width, 3), dtype=np.uint8) for _ in range(args.views)]
    load = os.getloadavg()[0]
    # Interleaved, so a change in the machine's load falls on all three.
    paths = {"bytes_bilinear_ms": bytes_bilinear, "bytes_letterbox_ms": bytes_letterbox,
             "lerobot_frames_ms": lerobot_frames}
    times = {k: [] for k in paths}
    for _ in range(5):
        for k, fn in paths.items():
            times[k].append(median_ms(lambda: fn(frames, args.size), args.reps // 5))
    ms = {k: round(statistics.median(v), 3) for k, v in times.items()}
    doc = {"frames": f"{args.views} x {args.width}x{args.height} bgr8", "model_size": args.size,
           "threads": args.threads, **ms,
           "lerobot_frames_over_bytes_bilinear": round(ms["lerobot_frames_ms"] / ms["bytes_bilinear_ms"], 2),
           "load_before": round(load, 2), "load_after": round(os.getloadavg()[0], 2),
           "machine": platform.processor() or platform.machine(), "torch": torch.__version__,
           "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                    cwd=Path(__file__).resolve().parents[1]).stdout.strip()}
    print(json.dumps(doc, indent=1))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
