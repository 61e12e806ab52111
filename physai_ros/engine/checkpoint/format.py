"""Which LeRobot wrote a policy directory, decided from its files alone.

LeRobot changed two things at 0.4 that a loader must know, and neither is visible in the weights:
- where the normalisation statistics live: 0.3.x keeps them as `normalize_inputs.buffer_*` /
  `unnormalize_outputs.buffer_*` tensors inside model.safetensors; >= 0.4 moves them into
  processor pipelines (policy_preprocessor.json / policy_postprocessor.json plus one
  safetensors state file per normaliser step) and strips them from the weights;
- the sampler's float32 arithmetic: 0.3.x accumulates the Euler time (t += dt) and divides in
  RoPE (pos / timescale); >= 0.4 forms t = 1 + step * dt and multiplies by inverse frequencies
  (docs/lerobot_reference.md item 3). The engine follows either (Pi0Config.time_schedule and
  rope_style), so the checkpoint's family picks them.

Our own trained checkpoints (physai_lab.training.checkpoint) carry normalization_stats.json and
no LeRobot normalisation files; the engine trained them with its defaults (accumulate, divide).

Every fact used is recorded in CheckpointFormat.evidence, and facts that point at different
families are an error naming both, never a majority vote. Torch-free (header reads only), so the
launcher's preflight can call it.
"""
from __future__ import annotations

import json
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from physai_ros.errors import UserInputError


class CheckpointError(ValueError, UserInputError):
    """A checkpoint that does not fit pi0; the message names the offending key or file."""


POLICY_TYPES = ("pi0", "pi05")
LEROBOT_03 = "lerobot<=0.3"
LEROBOT_04 = "lerobot>=0.4"
PHYSAI = "physai"
FAMILIES = (LEROBOT_03, LEROBOT_04, PHYSAI)
# (time_schedule, rope_style) each family's own code runs with.
VARIANTS = {LEROBOT_03: ("accumulate", "divide"), LEROBOT_04: ("multiply", "multiply"),
            PHYSAI: ("accumulate", "divide")}
VARIANT_FIELDS = ("time_schedule", "rope_style")

CONFIG_FILE = "config.json"
PREPROCESSOR_FILE = "policy_preprocessor.json"
POSTPROCESSOR_FILE = "policy_postprocessor.json"
# Written beside our checkpoints by physai_lab.training.checkpoint (read by engine.processor.normalizer).
OWN_STATS_FILE = "normalization_stats.json"
WEIGHTS_FILE = "model.safetensors"
WEIGHTS_INDEX = "model.safetensors.index.json"

# PI0Config fields that exist in one family only (lerobot 0.3.2 vs 0.6.1 configuration_pi0.py;
# fields of the common PreTrainedConfig base are left out: both have them).
CONFIG_KEYS_03 = frozenset({
    "num_steps", "proj_width", "resize_imgs_with_padding", "adapt_to_pi_aloha",
    "use_delta_joint_actions_aloha", "attention_implementation", "train_state_proj", "use_cache"})
CONFIG_KEYS_04 = frozenset({
    "num_inference_steps", "paligemma_variant", "action_expert_variant", "image_resolution",
    "time_sampling_beta_alpha", "time_sampling_beta_beta", "time_sampling_scale",
    "time_sampling_offset", "min_period", "max_period"})
# LeRobot 0.3.x's normaliser modules, saved with the policy's state dict.
_BUFFER = re.compile(r"^(?:model\.)?(?:normalize_inputs|normalize_targets|unnormalize_outputs)\.")


@dataclass(frozen=True)
class CheckpointFormat:
    """What a checkpoint directory is, and the facts that decided it."""

    path: Path
    policy_type: str      # "pi0" | "pi05" (config.json `type`)
    family: str           # one of FAMILIES
    time_schedule: str    # Pi0Config.time_schedule the family's sampler uses
    rope_style: str       # Pi0Config.rope_style the family's attention uses
    evidence: tuple[str, ...]

    def summary(self) -> str:
        """One line for the server's log."""
        return (f"checkpoint {self.path}: {self.policy_type}, {self.family} (time_schedule "
                f"{self.time_schedule}, rope_style {self.rope_style}); evidence: " + "; ".join(self.evidence))

    def as_status(self) -> dict[str, str]:
        """Key/values for a /diagnostics status."""
        return {"checkpoint": str(self.path), "policy_type": self.policy_type, "family": self.family,
                "time_schedule": self.time_schedule, "rope_style": self.rope_style,
                "evidence": "; ".join(self.evidence)}


