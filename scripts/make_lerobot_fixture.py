#!/usr/bin/env python3
"""Write the LeRobot PI0 equivalence fixture: a tiny random-weight checkpoint, inputs for three
robots (different prompt lengths and camera views), fixed noise, and LeRobot's action chunks.

    .venv-lerobot/bin/python scripts/make_lerobot_fixture.py [--out DIR] [--seed N]
        [--preset fixture|tiny|pi0_2layer|...] [--checkpoint DIR]

--checkpoint takes the weights from a LeRobot-layout checkpoint (e.g. one our engine wrote)
instead of drawing them; --preset must then describe its sizes.

Run it with the reference environment's python (scripts/lerobot_reference/setup_venv.sh); from
any other python it re-executes itself there. Output (default test/fixtures/lerobot_pi0/):
  checkpoint/config.json, checkpoint/model.safetensors   as PI0Policy.save_pretrained writes them
  cases.safetensors                                        inputs and expected outputs (see manifest)
  manifest.json                                            versions, seed, command, layout, checks
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REF_DIR = ROOT / "scripts" / "lerobot_reference"
sys.path.insert(0, str(REF_DIR))
from reference_venvs import venv_python  # noqa: E402  (stdlib only)
DEFAULT_OUT = ROOT / "test" / "fixtures" / "lerobot_pi0"


def reference_python() -> Path:
    """The LeRobot 0.3.2 reference venv's python (reference_venvs.venv_python)."""
    return venv_python("0.3.2")


def _reexec_in_reference_venv() -> None:
    try:
        import lerobot  # noqa: F401
        return
    except ImportError:
        pass
    py = reference_python()
    if not py.exists():
        sys.exit(f"lerobot is not importable here and {py} does not exist: "
                 "run scripts/lerobot_reference/setup_venv.sh first (or set LEROBOT_PYTHON)")
    os.execv(str(py), [str(py), str(Path(__file__).resolve()), *sys.argv[1:]])


# Three robots: camera views present (False = missing camera slot) and prompt lengths.
ROBOTS = (
    {"views": (True,), "prompt_len": 5},
    {"views": (True, True), "prompt_len": 11},
    {"views": (True, False, True), "prompt_len": 8},
)


def make_cases(spec, seed: int):
    import torch

    gen = torch.Generator().manual_seed(seed + 1)
    s = spec.sizes.image_size
    robots = []
    for r in ROBOTS:
        views = torch.tensor(r["views"], dtype=torch.bool)
        images = torch.rand(len(views), 3, s, s, generator=gen) * 2 - 1
        # LeRobot fills a missing camera with -1 (prepare_images); its tokens are masked anyway.
        images[~views] = -1.0
        n = r["prompt_len"]
        robots.append({
            "images": images,
            "image_masks": views,
            "tokens": torch.randint(1, spec.sizes.vocab_size, (n,), generator=gen, dtype=torch.int64),
            "token_mask": torch.ones(n, dtype=torch.bool),
            "state_raw": torch.randn(spec.state_dim, generator=gen) * 2 + 0.5,
            "noise": torch.randn(spec.chunk_size, spec.max_action_dim, generator=gen),
        })
    stats = {
        "observation.state": {"mean": torch.randn(spec.state_dim, generator=gen),
                              "std": torch.rand(spec.state_dim, generator=gen) + 0.5},
        "action": {"mean": torch.randn(spec.action_dim, generator=gen),
                   "std": torch.rand(spec.action_dim, generator=gen) + 0.5},
    }
    return robots, stats


def stack_batch(robots, spec):
    """Pad like a batching engine would: missing view slots (-1 images, mask False) and
    right-padded prompts (id 0, mask False)."""
    import torch

    b = len(robots)
    nv = max(r["images"].shape[0] for r in robots)
    nl = max(r["tokens"].shape[0] for r in robots)
    s = spec.sizes.image_size
    images = torch.full((b, nv, 3, s, s), -1.0)
    image_masks = torch.zeros(b, nv, dtype=torch.bool)
    tokens = torch.zeros(b, nl, dtype=torch.int64)
    token_mask = torch.zeros(b, nl, dtype=torch.bool)
    for i, r in enumerate(robots):
        v, n = r["images"].shape[0], r["tokens"].shape[0]
        images[i, :v], image_masks[i, :v] = r["images"], r["image_masks"]
        tokens[i, :n], token_mask[i, :n] = r["tokens"], r["token_mask"]
    return {
        "images": images, "image_masks": image_masks, "tokens": tokens, "token_mask": token_mask,
        "state": torch.stack([r["state"] for r in robots]),
        "noise": torch.stack([r["noise"] for r in robots]),
    }


def run_lerobot(policy, images, image_masks, tokens, token_mask, state, noise):
    """images [B, V, 3, S, S] -> LeRobot's per-view lists."""
    import reference

    views = images.shape[1]
    return reference.sample(
        policy,
        [images[:, v] for v in range(views)],
        [image_masks[:, v] for v in range(views)],
        tokens, token_mask, state, noise,
    )


