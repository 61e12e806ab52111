"""LeRobot's stored normalisation as plain data, and its formulas in numpy float32.

Two layouts (which one a directory has: physai_ros.engine.checkpoint.format):
- LeRobot >= 0.4 (read against 0.6.1's processor/pipeline.py): `policy_preprocessor.json` and
  `policy_postprocessor.json` are `{"name", "steps": [{"registry_name" | "class", "config",
  "state_file"?}]}`. The preprocessor's `normalizer_processor` step normalises the state; the
  postprocessor's `unnormalizer_processor` step un-normalises the action. Their config holds
  `eps`, `features` ({name: {"type", "shape"}}), `norm_map` ({feature type: mode}) and maybe
  `normalize_observation_keys`; their statistics are in `state_file`
  (`<pipeline>_step_<i>_<registry_name>.safetensors`, keys "<feature>.<stat>", read as float32).
- LeRobot <= 0.3: `normalize_inputs.buffer_<feature with . as _>.<stat>` (state) and
  `unnormalize_outputs.buffer_<...>.<stat>` (action) tensors in model.safetensors, modes from
  config.json's normalization_mapping, eps 1e-8; unset statistics are stored as +inf.

Formulas (LeRobot 0.6.1 normalize_processor.py `_apply_transform`, float32, no clamping):
  MEAN_STD    (x - mean) / (std + eps)               inverse x * std + mean
  MIN_MAX     2 * (x - min) / d - 1                  inverse (x + 1) / 2 * d + min
  QUANTILES   2.0 * (x - q01) / d - 1.0              inverse (x + 1.0) * d / 2.0 + q01
  QUANTILE10  2.0 * (x - q10) / d - 1.0              inverse (x + 1.0) * d / 2.0 + q10
  IDENTITY    x
where d = hi - lo, replaced by eps where hi == lo. The operation order is LeRobot's: float32
rounding then matches its torch results bit for bit.
"""
from __future__ import annotations

import json
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

import numpy as np

from physai_ros.engine.checkpoint.format import (POSTPROCESSOR_FILE, PREPROCESSOR_FILE, CheckpointError,
                                                 read_json)

MEAN_STD, MIN_MAX, QUANTILES, QUANTILE10, IDENTITY = "MEAN_STD", "MIN_MAX", "QUANTILES", "QUANTILE10", "IDENTITY"
MODES = (MEAN_STD, MIN_MAX, QUANTILES, QUANTILE10, IDENTITY)
# The statistics each mode reads (low, high) or (mean, std).
STATS_OF_MODE = {MEAN_STD: ("mean", "std"), MIN_MAX: ("min", "max"), QUANTILES: ("q01", "q99"),
                 QUANTILE10: ("q10", "q90"), IDENTITY: ()}
FEATURE_TYPES = ("STATE", "VISUAL", "ENV", "ACTION", "REWARD", "LANGUAGE")
DEFAULT_EPS = 1e-8

NORMALIZER = "normalizer_processor"
UNNORMALIZER = "unnormalizer_processor"
RENAME = "rename_observations_processor"
RELATIVE = "relative_actions_processor"
ABSOLUTE = "absolute_actions_processor"
# Steps of LeRobot's pi0 / pi0.5 pipelines. The serving path reproduces each (normalisation
# here, the prompt in engine.processor.prompt, batching and devices trivially) or refuses the
# checkpoint (relative actions); any other step would change data in a way nobody reproduces.
KNOWN_STEPS = frozenset({NORMALIZER, UNNORMALIZER, RENAME, RELATIVE, ABSOLUTE, "to_batch_processor",
                         "device_processor", "tokenizer_processor", "pi0_new_line_processor",
                         "pi05_prepare_state_tokenizer_processor_step"})
_CLASS_STEPS = {"NormalizerProcessorStep": NORMALIZER, "UnnormalizerProcessorStep": UNNORMALIZER,
                "RenameObservationsProcessorStep": RENAME}

_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32,
           "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}


# ---- formulas ----------------------------------------------------------------------------

def _denominator(lo: np.ndarray, hi: np.ndarray, eps: float) -> np.ndarray:
    d = hi - lo
    return np.where(d == 0, np.float32(eps), d).astype(np.float32, copy=False)