def safetensors_keys(path: Path) -> list[str]:
    """Tensor names in one safetensors file, from its header (no tensor is read)."""
    try:
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) != 8:
                raise CheckpointError(f"{path}: not a safetensors file (shorter than its 8-byte header size)")
            (n,) = struct.unpack("<Q", head)
            raw = f.read(n)
    except OSError as e:
        raise CheckpointError(f"{path}: cannot be read ({e.strerror or e})") from None
    if len(raw) != n:
        raise CheckpointError(f"{path}: truncated safetensors header ({len(raw)} of {n} bytes)")
    try:
        header = json.loads(raw)
    except ValueError as e:
        raise CheckpointError(f"{path}: safetensors header is not JSON ({e})") from None
    return [k for k in header if k != "__metadata__"]


def _weight_map(index: Path) -> dict:
    """tensor name -> shard file, from a sharded checkpoint's index."""
    weight_map = read_json(index).get("weight_map")
    if not isinstance(weight_map, dict):
        raise CheckpointError(f"{index}: no 'weight_map' object")
    return weight_map


def weight_files(path: Path) -> list[Path]:
    """The safetensors files holding a checkpoint's weights (one, or the shards an index names)."""
    index = path / WEIGHTS_INDEX
    if index.is_file():
        return [path / s for s in sorted(set(_weight_map(index).values()))]
    if (path / WEIGHTS_FILE).is_file():
        return [path / WEIGHTS_FILE]
    raise CheckpointError(f"{path}: no {WEIGHTS_FILE} (or {WEIGHTS_INDEX})")


def weight_keys(path: Path) -> list[str]:
    """Every tensor name of a checkpoint's weights (single file or sharded with an index)."""
    index = path / WEIGHTS_INDEX
    if index.is_file():
        return list(_weight_map(index))
    return safetensors_keys(weight_files(path)[0])


def read_json(path: Path) -> dict:
    try:
        doc = json.loads(Path(path).read_text())
    except OSError as e:
        raise CheckpointError(f"{path}: cannot be read ({e.strerror or e})") from None
    except ValueError as e:
        raise CheckpointError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(doc, dict):
        raise CheckpointError(f"{path}: expected a JSON object, got {type(doc).__name__}")
    return doc


def _listing(keys, limit: int = 3) -> str:
    keys = sorted(keys)
    more = f" (+{len(keys) - limit} more)" if len(keys) > limit else ""
    return ", ".join(keys[:limit]) + more


