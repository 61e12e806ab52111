"""Small synthetic LeRobot policy directories, laid out as the real versions write them.

LeRobot >= 0.4 (0.6.1 processor/pipeline.py `get_config` + `_save_pretrained`, the step lists of
policies/pi0/processor_pi0.py and pi05/processor_pi05.py): `policy_preprocessor.json` /
`policy_postprocessor.json` with `{"name", "steps": [{"registry_name", "config", "state_file"?}]}`,
one `<pipeline>_step_<index>_<registry_name>.safetensors` per stateful step holding the dataset
statistics as "<feature>.<stat>" (all of them: images and counts too). LeRobot 0.3.x: statistics
as `normalize_inputs.buffer_*` / `unnormalize_outputs.buffer_*` tensors in model.safetensors.
The weights here are a single dummy tensor: format detection and normalisation read headers and
statistics only.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

STATE, ACTION = "observation.state", "action"
CAMERA = "observation.images.base_0_rgb"
WRIST_CAMERA = "observation.images.left_wrist_0_rgb"  # two cameras, as the demo fleet's robot_0 has
# A 0.3.2 PI0Config has these (and not 0.6.1's); and the reverse.
CONFIG_03 = {"num_steps": 10, "proj_width": 1024, "resize_imgs_with_padding": [224, 224]}
CONFIG_04 = {"num_inference_steps": 10, "paligemma_variant": "gemma_2b", "action_expert_variant": "gemma_300m",
             "image_resolution": [224, 224], "min_period": 0.004, "max_period": 4.0}


def f32(values) -> np.ndarray:
    return np.asarray(values, dtype=np.float32)


def dataset_stats(state_dim: int = 3, action_dim: int = 2, seed: int = 0) -> dict:
    """Every statistic LeRobot's compute_stats writes, per feature (images as (3, 1, 1))."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, dim in ((STATE, state_dim), (ACTION, action_dim)):
        lo, hi = f32(rng.uniform(-2, 0, dim)), f32(rng.uniform(0.5, 3, dim))
        q = np.sort(rng.uniform(lo, hi, (5, dim)), axis=0).astype(np.float32)
        out[name] = {"mean": f32((lo + hi) / 2), "std": f32(rng.uniform(0.1, 2, dim)), "min": lo, "max": hi,
                     "q01": q[0], "q10": q[1], "q50": q[2], "q90": q[3], "q99": q[4],
                     "count": np.array([1000], np.int64)}
    for cam in (CAMERA, WRIST_CAMERA):
        out[cam] = {"mean": f32(np.full((3, 1, 1), 0.5)), "std": f32(np.full((3, 1, 1), 0.25)),
                    "min": f32(np.zeros((3, 1, 1))), "max": f32(np.ones((3, 1, 1)))}
    return out


def features(state_dim: int = 3, action_dim: int = 2) -> tuple[dict, dict]:
    inputs = {CAMERA: {"type": "VISUAL", "shape": [3, 224, 224]}, WRIST_CAMERA: {"type": "VISUAL", "shape": [3, 224, 224]},
              STATE: {"type": "STATE", "shape": [state_dim]}}
    return inputs, {ACTION: {"type": "ACTION", "shape": [action_dim]}}


def write_weights(d: Path, extra: dict | None = None) -> None:
    save_file({"model.action_out_proj.bias": f32(np.zeros(4)), **(extra or {})}, str(d / "model.safetensors"))


def write_config(d: Path, policy: str, keys: dict, mapping: dict, state_dim: int, action_dim: int) -> None:
    inputs, outputs = features(state_dim, action_dim)
    (d / "config.json").write_text(json.dumps({
        "type": policy, "n_obs_steps": 1, "input_features": inputs, "output_features": outputs,
        "normalization_mapping": mapping, "chunk_size": 10, "max_state_dim": 8, "max_action_dim": 8, **keys}))


def _flat(stats: dict) -> dict:
    return {f"{feat}.{k}": np.asarray(v) for feat, s in stats.items() for k, v in s.items()}