def normalize(x: np.ndarray, mode: str, stats: Mapping[str, np.ndarray], eps: float = DEFAULT_EPS) -> np.ndarray:
    """LeRobot 0.6.1's NormalizerProcessorStep on one feature, float32."""
    x = np.asarray(x, dtype=np.float32)
    if mode == IDENTITY:
        return x
    a, b = (np.asarray(stats[k], dtype=np.float32) for k in STATS_OF_MODE[mode])
    if mode == MEAN_STD:
        return (x - a) / (b + np.float32(eps))
    d = _denominator(a, b, eps)
    if mode == MIN_MAX:
        return 2 * (x - a) / d - 1
    return np.float32(2.0) * (x - a) / d - np.float32(1.0)


def unnormalize(x: np.ndarray, mode: str, stats: Mapping[str, np.ndarray], eps: float = DEFAULT_EPS) -> np.ndarray:
    """LeRobot 0.6.1's UnnormalizerProcessorStep on one feature, float32."""
    x = np.asarray(x, dtype=np.float32)
    if mode == IDENTITY:
        return x
    a, b = (np.asarray(stats[k], dtype=np.float32) for k in STATS_OF_MODE[mode])
    if mode == MEAN_STD:
        return x * b + a
    d = _denominator(a, b, eps)
    if mode == MIN_MAX:
        return (x + 1) / 2 * d + a
    return (x + np.float32(1.0)) * d / np.float32(2.0) + a


# ---- plain data --------------------------------------------------------------------------

@dataclass(frozen=True)
class FeatureNormalization:
    """One feature's normalisation as a checkpoint stores it, checked (see feature_normalization)."""

    name: str
    type: str
    shape: tuple[int, ...]
    mode: str
    stats: Mapping[str, np.ndarray]  # only the ones `mode` reads, float32 vectors of equal length
    eps: float
    source: str                      # the file the statistics came from, for messages

    @property
    def dim(self) -> int | None:
        """Values the statistics cover (None for IDENTITY)."""
        keys = STATS_OF_MODE[self.mode]
        return int(self.stats[keys[0]].shape[-1]) if keys else None


@dataclass(frozen=True)
class NormalizationStep:
    """A normalizer_processor or unnormalizer_processor step as LeRobot saved it."""

    pipeline: Path                   # the pipeline's JSON file
    index: int
    kind: str                        # NORMALIZER | UNNORMALIZER
    features: Mapping[str, tuple[str, tuple[int, ...]]]  # name -> (type, shape)
    norm_map: Mapping[str, str]      # feature type -> mode
    eps: float
    stats: Mapping[str, Mapping[str, np.ndarray]]
    state_file: Path | None
    observation_keys: frozenset[str] | None = None

    @property
    def where(self) -> str:
        return f"{self.pipeline} step {self.index} ({self.kind})"

    def mode_for(self, name: str) -> str:
        ftype = self.features[name][0]
        # LeRobot: normalize_observation_keys limits which observations are touched, never the action.
        if self.observation_keys is not None and ftype != "ACTION" and name not in self.observation_keys:
            return IDENTITY
        return self.norm_map.get(ftype, IDENTITY)


@dataclass(frozen=True)
class ProcessorPipeline:
    """One pipeline file: its steps' names in order and what serving reads from them."""

    path: Path
    name: str
    steps: tuple[str, ...]
    normalization: NormalizationStep | None
    rename_map: Mapping[str, str] = field(default_factory=dict)
    relative_actions: bool = False   # a relative/absolute actions step is enabled


# ---- reading -----------------------------------------------------------------------------

