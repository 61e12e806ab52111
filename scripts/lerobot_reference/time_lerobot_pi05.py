#!/usr/bin/env python3
"""Time LeRobot 0.6.1's PI05 (or PI0) `sample_actions` (fp32, CPU) at a given size; print JSON.

In the 0.6.1 reference venv (one JSON line per batch x views combination; the policy is built once):
    .venv-lerobot06/bin/python scripts/lerobot_reference/time_lerobot_pi05.py --preset pi0_2layer \\
        --batch 1 4 --views 1 2 [--policy pi05|pi0] [--checkpoint DIR] [--repeats 3] [--threads 1]
From the main venv (bench/engine.py), without importing torch or lerobot here:
    sys.path.insert(0, "scripts/lerobot_reference"); from time_lerobot_pi05 import time_in_reference_venv
    time_in_reference_venv(preset="tiny", batch=1, views=1)  # -> dict, or raises with lerobot's stderr

Output keys (as time_lerobot.py's for 0.3.2, plus policy): lerobot_version, policy, preset, batch,
views, prompt_len, chunk, threads, repeats, total_ms / prefix_ms / denoise_ms (median over repeats;
prefix = embed_prefix (SigLIP + projector + token embedding) and the VLM pass that fills the KV
cache, denoise = the rest of sample_actions, i.e. the Euler steps through the expert),
total_ms_all (every repeat), build_s, weights ("checkpoint" or "random"), dtype.

Presets: fixture (test/fixtures/lerobot_pi05 sizes), tiny / tiny_mqa (physai_ros.engine's presets of
the same name), pi0 (gemma_2b + gemma_300m + So400m/14 at 224, vocabulary 257152), pi0_2layer /
pi0_1layer (those widths and vocabulary, 2 / 1 layers per tower), auto (sizes read from
--checkpoint's tensor shapes, chunk and padded dims from its config.json). With --checkpoint the
weights come from its model.safetensors (e.g. one written by physai_ros.engine.checkpoint.loader.
save_lerobot_checkpoint, or the fixture's), so both engines run the same weights. Threads default
to 1 (torch.set_num_threads(1)) so figures compare across machines and with our engine.
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

PRESET_NAMES = ("fixture", "tiny", "tiny_mqa", "pi0", "pi0_2layer", "pi0_1layer", "auto")


def reference_python() -> Path:
    """The LeRobot 0.6.1 reference venv's python (reference_venvs.venv_python)."""
    return venv_python("0.6.1")


def time_in_reference_venv(preset: str = "tiny", batch: int = 1, views: int = 1, prompt_len: int = 48,
                           repeats: int = 3, threads: int = 1, checkpoint: str | None = None,
                           policy: str = "pi05", timeout_s: float = 1800) -> dict:
    """Run this script in the 0.6.1 reference venv and return its JSON (stdlib only on this side)."""
    py = reference_python()
    if not py.exists():
        raise FileNotFoundError(f"{py} missing: run scripts/lerobot_reference/setup_venv06.sh")
    cmd = [str(py), str(Path(__file__).resolve()), "--preset", preset, "--policy", policy, "--batch", str(batch),
           "--views", str(views), "--prompt-len", str(prompt_len), "--repeats", str(repeats), "--threads", str(threads)]
    if checkpoint:
        cmd += ["--checkpoint", str(checkpoint)]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"time_lerobot_pi05 failed ({proc.returncode}): {proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def preset_spec(preset: str, policy: str, checkpoint: Path | None):
    """name -> reference_pi05.PolicySpec (sizes, chunk, padded dims)."""
    import lerobot06_compat as lc
    import reference_pi05 as rp

    if preset == "auto":
        if checkpoint is None:
            raise SystemExit("--preset auto needs --checkpoint")
        cfg = json.loads((checkpoint / "config.json").read_text())
        return rp.PolicySpec(policy=cfg.get("type", policy), sizes=rp.infer_sizes(checkpoint),
                             chunk_size=cfg["chunk_size"], max_state_dim=cfg["max_state_dim"],
                             max_action_dim=cfg["max_action_dim"], state_dim=cfg["max_state_dim"] - 2,
                             action_dim=cfg["max_action_dim"] - 2, num_steps=cfg.get("num_inference_steps", 10))
    tiny = dict(vlm_width=64, vlm_mlp=128, expert_width=32, expert_mlp=64, depth=2, head_dim=16, vision_width=32,
                vision_mlp=64, vision_depth=2, vision_heads=2, image_size=56, patch_size=14, vocab_size=1024)
    table = {
        "fixture": (lc.Sizes(), 10, 8, 8),
        "tiny": (lc.Sizes(num_heads=4, num_kv_heads=2, **tiny), 8, 8, 8),
        "tiny_mqa": (lc.Sizes(num_heads=8, num_kv_heads=1, **tiny), 8, 8, 8),
        "pi0": (lc.Sizes.pi0(), 50, 32, 32),
        "pi0_2layer": (lc.Sizes.pi0(depth=2, vision_depth=2), 50, 32, 32),
        "pi0_1layer": (lc.Sizes.pi0(depth=1, vision_depth=1), 50, 32, 32),
    }
    sizes, chunk, sdim, adim = table[preset]
    # Real robots' dims are below the padded ones; keep 2 padded slots as time_lerobot.py does.
    return rp.PolicySpec(policy=policy, sizes=sizes, chunk_size=chunk, state_dim=sdim - 2, action_dim=adim - 2,
                         max_state_dim=sdim, max_action_dim=adim)


