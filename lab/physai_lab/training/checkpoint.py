"""Write a trained policy as a checkpoint directory the serving path loads unchanged:

    config.json                 LeRobot PI0 config (sizes, chunk, tokenizer length, features)
    model.safetensors           LeRobot PI0 tensor names (engine.checkpoint.loader.save_lerobot_checkpoint)
    normalization_stats.json    {"state": {mean, std}, "action": {mean, std}} (engine.processor.normalizer)
    manifest.json               how it was trained (data, seed, steps, command, time, loss, commit)

The serving loader infers sizes from tensor shapes with its default head parameters (a single
KV head of any size, 16 SigLIP heads), so the model sizes chosen here keep to those.
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Dict, Sequence

import numpy as np
import torch

from physai_ros.engine.checkpoint.params import Weights
from physai_ros.engine.checkpoint.writer import save_lerobot_checkpoint
from physai_ros.engine.processor.normalizer import STATS_FILE
from physai_ros.engine.types import Pi0Config

MANIFEST_FILE = "manifest.json"


def save_policy(out, cfg: Pi0Config, weights: Weights, state_stats: Dict[str, np.ndarray],
                action_stats: Dict[str, np.ndarray], joint_names: Sequence[str], image_keys: Sequence[str],
                image_size: int, manifest: dict) -> Path:
    out = Path(out)
    save_lerobot_checkpoint(out, cfg, lambda name, shape: weights[name].detach().float())
    lr = json.loads((out / "config.json").read_text())
    dim = len(joint_names)
    lr.update({
        "input_features": {
            **{k: {"type": "VISUAL", "shape": [3, image_size, image_size]} for k in image_keys},
            "observation.state": {"type": "STATE", "shape": [dim]},
        },
        "output_features": {"action": {"type": "ACTION", "shape": [dim]}},
        "normalization_mapping": {"VISUAL": "IDENTITY", "STATE": "MEAN_STD", "ACTION": "MEAN_STD"},
        "joint_names": list(joint_names),
    })
    (out / "config.json").write_text(json.dumps(lr, indent=2))
    stats = {k: {"mean": [float(x) for x in s["mean"]], "std": [float(x) for x in s["std"]]}
             for k, s in (("state", state_stats), ("action", action_stats))}
    (out / STATS_FILE).write_text(json.dumps(stats, indent=2))
    (out / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2))
    return out


def git_commit(repo: Path) -> str:
    try:
        sha = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return sha + ("+dirty" if dirty else "") if sha else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def weights_from_safetensors_dir(path) -> Weights:
    """Our-named weights of a checkpoint written by save_policy (through the serving loader)."""
    from physai_ros.engine.checkpoint.loader import load_lerobot_checkpoint

    _, w = load_lerobot_checkpoint(path, dtype=torch.float32)
    return w


def stats_from_checkpoint(path) -> Dict[str, Dict[str, np.ndarray]]:
    """The normalisation statistics save_policy wrote ({"state"|"action": {mean, std}})."""
    raw = json.loads((Path(path) / STATS_FILE).read_text())
    return {k: {s: np.asarray(raw[k][s], np.float32) for s in ("mean", "std")} for k in ("state", "action")}
