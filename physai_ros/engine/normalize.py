"""Pre/post-processing with a checkpoint's normalisation statistics (LeRobot's formulas):
raw robot state -> normalised, padded model state; model actions -> unpadded robot actions.

MEAN_STD: (x - mean) / (std + 1e-8), inverse x * std + mean.
MIN_MAX:  2 (x - min) / (max - min + 1e-8) - 1, inverse (x + 1) / 2 * (max - min) + min.
IDENTITY: unchanged.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict

import torch

from .weights import CheckpointError, normalization_stats

MODES = ("IDENTITY", "MEAN_STD", "MIN_MAX")


@dataclass
class Normalizer:
    state_dim: int
    action_dim: int
    max_state_dim: int
    max_action_dim: int
    state_mode: str = "IDENTITY"
    action_mode: str = "IDENTITY"
    state_stats: Dict[str, torch.Tensor] = field(default_factory=dict)
    action_stats: Dict[str, torch.Tensor] = field(default_factory=dict)

    def __post_init__(self):
        for what, mode, stats in (("state", self.state_mode, self.state_stats), ("action", self.action_mode, self.action_stats)):
            if mode not in MODES:
                raise ValueError(f"{what} normalisation mode {mode!r}: expected one of {MODES}")
            need = {"MEAN_STD": ("mean", "std"), "MIN_MAX": ("min", "max")}.get(mode, ())
            missing = [k for k in need if k not in stats]
            if missing:
                raise ValueError(f"{what} normalisation {mode} needs statistics {missing}")

    def normalize_state(self, raw: torch.Tensor) -> torch.Tensor:
        """raw [..., state_dim] -> [..., max_state_dim], normalised and zero padded."""
        if raw.shape[-1] != self.state_dim:
            raise ValueError(f"state: expected {self.state_dim} values, got {raw.shape[-1]}")
        x = _forward(raw.float(), self.state_mode, self.state_stats)
        out = torch.zeros(*x.shape[:-1], self.max_state_dim, dtype=torch.float32)
        out[..., : self.state_dim] = x
        return out

    def unnormalize_actions(self, actions: torch.Tensor) -> torch.Tensor:
        """[..., max_action_dim] normalised -> [..., action_dim] in robot units."""
        if actions.shape[-1] != self.max_action_dim:
            raise ValueError(f"actions: expected last dim {self.max_action_dim}, got {actions.shape[-1]}")
        return _inverse(actions[..., : self.action_dim].float(), self.action_mode, self.action_stats)

    @classmethod
    def from_lerobot_checkpoint(cls, path, max_state_dim: int, max_action_dim: int) -> "Normalizer":
        """Modes and dims from config.json, statistics from the checkpoint (IDENTITY when absent)."""
        cfg = json.loads((Path(path) / "config.json").read_text())
        feats = {**cfg.get("input_features", {}), **cfg.get("output_features", {})}
        mapping = cfg.get("normalization_mapping", {})
        stats = normalization_stats(path, feature_names=list(feats))
        state_key = next((k for k, f in feats.items() if f.get("type") == "STATE"), None)
        action_key = next((k for k, f in feats.items() if f.get("type") == "ACTION"), None)
        if state_key is None or action_key is None:
            raise CheckpointError(f"{path}/config.json: no STATE or ACTION feature declared")

        def mode(kind, key):
            m = mapping.get(kind, "IDENTITY")
            return m if key in stats else "IDENTITY"

        return cls(
            state_dim=int(feats[state_key]["shape"][0]),
            action_dim=int(feats[action_key]["shape"][0]),
            max_state_dim=max_state_dim,
            max_action_dim=max_action_dim,
            state_mode=mode("STATE", state_key),
            action_mode=mode("ACTION", action_key),
            state_stats=stats.get(state_key, {}),
            action_stats=stats.get(action_key, {}),
        )


def _forward(x, mode, s):
    if mode == "MEAN_STD":
        return (x - s["mean"]) / (s["std"] + 1e-8)
    if mode == "MIN_MAX":
        return (x - s["min"]) / (s["max"] - s["min"] + 1e-8) * 2 - 1
    return x


def _inverse(x, mode, s):
    if mode == "MEAN_STD":
        return x * s["std"] + s["mean"]
    if mode == "MIN_MAX":
        return (x + 1) / 2 * (s["max"] - s["min"]) + s["min"]
    return x