def load_weights(policy, checkpoint: Path) -> None:
    """Copy a LeRobot-layout model.safetensors into policy.model. Every model tensor must be there
    except the lm_heads (never read at inference); a missing embed_tokens is taken from the VLM's
    lm_head, as LeRobot's own from_pretrained does."""
    from safetensors.torch import load_file

    state = {k[len("model."):]: v for k, v in load_file(str(checkpoint / "model.safetensors")).items()
             if k.startswith("model.")}
    emb = "paligemma_with_expert.paligemma.model.language_model.embed_tokens.weight"
    head = "paligemma_with_expert.paligemma.lm_head.weight"
    if emb not in state and head in state:
        state[emb] = state[head]
    result = policy.model.load_state_dict(state, strict=False)
    missing = [k for k in result.missing_keys if not k.endswith("lm_head.weight")]
    if missing or result.unexpected_keys:
        raise ValueError(f"{checkpoint}: checkpoint does not fit these sizes: missing {missing[:5]}, "
                         f"unexpected {result.unexpected_keys[:5]}")


class _PrefixClock:
    """Observes (never changes) sample_actions: the prefix is embed_prefix plus the one
    paligemma_with_expert.forward call without expert inputs (it fills the KV cache)."""

    def __init__(self, model):
        self.model, self.seconds = model, 0.0
        self._embed, self._forward = model.embed_prefix, model.paligemma_with_expert.forward
        model.embed_prefix = self._timed(self._embed, lambda a, k: True)
        model.paligemma_with_expert.forward = self._timed(
            self._forward, lambda a, k: k.get("inputs_embeds", [None, None])[1] is None)

    def _timed(self, fn, is_prefix):
        def wrapper(*a, **k):
            t = time.perf_counter()
            r = fn(*a, **k)
            if is_prefix(a, k):
                self.seconds += time.perf_counter() - t
            return r
        return wrapper


def measure(preset: str, policy_name: str, batches, views_list, prompt_len: int, repeats: int, warmup: int,
            checkpoint: Path | None, seed: int = 0):
    sys.path.insert(0, str(HERE))
    import torch

    import lerobot06_compat as lc
    import reference_pi05 as rp

    spec = preset_spec(preset, policy_name, checkpoint)
    t0 = time.perf_counter()
    # Redrawing full-size weights takes minutes and does not change the timing: only the small
    # presets get reference_pi05's random weights, the big ones keep LeRobot's own init.
    small = spec.sizes.vocab_size <= 4096
    policy = rp.build_policy(spec, seed, randomize=checkpoint is None and small)
    if checkpoint is not None:
        load_weights(policy, checkpoint)
    build_s = time.perf_counter() - t0
    model = policy.model
    clock = _PrefixClock(model)
    s = spec.sizes.image_size
    for batch in batches:
        for views in views_list:
            gen = torch.Generator().manual_seed(seed)
            images = [torch.rand(batch, 3, s, s, generator=gen) * 2 - 1 for _ in range(views)]
            masks = [torch.ones(batch, dtype=torch.bool) for _ in range(views)]
            tokens = torch.randint(1, min(spec.sizes.vocab_size, 512), (batch, prompt_len), generator=gen)
            token_mask = torch.ones(batch, prompt_len, dtype=torch.bool)
            noise = torch.randn(batch, spec.chunk_size, spec.max_action_dim, generator=gen)
            args = (images, masks, tokens, token_mask)
            if spec.policy == "pi0":
                args = args + (torch.randn(batch, spec.max_state_dim, generator=gen),)
            totals, prefixes = [], []
            with torch.no_grad():
                for i in range(warmup + repeats):
                    clock.seconds = 0.0
                    t = time.perf_counter()
                    model.sample_actions(*args, noise=noise.clone())
                    dt = time.perf_counter() - t
                    if i >= warmup:
                        totals.append(dt * 1e3)
                        prefixes.append(clock.seconds * 1e3)
            total, prefix = statistics.median(totals), statistics.median(prefixes)
            yield {
                "lerobot_version": lc.lerobot_version(), "policy": spec.policy, "preset": preset, "batch": batch,
                "views": views, "prompt_len": prompt_len, "chunk": spec.chunk_size,
                "threads": torch.get_num_threads(), "repeats": repeats, "total_ms": round(total, 3),
                "prefix_ms": round(prefix, 3), "denoise_ms": round(total - prefix, 3),
                "total_ms_all": [round(x, 3) for x in totals], "build_s": round(build_s, 2),
                "weights": "checkpoint" if checkpoint else "random", "dtype": "float32",
            }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", choices=PRESET_NAMES, default="tiny")
    ap.add_argument("--policy", choices=("pi05", "pi0"), default="pi05")
    ap.add_argument("--batch", type=int, nargs="+", default=[1])
    ap.add_argument("--views", type=int, nargs="+", default=[1])
    ap.add_argument("--prompt-len", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--checkpoint", type=Path, default=None)
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    for out in measure(args.preset, args.policy, args.batch, args.views, args.prompt_len, args.repeats,
                       args.warmup, args.checkpoint):
        print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
