"""Robot state -> model state and model actions -> robot actions, with a checkpoint's statistics.

The one normaliser of the package (the chunked and streaming paths reach it through the action
runner; closed-loop training evaluation uses it too). Where the statistics come from is decided
by the checkpoint's files (physai_ros.engine.checkpoint.format):
  ours (normalization_stats.json, what training/checkpoint.py writes): MEAN_STD, inverse
      x * (std + 1e-8) + mean, the exact inverse of how training/train.py normalised;
  LeRobot >= 0.4: the preprocessor's normalizer step (state) and the postprocessor's
      unnormalizer step (action), every mode of 0.6.1 (engine.processor.lerobot_steps);
  LeRobot <= 0.3: the normalize_inputs / unnormalize_outputs buffers in model.safetensors with
      config.json's modes; 0.3's MIN_MAX differs from 0.4's: (x - min) / (max - min + 1e-8) * 2 - 1.
A LeRobot checkpoint whose statistics for the state, the action or any other feature it
normalises are missing, unset or shorter than the feature is refused at load (CheckpointError
naming the file and the feature): running such a policy un-normalised only looks like working.
Identity remains for IDENTITY features, for a feature our own statistics file leaves out, and for
a preset model (no checkpoint).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from physai_ros.engine.checkpoint.format import (CONFIG_FILE, LEROBOT_03, LEROBOT_04, OWN_STATS_FILE, PHYSAI,
                                                 CheckpointError, CheckpointFormat, detect_format, read_json,
                                                 weight_files)
from physai_ros.engine.processor import lerobot_steps as lp

STATS_FILE = OWN_STATS_FILE
MODES = tuple(m for m in lp.MODES if m != lp.IDENTITY)  # what a FeatureStats can hold
EPS = lp.DEFAULT_EPS
STATE_FEATURE, ACTION_FEATURE = "observation.state", "action"


@dataclass(frozen=True)
class FeatureStats:
    """One feature's statistics and the formulas to apply them with (IDENTITY is no FeatureStats).

    rules: which LeRobot's formulas (they differ in MIN_MAX only); inverse_adds_eps: our own
    MEAN_STD inverse. name/source: the feature and the file, for error messages."""

    mode: str
    mean: np.ndarray | None = None
    std: np.ndarray | None = None
    min: np.ndarray | None = None
    max: np.ndarray | None = None
    # MEAN_STD inverse as x * (std + EPS) + mean: our checkpoints were trained on targets
    # normalised with (std + EPS), so this undoes them exactly (LeRobot's inverse omits EPS).
    inverse_adds_eps: bool = False
    q01: np.ndarray | None = None
    q99: np.ndarray | None = None
    q10: np.ndarray | None = None
    q90: np.ndarray | None = None
    eps: float = EPS
    rules: str = LEROBOT_03
    name: str = ""
    source: str = ""

    def __post_init__(self):
        need = lp.STATS_OF_MODE.get(self.mode) if self.mode in MODES else None
        if need is None:
            raise ValueError(f"normalisation mode {self.mode!r}: expected one of {', '.join(MODES)}")
        if self.rules not in (LEROBOT_03, LEROBOT_04):
            raise ValueError(f"normalisation rules {self.rules!r}: expected {LEROBOT_03!r} or {LEROBOT_04!r}")
        arrays = [getattr(self, k) for k in need]
        if any(a is None for a in arrays):
            raise ValueError(f"normalisation {self.mode} needs statistics {list(need)}")
        if arrays[0].shape != arrays[1].shape or arrays[0].ndim != 1:
            raise ValueError(f"normalisation {self.mode}: {need[0]} and {need[1]} must be equal-length vectors")

    @classmethod
    def from_lerobot(cls, f: lp.FeatureNormalization, rules: str) -> "FeatureStats | None":
        if f.mode == lp.IDENTITY:
            return None
        return cls(f.mode, **{k: _vector(v) for k, v in f.stats.items()}, eps=f.eps, rules=rules,
                   name=f.name, source=f.source)

    @property
    def stats(self) -> dict[str, np.ndarray]:
        return {k: getattr(self, k) for k in lp.STATS_OF_MODE[self.mode]}

    @property
    def dim(self) -> int:
        return int(next(iter(self.stats.values())).shape[0])

    def _sliced(self, n: int) -> dict[str, np.ndarray]:
        # A robot may use the first n values of a wider feature; more than the statistics cover
        # would go through un-normalised.
        if n > self.dim:
            what = f"{self.name or 'feature'}" + (f" (statistics from {self.source})" if self.source else "")
            raise ValueError(f"{what}: {n} values, but the statistics cover {self.dim}")
        return {k: v[:n] for k, v in self.stats.items()}

    def forward(self, x: np.ndarray) -> np.ndarray:
        s = self._sliced(x.shape[-1])
        if self.mode == lp.MIN_MAX and self.rules == LEROBOT_03:
            return (x - s["min"]) / (s["max"] - s["min"] + np.float32(self.eps)) * 2 - 1
        return lp.normalize(x, self.mode, s, self.eps)

    def inverse(self, x: np.ndarray) -> np.ndarray:
        s = self._sliced(x.shape[-1])
        if self.mode == lp.MEAN_STD and self.inverse_adds_eps:
            return x * (s["std"] + np.float32(self.eps)) + s["mean"]
        if self.mode == lp.MIN_MAX and self.rules == LEROBOT_03:
            return (x + 1) / 2 * (s["max"] - s["min"]) + s["min"]
        return lp.unnormalize(x, self.mode, s, self.eps)

    def describe(self) -> str:
        return f"{self.mode} over {self.dim} values" + (f" ({self.name})" if self.name else "")


def _vector(values) -> np.ndarray:
    return np.asarray(values, dtype=np.float32).reshape(-1)


def _refuse_visual(f: lp.FeatureNormalization) -> None:
    if f.type == "VISUAL" and f.mode != lp.IDENTITY:
        raise CheckpointError(f"{f.source}: feature {f.name!r} is VISUAL with {f.mode}: this server feeds "
                              "images as LeRobot's pi0 does (scaled to [-1, 1], no dataset statistics), so a "
                              "checkpoint that normalises its images is not supported")


class Normalizer:
    """State/action (un)normalisation; a feature without FeatureStats passes unchanged."""

    def __init__(self, state: FeatureStats | None = None, action: FeatureStats | None = None,
                 source: str = "none (identity)"):
        self.state = state
        self.action = action
        self.source = source

    @classmethod
    def from_file(cls, path: str | Path | None) -> "Normalizer":
        """Our statistics file, `{"state": {"mean": [...], "std": [...]}, "action": {...}}`;
        identity when path is None (a preset model). A missing file is an error."""
        if path is None:
            return cls()
        path = Path(path)
        if not path.is_file():
            raise CheckpointError(f"{path}: statistics file does not exist")
        doc = read_json(path)

        def stats(key: str, name: str) -> FeatureStats | None:
            d = doc.get(key)
            if d is None:
                return None  # ours: training left this feature un-normalised
            try:
                return FeatureStats("MEAN_STD", _vector(d["mean"]), _vector(d["std"]), inverse_adds_eps=True,
                                    name=name, source=str(path))
            except (KeyError, ValueError, TypeError) as e:
                raise CheckpointError(f"{path}: {key}: {e}") from None

        return cls(stats("state", STATE_FEATURE), stats("action", ACTION_FEATURE), source=str(path))

    @classmethod
    def from_lerobot_processors(cls, path: str | Path) -> "Normalizer":
        """LeRobot >= 0.4: the preprocessor's normalizer step (state), the postprocessor's
        unnormalizer step (action); every feature either step normalises must have statistics."""
        pre, post = lp.read_processors(path)
        for p in (pre, post):
            if p.relative_actions:
                raise CheckpointError(f"{p.path}: relative actions are enabled (the policy predicts actions "
                                      "relative to the state); this server does not apply that conversion")
        if pre.normalization is None:
            raise CheckpointError(f"{pre.path}: no {lp.NORMALIZER} step, so no statistics for the state")
        if post.normalization is None:
            raise CheckpointError(f"{post.path}: no {lp.UNNORMALIZER} step, so no statistics for the action")
        feats = {}
        for step in (pre.normalization, post.normalization):
            checked = lp.step_features(step)
            for f in checked.values():
                _refuse_visual(f)
            feats[step.kind] = checked
        state = lp.pick_feature(pre.normalization.features, "STATE", STATE_FEATURE, pre.normalization.where)
        action = lp.pick_feature(post.normalization.features, "ACTION", ACTION_FEATURE, post.normalization.where)
        return cls(FeatureStats.from_lerobot(feats[lp.NORMALIZER][state], LEROBOT_04),
                   FeatureStats.from_lerobot(feats[lp.UNNORMALIZER][action], LEROBOT_04),
                   source=f"{pre.path.name} + {post.path.name} in {Path(path)}")

    @classmethod
    def from_lerobot_buffers(cls, path: str | Path) -> "Normalizer":
        """LeRobot <= 0.3: modes from config.json, statistics from the normalize_inputs (state)
        and unnormalize_outputs (action) buffers stored with the weights."""
        path = Path(path)
        cfg_path = path / CONFIG_FILE
        cfg = read_json(cfg_path)
        inputs = lp.parse_features(cfg.get("input_features", {}), f"{cfg_path} input_features")
        outputs = lp.parse_features(cfg.get("output_features", {}), f"{cfg_path} output_features")
        mapping = cfg.get("normalization_mapping", {})
        files = weight_files(path)
        buffers = lp.read_buffer_stats(files, list(inputs) + list(outputs))
        source = str(files[0]) if len(files) == 1 else f"{path} (weight shards)"
        checked = {}
        for module, feats in (("normalize_inputs", inputs), ("unnormalize_outputs", outputs)):
            for name, (ftype, shape) in feats.items():
                f = lp.feature_normalization(name, ftype, shape, mapping.get(ftype, lp.IDENTITY),
                                             buffers.get(module, {}).get(name), EPS, f"{source} {module}")
                _refuse_visual(f)
                checked[name] = f
        state = lp.pick_feature(inputs, "STATE", STATE_FEATURE, f"{cfg_path} input_features")
        action = lp.pick_feature(outputs, "ACTION", ACTION_FEATURE, f"{cfg_path} output_features")
        return cls(FeatureStats.from_lerobot(checked[state], LEROBOT_03),
                   FeatureStats.from_lerobot(checked[action], LEROBOT_03), source=source)

    @classmethod
    def from_lerobot_checkpoint(cls, path: str | Path, fmt: CheckpointFormat | None = None) -> "Normalizer":
        """The LeRobot checkpoint's own statistics, from where its family keeps them."""
        fmt = fmt or detect_format(path)
        if fmt.family == LEROBOT_04:
            return cls.from_lerobot_processors(path)
        if fmt.family == LEROBOT_03:
            return cls.from_lerobot_buffers(path)
        raise CheckpointError(f"{path}: a {PHYSAI} checkpoint keeps its statistics in {STATS_FILE}")

    @classmethod
    def from_checkpoint(cls, path: str | Path) -> "Normalizer":
        """Ours (normalization_stats.json) when present, else the LeRobot checkpoint's own."""
        path = Path(path)
        if (path / STATS_FILE).is_file():
            return cls.from_file(path / STATS_FILE)
        return cls.from_lerobot_checkpoint(path)

    def describe(self) -> dict[str, str]:
        """Key/values for logs and /diagnostics."""
        return {"normalisation": self.source,
                "state": self.state.describe() if self.state else "identity",
                "action": self.action.describe() if self.action else "identity"}

    def normalized_state(self, state: np.ndarray) -> np.ndarray:
        """The normalised state, unpadded (pi0.5 writes it into the prompt)."""
        s = np.asarray(state, dtype=np.float32).reshape(-1)
        return self.state.forward(s) if self.state is not None else s.copy()

    def normalize_state(self, state: np.ndarray, pad_to: int) -> np.ndarray:
        """Normalise then zero-pad to the model's state width."""
        if state.shape[0] > pad_to:
            raise ValueError(f"state has {state.shape[0]} values, model takes at most {pad_to}")
        out = np.zeros(pad_to, dtype=np.float32)
        s = self.normalized_state(state)
        out[: s.shape[0]] = s
        return out

    def unnormalize_actions(self, actions: np.ndarray, action_dim: int) -> np.ndarray:
        """[T, max_action_dim] normalised -> [T, action_dim] in robot units."""
        a = np.ascontiguousarray(actions[:, :action_dim], dtype=np.float32)
        if self.action is not None:
            a = self.action.inverse(a)
        return a