def main(argv=None) -> int:
    _reexec_in_reference_venv()
    sys.path.insert(0, str(REF_DIR))
    import torch
    from safetensors.torch import save_file

    import lerobot_compat as lc
    import reference

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--preset", choices=sorted(reference.PRESETS), default="fixture")
    ap.add_argument("--checkpoint", type=Path, default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)

    spec = reference.spec_for(args.preset)
    robots, stats = make_cases(spec, args.seed)
    policy = reference.build_policy(spec, args.seed, stats=stats, randomize=args.checkpoint is None)
    if args.checkpoint is not None:
        reference.load_checkpoint(policy, args.checkpoint)

    tensors = {}
    checks = {}
    for i, r in enumerate(robots):
        normed = policy.normalize_inputs({"observation.state": r["state_raw"][None]})["observation.state"][0]
        r["state"] = torch.zeros(spec.max_state_dim)
        r["state"][: spec.state_dim] = normed
        out = run_lerobot(policy, r["images"][None], r["image_masks"][None], r["tokens"][None],
                          r["token_mask"][None], r["state"][None], r["noise"][None])
        r["expected_actions"] = out.actions[0]
        r["expected_updates"] = (out.velocities[:, 0] * torch.tensor(-1.0 / spec.num_steps)).contiguous()
        r["expected_actions_unnormalized"] = policy.unnormalize_outputs(
            {"action": out.actions[:, :, : spec.action_dim]})["action"][0]
        times = out.times
        for k, v in r.items():
            tensors[f"robot{i}.{k}"] = v.contiguous()

    batch = stack_batch(robots, spec)
    out = run_lerobot(policy, **batch)
    for k, v in batch.items():
        tensors[f"batch.{k}"] = v.contiguous()
    tensors["batch.expected_actions"] = out.actions.contiguous()
    checks["batch_vs_alone_max_abs"] = max(
        float((out.actions[i] - robots[i]["expected_actions"]).abs().max()) for i in range(len(robots)))
    checks["actions_max_abs"] = float(out.actions.abs().max())
    checks["robots_differ_min_max_abs"] = min(
        float((robots[i]["expected_actions"] - robots[j]["expected_actions"]).abs().max())
        for i in range(len(robots)) for j in range(i + 1, len(robots)))

    # How far the Euler time schedule alone moves the result: LeRobot 0.3.2 accumulates t in
    # float32 (t += dt); openpi / LeRobot >= 0.4 compute t = 1 + step * dt.
    openpi_times = [1.0 + s * (-1.0 / spec.num_steps) for s in range(spec.num_steps)]
    alt = reference.sample_with_times(
        policy, [batch["images"][:, v] for v in range(batch["images"].shape[1])],
        [batch["image_masks"][:, v] for v in range(batch["images"].shape[1])],
        batch["tokens"], batch["token_mask"], batch["state"], batch["noise"], openpi_times)
    checks["openpi_time_schedule_max_abs_diff"] = float((alt - out.actions).abs().max())

    ckpt = args.out / "checkpoint"
    ckpt.mkdir(parents=True, exist_ok=True)
    policy.save_pretrained(ckpt)
    save_file(tensors, str(args.out / "cases.safetensors"))

    import transformers
    manifest = {
        "what": "LeRobot PI0 (tiny, random weights, fp32) equivalence fixture for physai_ros.engine",
        "command": "scripts/lerobot_reference/setup_venv.sh && .venv-lerobot/bin/python "
                   f"scripts/make_lerobot_fixture.py --seed {args.seed} --preset {args.preset}"
                   + (f" --checkpoint {args.checkpoint}" if args.checkpoint else ""),
        "preset": args.preset,
        "weights": "checkpoint" if args.checkpoint else "random (reference.randomize_weights)",
        "lerobot_version": lc.lerobot_version(),
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "seed": args.seed,
        "patches": "scripts/lerobot_reference/lerobot_compat.py: bf16 casts -> fp32, hub tokenizer "
                   "not loaded (token ids given), tiny sizes, torchvision op schemas declared",
        "sizes": {k: getattr(spec.sizes, k) for k in spec.sizes.__dataclass_fields__},
        "chunk_size": spec.chunk_size, "num_steps": spec.num_steps,
        "state_dim": spec.state_dim, "action_dim": spec.action_dim,
        "max_state_dim": spec.max_state_dim, "max_action_dim": spec.max_action_dim,
        "num_robots": len(robots),
        "robots": [{"views": list(r["views"]), "prompt_len": r["prompt_len"]} for r in ROBOTS],
        "euler_times_float32": times,
        "layout": {
            "robot{i}.images": "float32 [V, 3, S, S] in [-1, 1]; a missing camera is -1 with mask False",
            "robot{i}.image_masks": "bool [V]",
            "robot{i}.tokens": "int64 [L] (no padding)", "robot{i}.token_mask": "bool [L]",
            "robot{i}.state_raw": "float32 [state_dim], before normalisation",
            "robot{i}.state": "float32 [max_state_dim], normalised with the checkpoint stats, zero padded",
            "robot{i}.noise": "float32 [chunk, max_action_dim]",
            "robot{i}.expected_actions": "float32 [chunk, max_action_dim]: sample_actions, robot alone",
            "robot{i}.expected_updates": "float32 [steps, chunk, max_action_dim]: dt * v_t per Euler step",
            "robot{i}.expected_actions_unnormalized": "float32 [chunk, action_dim]: unpadded, unnormalised",
            "batch.*": "the three robots padded to 3 views / longest prompt, one sample_actions call",
            "batch.expected_actions": "float32 [B, chunk, max_action_dim]",
        },
        "checks": checks,
    }
    (args.out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    print(json.dumps({"out": str(args.out), **checks}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