def _pipeline(d: Path, name: str, steps: list, stats: dict | None) -> None:
    entries = []
    for i, (registry, config) in enumerate(steps):
        entry = {"registry_name": registry, "config": config}
        if registry in ("normalizer_processor", "unnormalizer_processor") and stats:
            entry["state_file"] = f"{name}_step_{i}_{registry}.safetensors"
            save_file(_flat(stats), str(d / entry["state_file"]))
        entries.append(entry)
    (d / f"{name}.json").write_text(json.dumps({"name": name, "steps": entries}, indent=2))


def write_v04(d: Path, policy: str = "pi0", norm_map: dict | None = None, stats: dict | None = None,
              state_dim: int = 3, action_dim: int = 2, eps: float = 1e-8, rename_map: dict | None = None,
              relative: bool = False, config_keys: dict | None = None, observation_keys: list | None = None,
              decl_state_dim: int | None = None) -> Path:
    """A LeRobot >= 0.4 policy directory; stats=None writes dataset_stats(), {} writes none."""
    d.mkdir(parents=True, exist_ok=True)
    norm_map = norm_map or ({"VISUAL": "IDENTITY", "STATE": "QUANTILES", "ACTION": "QUANTILES"} if policy == "pi05"
                            else {"VISUAL": "IDENTITY", "STATE": "MEAN_STD", "ACTION": "MEAN_STD"})
    stats = dataset_stats(state_dim, action_dim) if stats is None else stats
    write_weights(d)
    write_config(d, policy, CONFIG_04 if config_keys is None else config_keys, norm_map,
                 decl_state_dim or state_dim, action_dim)
    inputs, outputs = features(decl_state_dim or state_dim, action_dim)
    norm_cfg = {"eps": eps, "features": {**inputs, **outputs}, "norm_map": norm_map}
    if observation_keys is not None:
        norm_cfg["normalize_observation_keys"] = sorted(observation_keys)
    unnorm_cfg = {"eps": eps, "features": outputs, "norm_map": norm_map}
    rel = ("relative_actions_processor", {"enabled": relative, "exclude_joints": [], "action_names": None})
    tok = ("tokenizer_processor", {"tokenizer_name": "google/paligemma-3b-pt-224", "max_length": 48,
                                   "task_key": "task", "padding_side": "right", "padding": "max_length"})
    head = [("rename_observations_processor", {"rename_map": rename_map or {}}), ("to_batch_processor", {})]
    device = ("device_processor", {"device": "cpu", "float_dtype": None})
    if policy == "pi05":
        pre = head + [rel, ("normalizer_processor", norm_cfg),
                      ("pi05_prepare_state_tokenizer_processor_step", {}), tok, device]
    else:
        pre = head + [("pi0_new_line_processor", {}), tok, device, rel, ("normalizer_processor", norm_cfg)]
    post = [("unnormalizer_processor", unnorm_cfg), ("absolute_actions_processor", {"enabled": relative}),
            ("device_processor", {"device": "cpu", "float_dtype": None})]
    _pipeline(d, "policy_preprocessor", pre, stats)
    _pipeline(d, "policy_postprocessor", post, stats)
    return d


def write_v03(d: Path, mapping: dict | None = None, buffers: dict | None = None, state_dim: int = 3,
              action_dim: int = 2, config_keys: dict | None = None) -> Path:
    """A LeRobot 0.3.x policy directory; buffers=None stores MEAN_STD statistics for state and action."""
    d.mkdir(parents=True, exist_ok=True)
    mapping = mapping or {"VISUAL": "IDENTITY", "STATE": "MEAN_STD", "ACTION": "MEAN_STD"}
    if buffers is None:
        s = dataset_stats(state_dim, action_dim)
        buffers = {f"normalize_inputs.buffer_observation_state.{k}": s[STATE][k] for k in ("mean", "std")}
        for mod in ("normalize_targets", "unnormalize_outputs"):
            buffers.update({f"{mod}.buffer_action.{k}": s[ACTION][k] for k in ("mean", "std")})
    write_weights(d, buffers)
    write_config(d, "pi0", CONFIG_03 if config_keys is None else config_keys, mapping, state_dim, action_dim)
    return d