def read_safetensors(path: Path, select: Callable[[str], bool] | None = None) -> dict[str, np.ndarray]:
    """Tensors of a safetensors file as float32 numpy arrays (LeRobot's processors load their
    state as float32 too); `select` picks names, reading only those bytes."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
            out = {}
            for key, e in header.items():
                if key == "__metadata__" or (select is not None and not select(key)):
                    continue
                a, b = e["data_offsets"]
                f.seek(8 + n + a)
                raw = f.read(b - a)
                if len(raw) != b - a:
                    raise CheckpointError(f"{path}: truncated data for tensor {key!r}")
                if e["dtype"] == "BF16":  # numpy has no bfloat16: its bits are float32's top half
                    arr = (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)
                elif e["dtype"] in _DTYPES:
                    arr = np.frombuffer(raw, _DTYPES[e["dtype"]])
                else:
                    raise CheckpointError(f"{path}: tensor {key!r} has unsupported dtype {e['dtype']}")
                out[key] = arr.astype(np.float32).reshape(e["shape"])
            return out
    except CheckpointError:
        raise
    except OSError as e:
        raise CheckpointError(f"{path}: cannot be read ({e.strerror or e})") from None
    except (struct.error, ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"{path}: not a readable safetensors file ({e})") from None


def _step_name(entry: dict) -> str:
    if "registry_name" in entry:
        return str(entry["registry_name"])
    cls = str(entry.get("class", ""))
    return _CLASS_STEPS.get(cls.rpartition(".")[2], cls)


def parse_features(raw, where: str) -> dict[str, tuple[str, tuple[int, ...]]]:
    if not isinstance(raw, dict):
        raise CheckpointError(f"{where}: config 'features' is not an object")
    out = {}
    for name, spec in raw.items():
        ftype = spec.get("type") if isinstance(spec, dict) else None
        if ftype not in FEATURE_TYPES:
            raise CheckpointError(f"{where}: features.{name}.type is {ftype!r}, expected one of {FEATURE_TYPES}")
        out[name] = (ftype, tuple(int(s) for s in spec.get("shape", ())))
    return out


def _normalization_step(entry: dict, index: int, kind: str, pipeline: Path) -> NormalizationStep:
    where = f"{pipeline} step {index} ({kind})"
    cfg = entry.get("config", {})
    features = parse_features(cfg.get("features", {}), where)
    norm_map = cfg.get("norm_map", {})
    for ftype, mode in norm_map.items():
        if mode not in MODES:
            raise CheckpointError(f"{where}: norm_map.{ftype} is {mode!r}, expected one of {MODES}")
    stats: dict[str, dict[str, np.ndarray]] = {}
    state_file = None
    if entry.get("state_file"):
        state_file = pipeline.parent / str(entry["state_file"])
        if not state_file.is_file():
            raise CheckpointError(f"{where}: its state file {state_file.name} (the normalisation statistics) "
                                  f"is missing from {pipeline.parent}")
        for key, arr in read_safetensors(state_file).items():
            feat, _, stat = key.rpartition(".")
            stats.setdefault(feat, {})[stat] = arr
    keys = cfg.get("normalize_observation_keys")
    return NormalizationStep(pipeline, index, kind, features, dict(norm_map), float(cfg.get("eps", DEFAULT_EPS)),
                             stats, state_file, frozenset(keys) if keys is not None else None)


def read_pipeline(path: str | Path, normalization_kind: str) -> ProcessorPipeline:
    """One pipeline JSON; `normalization_kind` is the step serving reads from it (NORMALIZER in
    the preprocessor, UNNORMALIZER in the postprocessor)."""
    path = Path(path)
    doc = read_json(path)
    steps = doc.get("steps")
    if not isinstance(steps, list):
        raise CheckpointError(f"{path}: no 'steps' list (not a LeRobot processor pipeline)")
    names, found, rename, relative = [], None, {}, False
    for i, entry in enumerate(steps):
        name = _step_name(entry) if isinstance(entry, dict) else ""
        if name not in KNOWN_STEPS:
            raise CheckpointError(f"{path}: step {i} {name!r} is not one this server reproduces "
                                  f"(known: {', '.join(sorted(KNOWN_STEPS))})")
        names.append(name)
        cfg = entry.get("config", {})
        if name in (RELATIVE, ABSOLUTE) and cfg.get("enabled"):
            relative = True
        elif name == RENAME:
            rename = dict(cfg.get("rename_map", {}))
        elif name == normalization_kind:
            if found is not None:
                raise CheckpointError(f"{path}: two {name} steps ({found.index} and {i}); expected one")
            found = _normalization_step(entry, i, name, path)
    return ProcessorPipeline(path, str(doc.get("name", path.stem)), tuple(names), found, rename, relative)


def read_processors(directory: str | Path) -> tuple[ProcessorPipeline, ProcessorPipeline]:
    """(preprocessor, postprocessor) of a LeRobot >= 0.4 policy directory."""
    directory = Path(directory)
    return (read_pipeline(directory / PREPROCESSOR_FILE, NORMALIZER),
            read_pipeline(directory / POSTPROCESSOR_FILE, UNNORMALIZER))


_BUFFER_STAT = re.compile(r"^(?:model\.)?(normalize_inputs|normalize_targets|unnormalize_outputs)"
                          r"\.buffer_(.+)\.(mean|std|min|max)$")


def read_buffer_stats(weight_files: list[Path], feature_names: list[str]) -> dict[str, dict[str, dict[str, np.ndarray]]]:
    """LeRobot <= 0.3 statistics: {module: {feature: {stat: array}}} with module one of
    normalize_inputs / normalize_targets / unnormalize_outputs. Buffer names (dots as
    underscores) are resolved back through config.json's feature names."""
    by_buffer = {f.replace(".", "_"): f for f in feature_names}
    out: dict[str, dict[str, dict[str, np.ndarray]]] = {}
    for path in weight_files:
        for key, arr in read_safetensors(path, select=lambda k: bool(_BUFFER_STAT.match(k))).items():
            module, buf, stat = _BUFFER_STAT.match(key).groups()
            out.setdefault(module, {}).setdefault(by_buffer.get(buf, buf), {})[stat] = arr
    return out


