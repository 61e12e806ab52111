"""Robot state -> model state and model actions -> robot actions, with a checkpoint's statistics.

The one normaliser of the package (the chunked and streaming paths reach it through the action
runner; closed-loop training evaluation uses it too). LeRobot's formulas per feature:
  MEAN_STD: (x - mean) / (std + 1e-8), inverse x * std + mean (our own statistics file:
            x * (std + 1e-8) + mean, the exact inverse of how training/train.py normalised)
  MIN_MAX:  2 (x - min) / (max - min + 1e-8) - 1, inverse (x + 1) / 2 (max - min) + min
  IDENTITY: unchanged (also whatever a checkpoint carries no statistics for).
Statistics come from our own `normalization_stats.json` (what training/checkpoint.py writes)
or, for a LeRobot checkpoint, from its stored normaliser buffers with the modes its config.json
names.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# Written beside our checkpoints by physai_ros.training.checkpoint.
STATS_FILE = "normalization_stats.json"
MODES = ("IDENTITY", "MEAN_STD", "MIN_MAX")
EPS = 1e-8


@dataclass(frozen=True)
class FeatureStats:
    """One feature's statistics: mean/std for MEAN_STD, min/max for MIN_MAX."""

    mode: str
    mean: np.ndarray | None = None
    std: np.ndarray | None = None
    min: np.ndarray | None = None
    max: np.ndarray | None = None
    # MEAN_STD inverse as x * (std + EPS) + mean: our checkpoints were trained on targets
    # normalised with (std + EPS), so this undoes them exactly (LeRobot's inverse omits EPS).
    inverse_adds_eps: bool = False

    def __post_init__(self):
        need = {"MEAN_STD": ("mean", "std"), "MIN_MAX": ("min", "max")}.get(self.mode)
        if need is None:
            raise ValueError(f"normalisation mode {self.mode!r}: expected MEAN_STD or MIN_MAX")
        arrays = [getattr(self, k) for k in need]
        if any(a is None for a in arrays):
            raise ValueError(f"normalisation {self.mode} needs statistics {list(need)}")
        if arrays[0].shape != arrays[1].shape or arrays[0].ndim != 1:
            raise ValueError(f"normalisation {self.mode}: {need[0]} and {need[1]} must be equal-length vectors")

    def forward(self, x: np.ndarray) -> np.ndarray:
        n = x.shape[-1]
        if self.mode == "MEAN_STD":
            return (x - self.mean[:n]) / (self.std[:n] + EPS)
        return (x - self.min[:n]) / (self.max[:n] - self.min[:n] + EPS) * 2 - 1

    def inverse(self, x: np.ndarray) -> np.ndarray:
        n = x.shape[-1]
        if self.mode == "MEAN_STD":
            std = self.std[:n] + EPS if self.inverse_adds_eps else self.std[:n]
            return x * std + self.mean[:n]
        return (x + 1) / 2 * (self.max[:n] - self.min[:n]) + self.min[:n]


def _vector(values) -> np.ndarray:
    return np.asarray(values, dtype=np.float32).reshape(-1)


class Normalizer:
    """State/action (un)normalisation; identity for a feature without statistics."""

    def __init__(self, state: FeatureStats | None = None, action: FeatureStats | None = None):
        self.state = state
        self.action = action

    @classmethod
    def from_file(cls, path: str | Path | None) -> "Normalizer":
        """Reads `{"state": {"mean": [...], "std": [...]}, "action": {...}}` if the file exists."""
        if path is None or not Path(path).is_file():
            return cls()
        doc = json.loads(Path(path).read_text())

        def stats(key: str) -> FeatureStats | None:
            d = doc.get(key)
            if d is None:
                return None
            try:
                return FeatureStats("MEAN_STD", _vector(d["mean"]), _vector(d["std"]), inverse_adds_eps=True)
            except (KeyError, ValueError) as e:
                raise ValueError(f"{path}: {key}: {e}") from None

        return cls(stats("state"), stats("action"))

    @classmethod
    def from_lerobot_checkpoint(cls, path: str | Path) -> "Normalizer":
        """Modes from config.json's normalization_mapping, statistics stored with the weights."""
        from physai_ros.engine.weights import CheckpointError, normalization_stats

        cfg = json.loads((Path(path) / "config.json").read_text())
        feats = {**cfg.get("input_features", {}), **cfg.get("output_features", {})}
        mapping = cfg.get("normalization_mapping", {})
        stats = normalization_stats(path, feature_names=list(feats))

        def feature(kind: str) -> FeatureStats | None:
            key = next((k for k, f in feats.items() if f.get("type") == kind), None)
            mode, s = mapping.get(kind, "IDENTITY"), stats.get(key, {}) if key else {}
            if mode == "IDENTITY" or not s:
                return None
            if mode not in MODES:
                raise CheckpointError(f"{path}/config.json: {kind} normalisation {mode!r} is not one of {MODES}")
            return FeatureStats(mode, **{k: _vector(v.numpy()) for k, v in s.items()})

        return cls(feature("STATE"), feature("ACTION"))

    @classmethod
    def from_checkpoint(cls, path: str | Path) -> "Normalizer":
        """Ours (normalization_stats.json) when present, else the LeRobot checkpoint's own."""
        path = Path(path)
        if (path / STATS_FILE).is_file():
            return cls.from_file(path / STATS_FILE)
        if (path / "config.json").is_file():
            return cls.from_lerobot_checkpoint(path)
        return cls()

    def normalize_state(self, state: np.ndarray, pad_to: int) -> np.ndarray:
        """Normalise then zero-pad to the model's state width."""
        if state.shape[0] > pad_to:
            raise ValueError(f"state has {state.shape[0]} values, model takes at most {pad_to}")
        out = np.zeros(pad_to, dtype=np.float32)
        s = state.astype(np.float32, copy=False)
        if self.state is not None:
            s = self.state.forward(s)
        out[: s.shape[0]] = s
        return out

    def unnormalize_actions(self, actions: np.ndarray, action_dim: int) -> np.ndarray:
        """[T, max_action_dim] normalised -> [T, action_dim] in robot units."""
        a = np.ascontiguousarray(actions[:, :action_dim], dtype=np.float32)
        if self.action is not None:
            a = self.action.inverse(a)
        return a
