#!/usr/bin/env python3
"""Time LeRobot's PI0 (`PI0FlowMatching.sample_actions`, fp32, CPU) at a given size; print JSON.

In the reference venv:
    .venv-lerobot/bin/python scripts/lerobot_reference/time_lerobot.py --preset pi0_2layer \
        --batch 4 --views 2 [--checkpoint DIR] [--repeats 3] [--threads 2]
From the main venv (bench/engine.py), without importing torch or lerobot here:
    sys.path.insert(0, "scripts/lerobot_reference"); from time_lerobot import time_in_reference_venv
    time_in_reference_venv(preset="tiny", batch=1, views=1)  # -> dict, or raises with lerobot's stderr

Output keys: lerobot_version, preset, batch, views, prompt_len, chunk, threads, repeats,
total_ms / prefix_ms / denoise_ms (median over repeats; prefix = image+prompt embedding and the
VLM pass that fills the KV cache, denoise = the rest of sample_actions, i.e. the 10 expert steps),
total_ms_all (every repeat), build_s, weights ("checkpoint" or "random").

Presets mirror physai_ros.engine Pi0Config presets (tiny, tiny_mqa, pi0, pi0_2layer, pi0_1layer). With
--checkpoint, weights are loaded from a LeRobot-layout model.safetensors (e.g. one written by
physai_ros.engine.checkpoint.loader.save_lerobot_checkpoint), so both engines run the same weights.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
from reference_venvs import venv_python  # noqa: E402  (stdlib only)

PRESET_NAMES = ("tiny", "tiny_mqa", "pi0", "pi0_2layer", "pi0_1layer", "fixture")


def reference_python() -> Path:
    """The LeRobot 0.3.2 reference venv's python (reference_venvs.venv_python)."""
    return venv_python("0.3.2")


def time_in_reference_venv(preset: str = "tiny", batch: int = 1, views: int = 1, prompt_len: int = 48,
                           repeats: int = 3, threads: int | None = None, checkpoint: str | None = None,
                           timeout_s: float = 1800) -> dict:
    """Run this script in the reference venv and return its JSON (stdlib only on this side)."""
    py = reference_python()
    if not py.exists():
        raise FileNotFoundError(f"{py} missing: run scripts/lerobot_reference/setup_venv.sh")
    cmd = [str(py), str(Path(__file__).resolve()), "--preset", preset, "--batch", str(batch), "--views", str(views),
           "--prompt-len", str(prompt_len), "--repeats", str(repeats)]
    if threads:
        cmd += ["--threads", str(threads)]
    if checkpoint:
        cmd += ["--checkpoint", str(checkpoint)]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"time_lerobot failed ({proc.returncode}): {proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def measure(preset: str, batch: int, views: int, prompt_len: int, repeats: int, warmup: int,
            checkpoint: Path | None, seed: int = 0) -> dict:
    sys.path.insert(0, str(HERE))
    import torch

    import lerobot_compat as lc
    import reference

    spec = reference.spec_for(preset)
    t0 = time.perf_counter()
    # Random init is skipped when a checkpoint provides the weights (a full-size draw takes minutes).
    policy = reference.build_policy(spec, seed, randomize=checkpoint is None)
    if checkpoint is not None:
        reference.load_checkpoint(policy, checkpoint)
    build_s = time.perf_counter() - t0
    model = policy.model

    gen = torch.Generator().manual_seed(seed)
    s = spec.sizes.image_size
    images = [torch.rand(batch, 3, s, s, generator=gen) * 2 - 1 for _ in range(views)]
    masks = [torch.ones(batch, dtype=torch.bool) for _ in range(views)]
    tokens = torch.randint(1, spec.sizes.vocab_size, (batch, prompt_len), generator=gen)
    token_masks = torch.ones(batch, prompt_len, dtype=torch.bool)
    state = torch.randn(batch, spec.max_state_dim, generator=gen)
    noise = torch.randn(batch, spec.chunk_size, spec.max_action_dim, generator=gen)

    # Observe, not change: the prefix is embed_prefix plus the one forward that fills the cache.
    prefix_s = [0.0]
    inner_embed, inner_fwd = model.embed_prefix, model.paligemma_with_expert.forward

    def embed_prefix(*a, **k):
        t = time.perf_counter()
        r = inner_embed(*a, **k)
        prefix_s[0] += time.perf_counter() - t
        return r

    def forward(*a, **k):
        t = time.perf_counter()
        r = inner_fwd(*a, **k)
        if k.get("fill_kv_cache"):
            prefix_s[0] += time.perf_counter() - t
        return r

    model.embed_prefix = embed_prefix
    model.paligemma_with_expert.forward = forward
    totals, prefixes = [], []
    with torch.no_grad():
        for i in range(warmup + repeats):
            prefix_s[0] = 0.0
            t = time.perf_counter()
            model.sample_actions(images, masks, tokens, token_masks, state, noise=noise.clone())
            dt = time.perf_counter() - t
            if i >= warmup:
                totals.append(dt * 1e3)
                prefixes.append(prefix_s[0] * 1e3)
    total = statistics.median(totals)
    prefix = statistics.median(prefixes)
    return {
        "lerobot_version": lc.lerobot_version(), "preset": preset, "batch": batch, "views": views,
        "prompt_len": prompt_len, "chunk": spec.chunk_size, "threads": torch.get_num_threads(),
        "repeats": repeats, "total_ms": round(total, 3), "prefix_ms": round(prefix, 3),
        "denoise_ms": round(total - prefix, 3), "total_ms_all": [round(x, 3) for x in totals],
        "build_s": round(build_s, 2), "weights": "checkpoint" if checkpoint else "random", "dtype": "float32",
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", choices=PRESET_NAMES, default="tiny")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--views", type=int, default=1)
    ap.add_argument("--prompt-len", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--checkpoint", type=Path, default=None)
    args = ap.parse_args(argv)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    out = measure(args.preset, args.batch, args.views, args.prompt_len, args.repeats, args.warmup, args.checkpoint)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