# ---- checks ------------------------------------------------------------------------------

def feature_normalization(name: str, ftype: str, shape: tuple[int, ...], mode: str,
                          stats: Mapping[str, np.ndarray] | None, eps: float, source: str) -> FeatureNormalization:
    """Checked per-feature data; CheckpointError naming `source` and the feature when a
    statistic the mode reads is missing or unset (+inf, LeRobot 0.3's placeholder), the pair
    differs in length, or they cover fewer values than the feature's declared shape."""
    what = f"{source}: feature {name!r} ({ftype}, {mode})"
    if mode not in MODES:
        raise CheckpointError(f"{what}: unknown normalisation mode, expected one of {MODES}")
    need = STATS_OF_MODE[mode]
    stats = stats or {}
    missing = [k for k in need if k not in stats]
    if missing:
        have = f" (it has {', '.join(sorted(stats))})" if stats else ""
        raise CheckpointError(f"{what}: statistics {', '.join(missing)} missing{have}")
    picked = {k: np.asarray(stats[k], dtype=np.float32) for k in need}
    for k, v in picked.items():
        if not np.isfinite(v).all():
            raise CheckpointError(f"{what}: statistic {k} is not set (non-finite values; LeRobot stores "
                                  "+inf for statistics it never received)")
    if need:
        a, b = (picked[k] for k in need)
        if a.shape != b.shape:
            raise CheckpointError(f"{what}: {need[0]} has shape {list(a.shape)} but {need[1]} {list(b.shape)}")
        if ftype in ("STATE", "ACTION") and a.ndim != 1:
            raise CheckpointError(f"{what}: statistics of shape {list(a.shape)}, expected a vector")
        # Vectors only: image statistics are per channel ((3, 1, 1)), broadcast over the pixels.
        # Either way LeRobot's own normaliser fails to broadcast them at the first observation.
        if len(shape) == 1 and a.ndim == 1 and a.shape[0] != shape[0]:
            raise CheckpointError(f"{what}: statistics cover {a.shape[0]} values but the feature declares "
                                  f"{shape[0]} (shape {list(shape)})")
    return FeatureNormalization(name, ftype, tuple(shape), mode, picked, float(eps), source)


def step_features(step: NormalizationStep) -> dict[str, FeatureNormalization]:
    """Every feature of a normalisation step, checked (each non-IDENTITY one needs its stats)."""
    src = str(step.state_file) if step.state_file is not None else f"{step.where} (no state_file)"
    return {name: feature_normalization(name, ftype, shape, step.mode_for(name), step.stats.get(name),
                                        step.eps, src)
            for name, (ftype, shape) in step.features.items()}


def pick_feature(features: Mapping[str, tuple[str, tuple[int, ...]]], ftype: str, preferred: str, where: str) -> str:
    """The feature serving feeds as `ftype` (LeRobot's pi0 reads observation.state / action)."""
    if preferred in features and features[preferred][0] == ftype:
        return preferred
    names = [n for n, (t, _) in features.items() if t == ftype]
    if len(names) != 1:
        raise CheckpointError(f"{where}: expected the {ftype} feature {preferred!r}, found "
                              + (f"several: {', '.join(names)}" if names else "none"))
    return names[0]