def detect_format(path: str | Path) -> CheckpointFormat:
    """Read the directory's files and decide its policy type and family (see the module doc).
    CheckpointError names the file and the fact when the directory is unreadable, the type is not
    one we serve, or two facts contradict each other."""
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"{path}: not a checkpoint directory ("
                              + ("does not exist" if not path.exists() else "not a directory") + ")")
    cfg_path = path / CONFIG_FILE
    if not cfg_path.is_file():
        raise CheckpointError(f"{path}: no {CONFIG_FILE}")
    cfg = read_json(cfg_path)
    policy = cfg.get("type")
    if policy not in POLICY_TYPES:
        raise CheckpointError(f"{cfg_path}: key 'type' is {policy!r}; this server runs {' or '.join(POLICY_TYPES)}")

    processors = [n for n in (PREPROCESSOR_FILE, POSTPROCESSOR_FILE) if (path / n).is_file()]
    buffers = [k for k in weight_keys(path) if _BUFFER.match(k)]
    keys03 = sorted(CONFIG_KEYS_03 & cfg.keys())
    keys04 = sorted(CONFIG_KEYS_04 & cfg.keys())
    ours = (path / OWN_STATS_FILE).is_file()

    evidence = [f"{CONFIG_FILE} type {policy!r}"]
    evidence.append(f"{' and '.join(processors)} present" if processors else "no processor files")
    evidence.append(f"{len(buffers)} normalize_* buffers in the weights ({_listing(buffers, 1)})" if buffers
                    else "no normalize_* buffers in the weights")
    if keys03:
        evidence.append(f"{CONFIG_FILE} keys of LeRobot <= 0.3: {', '.join(keys03)}")
    if keys04:
        evidence.append(f"{CONFIG_FILE} keys of LeRobot >= 0.4: {', '.join(keys04)}")
    if ours:
        evidence.append(f"{OWN_STATS_FILE} present (physai_ros training)")

    def clash(a: str, b: str) -> CheckpointError:
        return CheckpointError(f"{path}: contradictory checkpoint format: {a} (LeRobot >= 0.4) but {b} "
                               f"(LeRobot <= 0.3); re-export it with one LeRobot version")

    if processors and buffers:
        raise clash(f"{' and '.join(processors)} present",
                    f"the weights hold normalize_* buffers ({_listing(buffers, 2)})")
    if processors and keys03:
        raise clash(f"{' and '.join(processors)} present", f"{CONFIG_FILE} has {', '.join(keys03)}")
    if buffers and keys04:
        raise clash(f"{CONFIG_FILE} has {', '.join(keys04)}",
                    f"the weights hold normalize_* buffers ({_listing(buffers, 2)})")
    if keys03 and keys04:
        raise clash(f"{CONFIG_FILE} has {', '.join(keys04)}", f"it also has {', '.join(keys03)}")
    if policy == "pi05" and (buffers or keys03):
        raise CheckpointError(f"{path}: contradictory checkpoint format: {CONFIG_FILE} type 'pi05' exists "
                              f"only since LeRobot 0.4, but " + (
                                  f"the weights hold normalize_* buffers ({_listing(buffers, 2)})" if buffers
                                  else f"{CONFIG_FILE} has {', '.join(keys03)}") + " (LeRobot <= 0.3)")
    if len(processors) == 1:
        missing = ({PREPROCESSOR_FILE, POSTPROCESSOR_FILE} - set(processors)).pop()
        raise CheckpointError(f"{path}: {processors[0]} present but {missing} missing: LeRobot >= 0.4 "
                              "writes both (an incomplete download?)")

    if processors or buffers:
        # Normalisation files are the primary fact; config keys only had to agree with them.
        family = LEROBOT_04 if processors else LEROBOT_03
    elif ours:
        # save_lerobot_checkpoint writes 0.6.1-style config keys; the stats file is what says ours.
        family = PHYSAI
    elif keys04 or policy == "pi05":
        family = LEROBOT_04
    elif keys03:
        family = LEROBOT_03
    else:
        raise CheckpointError(
            f"{path}: cannot tell which LeRobot wrote this checkpoint: no {PREPROCESSOR_FILE}, no "
            f"normalize_* buffers in the weights, no {OWN_STATS_FILE}, and {CONFIG_FILE} has none of "
            f"{_listing(CONFIG_KEYS_03, 2)} (LeRobot <= 0.3) or {_listing(CONFIG_KEYS_04, 2)} (LeRobot >= 0.4)")
    schedule, rope = VARIANTS[family]
    return CheckpointFormat(path, policy, family, schedule, rope, tuple(evidence))


def config_overrides_for(fmt: CheckpointFormat) -> dict[str, Any]:
    """The Pi0Config fields that make the engine run `fmt` as its own code would."""
    return {"time_schedule": fmt.time_schedule, "rope_style": fmt.rope_style, "policy": fmt.policy_type}


def resolve_overrides(fmt: CheckpointFormat, overrides: Mapping[str, Any] | None = None,
                      force_variant: bool = False) -> dict[str, Any]:
    """config_overrides_for(fmt) with the caller's Pi0Config overrides on top. A time_schedule or
    rope_style that contradicts the detected family is refused (CheckpointError naming both)
    unless force_variant; a policy type other than config.json's is always refused (the
    weights would not fit)."""
    detected = config_overrides_for(fmt)
    user = dict(overrides or {})
    if "policy" in user and user["policy"] != fmt.policy_type:
        raise CheckpointError(f"{fmt.path / CONFIG_FILE}: type {fmt.policy_type!r}, but policy="
                              f"{user['policy']!r} was asked for")
    for name in VARIANT_FIELDS:
        if name in user and user[name] != detected[name] and not force_variant:
            raise CheckpointError(
                f"{fmt.path}: {name}={user[name]!r} was asked for, but the checkpoint is {fmt.family} "
                f"({'; '.join(fmt.evidence[1:3])}), whose code runs {name}={detected[name]!r}; "
                "pass force_variant=True to run it with the other variant anyway")
    return {**detected, **user}
