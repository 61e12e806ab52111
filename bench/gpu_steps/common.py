"""What the gpu_check steps share: one argument parser, seeded inputs, timers that synchronise
the device, percentiles and the relative error measure of METHOD.md (||out - ref|| / ||ref||)."""
from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path
from typing import Callable, List, Optional

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def _source_tree_kernels() -> None:
    """On a machine where the package is not installed (the GPU machine runs a bare copy of the
    tree), map kernels/ to physai_ros.kernels as setup.py's package_dir does."""
    import importlib.util

    try:
        if importlib.util.find_spec("physai_ros.kernels") is not None:
            return
    except ImportError:
        pass
    import physai_ros

    spec = importlib.util.spec_from_file_location("physai_ros.kernels", ROOT / "kernels" / "__init__.py",
                                                  submodule_search_locations=[str(ROOT / "kernels")])
    module = importlib.util.module_from_spec(spec)
    sys.modules["physai_ros.kernels"] = module
    physai_ros.kernels = module
    spec.loader.exec_module(module)


_source_tree_kernels()

# Size presets of each step: "full" is the published pi0 (the GPU run), "tiny" the CPU dry run.
SIZES = {"full": "pi0", "tiny": "tiny"}
PI05 = dict(policy="pi05", time_schedule="multiply", rope_style="multiply")
PROMPT_LEN = 48  # LeRobot pads pi0's prompt to 48 tokens


def parse_args(description: str, argv=None, extra: Optional[Callable] = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--size", choices=sorted(SIZES), default="full")
    ap.add_argument("--runs", type=int, default=50, help="timed runs per case")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=30.0, help="duration of the real-time loops")
    ap.add_argument("--json-out", required=True)
    if extra is not None:
        extra(ap)
    return ap.parse_args(argv)


def config(size: str, policy: str = "pi0"):
    from physai_ros.engine import Pi0Config

    return Pi0Config.preset(SIZES[size], **(PI05 if policy == "pi05" else {}))


def dtype_of(name: str) -> torch.dtype:
    return {"fp32": torch.float32, "bf16": torch.bfloat16}[name]


def inputs(cfg, batch: int, views: int, seed: int = 0, prompt: int = PROMPT_LEN):
    """CPU EngineInputs (the engine collates them onto its device), like a user's: pixels in
    [-1, 1], a full prompt, a state and the sampling noise."""
    from physai_ros.engine import EngineInput

    gen = torch.Generator().manual_seed(seed)
    s = cfg.vision.image_size
    return [EngineInput(images=torch.rand(views, 3, s, s, generator=gen) * 2 - 1,
                        image_masks=torch.ones(views, dtype=torch.bool),
                        tokens=torch.randint(0, cfg.vocab_size, (prompt,), generator=gen),
                        token_mask=torch.ones(prompt, dtype=torch.bool),
                        state=torch.randn(cfg.max_state_dim, generator=gen),
                        noise=torch.randn(cfg.chunk_size, cfg.max_action_dim, generator=gen))
            for _ in range(batch)]


def sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    out, ref = out.detach().double().cpu(), ref.detach().double().cpu()
    if not torch.isfinite(out).all():
        return float("nan")
    return float((out - ref).norm() / ref.norm().clamp_min(1e-30))


def pct(xs: List[float], q: float) -> Optional[float]:
    if not xs:
        return None
    s = sorted(xs)
    i = min(len(s) - 1, max(0, int(round(q / 100 * (len(s) - 1)))))
    return round(s[i], 3)


def time_calls(fn: Callable[[], object], device, runs: int, warmup: int) -> dict:
    """Wall time of fn() from call to device idle, ms: p50/p99 over `runs` after `warmup`."""
    for _ in range(warmup):
        fn()
    sync(device)
    ms = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        sync(device)
        ms.append((time.perf_counter() - t0) * 1e3)
    return {"p50_ms": pct(ms, 50), "p99_ms": pct(ms, 99), "min_ms": round(min(ms), 3), "runs": runs}


def free(device) -> None:
    import gc

    gc.collect()
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()


def guarded(results: dict, key: str, fn: Callable[[], object], save: Optional[Callable[[], None]] = None) -> None:
    """results[key] = fn(), or the error that stopped it: one case failing keeps the others.
    save: called after the case (a step stopped at its time box keeps what it wrote)."""
    t0 = time.perf_counter()
    try:
        results[key] = fn()
    except Exception as exc:  # reported in the JSON, by case; the step goes on
        results[key] = {"error": f"{type(exc).__name__}: {exc}",
                        "where": traceback.format_exc(limit=-3).strip().splitlines()[-3:]}
    print(f"[{key}] {time.perf_counter() - t0:.1f} s: {json.dumps(results[key], default=str)[:300]}",
          file=sys.stderr, flush=True)
    if save is not None:
        save()


def write(path: str, result: dict) -> None:
    Path(path).write_text(json.dumps(result, indent=1, default=str))
