"""Do the policy's views hold how far a cube sits off the one below it? Linear probes, 96 px and larger.

A probe for the stacking precision place_in_order lacks (docs/pipelines.md, "What the policy's
views resolve of a stack"). Scenes from the sim: a pad where a seed puts it, the lower cube up to
3 cm off its centre, the upper cube resting on it moved by (dx, dy) up to 3.5 cm on each axis;
both views rendered at 224 px as the data was recorded and resized by the engine to each size.
Their vision-tower tokens (both views, flattened) feed a ridge regression of (dx, dy), its
penalty chosen on a validation set; reported on held-out scenes (other seeds): the error in mm
and how often the prediction tells a stack (both |d| < 2 cm, the tip-off tolerance) from a cube
that would tip off. Encoders: the shipped checkpoint's trained tower (what the policy reads), and
an untrained tower of the same architecture at each size, so that the view size is the only
difference between those rows.

Two kinds of scene: the upper cube resting on the stack with the arm at its home pose, and the
upper cube held --held-lift above it in the closed gripper, the arm over the stack as when the
policy lets go. A linear probe is a floor on what the tokens hold, not what the policy learnt to
use.

  python bench/stack_offset_probe.py --json bench/results/stack_offset_probe.json
  python bench/stack_offset_probe.py --sizes 96 --train 500 --test 200   # quicker
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from physai_bench import results
from physai_bench.stack_scenes import LOWER_OFF_M, TIP_OFF_M, UPPER_OFF_M, stack_views
from physai_lab.training.policy_model import training_init
from physai_lab.training.train import ModelSize
from physai_ros.engine.camera_frames import robots_model_pixels
from physai_ros.engine.checkpoint.loader import load_lerobot_checkpoint
from physai_ros.engine.pi0.modeling import siglip
from physai_ros.engine.types import Pi0Config

PENALTIES = (0.1, 1.0, 10.0, 100.0, 1e3, 1e4)
SHIPPED = Path(__file__).resolve().parents[1] / "physai_ros/assets/policy/sim_pi0_pipeline"


def scenes(n: int, seed: int, held_lift: float | None = None) -> tuple[list[list[torch.Tensor]], np.ndarray]:
    """n scenes' two views and the upper cube's (dx, dy) in metres, drawn from seed (held_lift:
    stack_scenes.stack_views)."""
    rng = np.random.default_rng(seed)
    frames, offsets = [], rng.uniform(-UPPER_OFF_M, UPPER_OFF_M, (n, 2))
    for i in range(n):
        lower = rng.uniform(-LOWER_OFF_M, LOWER_OFF_M, 2)
        frames.append(stack_views(int(rng.integers(2**31)), lower, offsets[i], held_lift=held_lift))
    return frames, offsets


def tokens(frames: list[list[torch.Tensor]], size: int, cfg: Pi0Config, weights) -> torch.Tensor:
    """Both views' vision-tower tokens per scene, flattened: [N, 2 * tokens * width] (float64)."""
    out = []
    with torch.no_grad():
        for i in range(0, len(frames), 100):
            views = torch.stack(robots_model_pixels(frames[i:i + 100], size, "cpu"))
            out.append(siglip(weights, cfg, views.flatten(0, 1)).reshape(views.shape[0], -1))
    return torch.cat(out).double()


def ridge_probe(encoder: str, size: int, cfg: Pi0Config, weights, train, val, test) -> dict:
    """Ridge regression of (dx, dy) on standardised tokens in its dual form (scenes < features)."""
    x_train, x_val, x_test = (tokens(frames, size, cfg, weights) for frames, _ in (train, val, test))
    mean, std = x_train.mean(0), x_train.std(0) + 1e-6
    x_train, x_val, x_test = ((x - mean) / std for x in (x_train, x_val, x_test))
    y = torch.tensor(train[1])
    gram, k_val, k_test = x_train @ x_train.T, x_val @ x_train.T, x_test @ x_train.T
    best = None
    for penalty in PENALTIES:
        alpha = torch.linalg.solve(gram + penalty * torch.eye(len(gram), dtype=gram.dtype), y)
        val_error = float(np.median(np.abs((k_val @ alpha).numpy() - val[1])))
        if best is None or val_error < best[0]:
            best = (val_error, penalty, alpha)
    return {"encoder": encoder, "size": size, "penalty": best[1], **scores((k_test @ best[2]).numpy(), test[1])}


def scores(pred: np.ndarray, truth: np.ndarray) -> dict:
    err = np.abs(pred - truth)
    stacks = np.all(np.abs(truth) < TIP_OFF_M, axis=1)
    said = np.all(np.abs(pred) < TIP_OFF_M, axis=1)
    return {"median_abs_error_mm": round(float(np.median(err)) * 1000, 2),
            "p90_abs_error_mm": round(float(np.quantile(err, 0.9)) * 1000, 2),
            "within_tolerance_per_axis": round(float(np.mean(err < TIP_OFF_M)), 4),
            "stack_call_accuracy": round(float(np.mean(stacks == said)), 4)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="96,144", help="untrained towers' image sizes (multiples of the 12 px patch)")
    ap.add_argument("--checkpoint", default=str(SHIPPED), help="the trained tower's checkpoint ('' for none)")
    ap.add_argument("--train", type=int, default=4000, help="training scenes")
    ap.add_argument("--val", type=int, default=500, help="scenes that choose the penalty")
    ap.add_argument("--test", type=int, default=1000, help="held-out scenes")
    ap.add_argument("--held-lift", type=float, default=0.03,
                    help="also probe scenes with the upper cube held this high (m) above the stack (<= 0: not)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", default="", help="results file")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    run = results.start_run("ridge probes of the upper cube's offset on vision-tower tokens of sim scenes rendered "
                            "at 224 px and resized to each size; CPU", __file__, argv)
    kinds = {"resting": None, **({f"held {a.held_lift * 100:g} cm above": a.held_lift} if a.held_lift > 0 else {})}
    trained = load_lerobot_checkpoint(a.checkpoint) if a.checkpoint else None
    rows = []
    for kind, lift in kinds.items():
        train, val, test = (scenes(n, a.seed + k, lift) for n, k in ((a.train, 0), (a.val, 2), (a.test, 1)))
        found = [{"encoder": "none: guess a centred stack", "size": 0, "penalty": None,
                  **scores(np.zeros_like(test[1]), test[1])}]
        if trained is not None:
            cfg, weights = trained
            found.append(ridge_probe(f"trained: {Path(a.checkpoint).name}", cfg.vision.image_size, cfg, weights,
                                     train, val, test))
        for size in (int(s) for s in a.sizes.split(",")):
            cfg = ModelSize(image_size=size).config()
            found.append(ridge_probe("untrained", size, cfg, training_init(cfg, a.seed), train, val, test))
        for r in found:
            r["scene"] = kind
            print(f"{kind:>20} {r['encoder']:>28} {r['size']:>4} px: error median {r['median_abs_error_mm']} mm, "
                  f"p90 {r['p90_abs_error_mm']} mm, within 2 cm per axis {r['within_tolerance_per_axis']:.3f}, "
                  f"stack told from tip-off {r['stack_call_accuracy']:.3f}", flush=True)
        rows += found
    results.write_result(a.json or None, run, {"tolerance_m": TIP_OFF_M, "lower_offset_m": LOWER_OFF_M,
                                               "upper_offset_m": UPPER_OFF_M, "held_lift_m": a.held_lift,
                                               "scenes": {
                                                   "train": a.train, "val": a.val, "test": a.test},
                                               "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
