"""What the policy's views resolve of a stack, and what larger views cost a training step.

place_in_order is lost where the second cube is let go beside the first (docs/pipelines.md,
"Where the second cube goes"): it tips off unless its centre is within half a cube (2 cm) of the
lower one's on each axis. This bench measures that tolerance in the pixels the model reads:
the sim renders a stack as recorded (224 px views), the engine's own resize brings the frames to
each model size, and the top cube's centroid is found in the resized views with the top cube
centred on the lower one and moved 2 cm along x and along y. Beside it, the seconds of one
training step (the flow loss's forward and backward pass through the embedded policy's
architecture, random inputs, batch and samples as the shipped runs use) at each size.

  python bench/view_resolution.py --json bench/results/view_resolution.json
  python bench/view_resolution.py --sizes 96,144 --steps 4      # quicker
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from physai_bench import results
from physai_bench.stack_scenes import RECORDED_PX, TIP_OFF_M, stack_views
from physai_lab.training.policy_model import TrainablePi0
from physai_lab.training.train import ModelSize, TrainConfig
from physai_ros.engine.camera_frames import robots_model_pixels
from physai_ros.sim.render import VIEWS


def blue_centroid(view: torch.Tensor) -> tuple[np.ndarray, float]:
    """(centroid x, y in pixels, the blue cube's area in pixels) of a model-space view [3, S, S]:
    each pixel weighted by how much bluer than red it is (the cube's edges count in part)."""
    rgb = (view.numpy() + 1.0) / 2.0
    weight = np.clip(rgb[2] - rgb[0] - 0.2, 0.0, None)
    ys, xs = np.mgrid[0:weight.shape[0], 0:weight.shape[1]]
    total = weight.sum()
    return np.array([(weight * xs).sum(), (weight * ys).sum()]) / total, float(total / weight.max())


def resolution(sizes: list[int], views: int) -> list[dict]:
    frames = {k: stack_views(0, upper_offset=d, views=views) for k, d in
              {"centred": (0.0, 0.0), "x": (TIP_OFF_M, 0.0), "y": (0.0, TIP_OFF_M)}.items()}
    rows = []
    for s in sizes:
        model = {k: robots_model_pixels([f], s, "cpu")[0] for k, f in frames.items()}
        for v in range(views):
            c0, area = blue_centroid(model["centred"][v])
            shift = {axis: float(np.linalg.norm(blue_centroid(model[axis][v])[0] - c0)) for axis in ("x", "y")}
            rows.append({"size": s, "view": VIEWS[v].name, "cube_width_px": round(area ** 0.5, 2),
                         "tolerance_x_px": round(shift["x"], 2), "tolerance_y_px": round(shift["y"], 2)})
    return rows


def step_seconds(size: int, steps: int, threads: int, batch: int) -> float:
    """Median seconds of a flow-loss training step at this image size (after one warm-up)."""
    torch.set_num_threads(threads)
    tc = TrainConfig(size=ModelSize(image_size=size))
    cfg = tc.size.config()
    model = TrainablePi0(cfg, seed=0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(0)
    images = torch.rand(batch, 2, 3, size, size, generator=g) * 2 - 1
    masks = torch.ones(batch, 2, dtype=torch.bool)
    tokens = torch.randint(0, cfg.vocab_size, (batch, cfg.max_tokens), generator=g)
    token_mask = torch.ones(batch, cfg.max_tokens, dtype=torch.bool)
    state = torch.randn(batch, cfg.max_state_dim, generator=g)
    actions = torch.randn(batch, cfg.chunk_size, cfg.max_action_dim, generator=g)
    times = []
    for _ in range(steps + 1):
        t0 = time.perf_counter()
        flow, _ = model.losses(images, masks, tokens, token_mask, state, actions, 5, tc.samples_per_obs, g)
        opt.zero_grad(set_to_none=True)
        flow.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    return float(np.median(times[1:]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="96,144,192", help="model image sizes (multiples of the 12 px patch)")
    ap.add_argument("--views", type=int, default=2, help="the sim's views the policy reads (front, top)")
    ap.add_argument("--steps", type=int, default=8, help="timed training steps per size (0: no timing)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", default="", help="results file")
    a = ap.parse_args(argv)
    sizes = [int(s) for s in a.sizes.split(",")]
    run = results.start_run("the sim's stack rendered at 224 px and resized by the engine to each model size; "
                            "training steps of the embedded policy's architecture on random inputs, CPU",
                            __file__, argv)
    rows = resolution(sizes, a.views)
    timing = {s: step_seconds(s, a.steps, a.threads, a.batch) for s in sizes} if a.steps > 0 else {}
    base = timing.get(sizes[0])
    print(f"{'size':>5} {'view':>6} {'cube px':>8} {'2 cm x':>7} {'2 cm y':>7}  step s (x {sizes[0]} px)")
    for r in rows:
        t = timing.get(r["size"])
        extra = f"  {t:.3f} ({t / base:.1f}x)" if t is not None else ""
        print(f"{r['size']:>5} {r['view']:>6} {r['cube_width_px']:>8} {r['tolerance_x_px']:>7} "
              f"{r['tolerance_y_px']:>7}{extra}")
    results.write_result(a.json or None, run, {
        "recorded_px": RECORDED_PX, "offset_m": TIP_OFF_M, "views": rows,
        "step_seconds": {str(s): round(t, 4) for s, t in timing.items()},
        "step_note": "flow loss only (batch x samples per observation as the shipped runs); their steps add "
                     "the text and component passes"})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
