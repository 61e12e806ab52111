"""Load a LeRobot PI0 checkpoint directory (config.json + model.safetensors, as
`PI0Policy.save_pretrained` writes it) into our weight dict.

- Every LeRobot key is either mapped onto one of our names, or skipped on purpose (listed in
  SKIPPED: the expert's lm_head, the VLM's tied lm_head when embed_tokens is present); any other
  key is an error naming it. Every tensor our config needs must be found, with the shape the
  config implies.
- Sizes come from the tensors (LeRobot's config.json only names variants like "gemma_2b"), so
  any pi0-family size loads. Head counts cannot be read from projection shapes: the Gemma head
  dim and the SigLIP head count are parameters (LeRobot's values by default).
- Memory-frugal: the safetensors file is read tensor by tensor with plain file reads into the
  final tensors (no mmap, no second copy), with progress reports for a full-size model.
"""
from __future__ import annotations

import json
import logging
import re
import struct
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

import torch

# CheckpointError: torch-free there (preflight), re-exported
from physai_ros.engine.checkpoint.format import (CheckpointError, CheckpointFormat, detect_format, resolve_overrides,
                                                 weight_files)
from physai_ros.engine.checkpoint.params import Weights, infer_config, param_shapes
from physai_ros.engine.types import Pi0Config

log = logging.getLogger(__name__)


# Report loading progress only for checkpoints at least this big (a full-size pi0 is ~14 GB).
PROGRESS_MIN_BYTES = 1 << 30


_DTYPES = {
    "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool,
}

_PG = r"paligemma_with_expert\.paligemma\."
_VIS = _PG + r"(?:model\.)?vision_tower\.vision_model\."
_LM = _PG + r"(?:model\.language_model\.|language_model\.(?:model\.)?)"
_EX = r"paligemma_with_expert\.gemma_expert\.model\."

# (LeRobot key regex, our name template); first match wins.
_RULES: List[Tuple[re.Pattern, str]] = [(re.compile(p + r"$"), t) for p, t in [
    (_VIS + r"embeddings\.patch_embedding\.(weight|bias)", r"vision.patch.\1"),
    (_VIS + r"embeddings\.position_embedding\.weight", "vision.pos"),
    (_VIS + r"encoder\.layers\.(\d+)\.layer_norm([12])\.(weight|bias)", r"vision.layers.\1.ln\2.\3"),
    (_VIS + r"encoder\.layers\.(\d+)\.self_attn\.(q|k|v)_proj\.(weight|bias)", r"vision.layers.\1.\2.\3"),
    (_VIS + r"encoder\.layers\.(\d+)\.self_attn\.out_proj\.(weight|bias)", r"vision.layers.\1.o.\2"),
    (_VIS + r"encoder\.layers\.(\d+)\.mlp\.(fc1|fc2)\.(weight|bias)", r"vision.layers.\1.\2.\3"),
    (_VIS + r"post_layernorm\.(weight|bias)", r"vision.post_ln.\1"),
    (_PG + r"(?:model\.)?multi_modal_projector\.linear\.(weight|bias)", r"projector.\1"),
    (_LM + r"embed_tokens\.weight", "vlm.embed"),
    (_LM + r"layers\.(\d+)\.self_attn\.(q|k|v|o)_proj\.weight", r"vlm.layers.\1.\2"),
    (_LM + r"layers\.(\d+)\.mlp\.(gate|up|down)_proj\.weight", r"vlm.layers.\1.\2"),
    (_LM + r"layers\.(\d+)\.input_layernorm\.weight", r"vlm.layers.\1.ln_attn"),
    (_LM + r"layers\.(\d+)\.post_attention_layernorm\.weight", r"vlm.layers.\1.ln_mlp"),
    (_LM + r"norm\.weight", "vlm.norm"),
    (_EX + r"layers\.(\d+)\.self_attn\.(q|k|v|o)_proj\.weight", r"expert.layers.\1.\2"),
    (_EX + r"layers\.(\d+)\.mlp\.(gate|up|down)_proj\.weight", r"expert.layers.\1.\2"),
    (_EX + r"layers\.(\d+)\.input_layernorm\.weight", r"expert.layers.\1.ln_attn"),
    (_EX + r"layers\.(\d+)\.post_attention_layernorm\.weight", r"expert.layers.\1.ln_mlp"),
    (_EX + r"norm\.weight", "expert.norm"),
    (r"state_proj\.(weight|bias)", r"state_proj.\1"),
    (r"action_in_proj\.(weight|bias)", r"action_in.\1"),
    (r"(?:action_)?time_mlp_in\.(weight|bias)", r"action_time_in.\1"),
    (r"(?:action_)?time_mlp_out\.(weight|bias)", r"action_time_out.\1"),
    (r"action_out_proj\.(weight|bias)", r"action_out.\1"),
]]

# pi0.5 (LeRobot PI05): the expert's norms are adaRMS dense layers, the time MLP feeds them
# (named time_mlp_* since 0.4, action_time_mlp_* in openpi conversions), and there is no state
# projection (a converted checkpoint may still carry one: skipped, as LeRobot skips it).
_PI05_RULES: List[Tuple[re.Pattern, str]] = [(re.compile(p + r"$"), t) for p, t in [
    (_EX + r"layers\.(\d+)\.input_layernorm\.dense\.(weight|bias)", r"expert.layers.\1.ada_attn.\2"),
    (_EX + r"layers\.(\d+)\.post_attention_layernorm\.dense\.(weight|bias)", r"expert.layers.\1.ada_mlp.\2"),
    (_EX + r"norm\.dense\.(weight|bias)", r"expert.ada_norm.\1"),
    (r"(?:action_)?time_mlp_in\.(weight|bias)", r"time_in.\1"),
    (r"(?:action_)?time_mlp_out\.(weight|bias)", r"time_out.\1"),
]]
_PI05_SKIPPED = [re.compile(r"state_proj\.(weight|bias)$")]
_PI0_ONLY = re.compile(r"(?:state_proj|(?:action_)?time_mlp_(?:in|out))\.|" + _EX + r"(?:layers\.\d+\.\w+_layernorm|norm)\.weight$")

# Keys present in LeRobot checkpoints that pi0 inference does not read, skipped on purpose.
SKIPPED = [re.compile(p + r"$") for p in (
    r"paligemma_with_expert\.gemma_expert\.lm_head\.weight",  # the expert never emits tokens
    _PG + r"lm_head\.weight",  # tied to embed_tokens; used only when embed_tokens is absent
    r"(?:normalize_inputs|normalize_targets|unnormalize_outputs)\..*",  # stats: see normalization_stats
)]
_LM_HEAD = re.compile(_PG + r"lm_head\.weight$")
_NORM_STATS = re.compile(r"(?:normalize_inputs|normalize_targets|unnormalize_outputs)\.buffer_(.+)\.(mean|std|min|max)$")


def _normalise_key(key: str) -> str:
    # PI0Policy.state_dict() prefixes the core model with "model."; older exports do not.
    return key[len("model."):] if key.startswith("model.") else key


def map_key(key: str, policy: str = "pi0") -> Optional[str]:
    """Our name for a LeRobot key of a `policy` ("pi0" | "pi05", from config.json) checkpoint,
    or None when it is skipped on purpose. Raises for unknown keys, and for keys of the other
    policy: a config.json that names the wrong policy must not load."""
    k = _normalise_key(key)
    if policy == "pi05":
        for pat, tmpl in _PI05_RULES:
            m = pat.match(k)
            if m:
                return m.expand(tmpl)
        if any(p.match(k) for p in _PI05_SKIPPED):
            return None
        if _PI0_ONLY.match(k):
            raise CheckpointError(f"tensor {key!r} belongs to a pi0 model (Gemma norm weight / state or "
                                  "action-time MLP), but config.json says type 'pi05'")
    elif ".dense." in k:
        raise CheckpointError(f"tensor {key!r} is an adaRMS layer of a pi0.5 model, but config.json says "
                              "type 'pi0'")
    for pat, tmpl in _RULES:
        m = pat.match(k)
        if m:
            return m.expand(tmpl)
    if any(p.match(k) for p in SKIPPED):
        return None
    raise CheckpointError(f"unexpected tensor {key!r} in checkpoint")


class SafetensorsFile:
    """Minimal safetensors reader: header parse plus readinto, so tensors land directly in
    their final buffers and the file is never memory-mapped."""

    def __init__(self, path: Path):
        self.path = Path(path)
        with open(self.path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
        self.metadata = header.pop("__metadata__", {})
        self.entries = header
        self.data_start = 8 + n

    def shape(self, key: str) -> Tuple[int, ...]:
        return tuple(self.entries[key]["shape"])

    def nbytes(self, key: str) -> int:
        a, b = self.entries[key]["data_offsets"]
        return b - a

    def read(self, key: str, f, dtype: Optional[torch.dtype] = None) -> torch.Tensor:
        e = self.entries[key]
        if e["dtype"] not in _DTYPES:
            raise CheckpointError(f"{self.path.name}: tensor {key!r} has unsupported dtype {e['dtype']}")
        t = torch.empty(e["shape"], dtype=_DTYPES[e["dtype"]])
        a, b = e["data_offsets"]
        if t.numel() * t.element_size() != b - a:
            raise CheckpointError(f"{self.path.name}: tensor {key!r} byte size does not match its shape {e['shape']}")
        f.seek(self.data_start + a)
        buf = t.view(-1).view(torch.uint8).numpy() if t.numel() else None
        if buf is not None and f.readinto(memoryview(buf)) != b - a:
            raise CheckpointError(f"{self.path.name}: truncated data for tensor {key!r}")
        return t if dtype is None or t.dtype == dtype else t.to(dtype)


def read_lerobot_config(path) -> dict:
    cfg_path = Path(path) / "config.json"
    if not cfg_path.exists():
        raise CheckpointError(f"{path}: no config.json")
    cfg = json.loads(cfg_path.read_text())
    if cfg.get("type", "pi0") not in Pi0Config.POLICIES:
        raise CheckpointError(f"{cfg_path}: policy type {cfg.get('type')!r}, expected one of "
                              f"{', '.join(Pi0Config.POLICIES)}")
    return cfg


def _config_fields(lr: dict) -> dict:
    out = {}
    for ours, theirs in (("chunk_size", "chunk_size"), ("num_steps", "num_steps"), ("num_steps", "num_inference_steps"),
                         ("max_state_dim", "max_state_dim"),
                         ("min_period", "min_period"), ("max_period", "max_period")):
        if theirs in lr:
            out[ours] = lr[theirs]
    if "tokenizer_max_length" in lr:
        out["max_tokens"] = max(int(lr["tokenizer_max_length"]), 1)
    return out


def load_lerobot_checkpoint(
    path,
    dtype: Optional[torch.dtype] = torch.float32,
    head_dim: Optional[int] = None,
    vision_heads: int = 16,
    progress: Optional[Callable[[str], None]] = None,
    force_variant: bool = False,
    fmt: Optional[CheckpointFormat] = None,
    **config_overrides,
) -> Tuple[Pi0Config, Weights]:
    """(config, weights) from a LeRobot PI0 / PI05 checkpoint directory (or one of ours).

    The policy (config.json `type`) and the sampler variant (time schedule, RoPE formula) come
    from the files (checkpoint_format.detect_format), are logged once, and an override that
    contradicts them is refused unless force_variant.
    head_dim: Gemma head dim; default 256 (LeRobot's gemma_2b / gemma_300m), or the K
    projection's rows when 256 does not divide them (a single KV head, as in every pi0 variant).
    vision_heads: SigLIP head count (16 for So400m).
    """
    path = Path(path)
    fmt = fmt or detect_format(path)  # fmt: the caller's detect_format(path), when it has one
    log.info(fmt.summary())
    config_overrides = resolve_overrides(fmt, config_overrides, force_variant)
    lr_cfg = read_lerobot_config(path)
    if lr_cfg.get("use_relative_actions"):
        raise CheckpointError(f"{path / 'config.json'}: use_relative_actions is true (actions relative to the "
                              "state, LeRobot's Relative/AbsoluteActionsProcessorStep); this server does not "
                              "apply that conversion, so it refuses rather than send relative actions as absolute")
    policy = lr_cfg.get("type", "pi0")
    files = [SafetensorsFile(f) for f in weight_files(path)]
    report = progress or (lambda msg: log.info(msg))

    # Pass 1: map names and collect shapes (header only).
    plan: Dict[str, Tuple[SafetensorsFile, str]] = {}
    lm_head: Optional[Tuple[SafetensorsFile, str]] = None
    for sf in files:
        for key in sf.entries:
            name = map_key(key, policy)
            if name is None:
                if _LM_HEAD.match(_normalise_key(key)):
                    lm_head = (sf, key)
                continue
            if name in plan:
                raise CheckpointError(f"tensor {key!r} maps onto {name!r}, which {plan[name][1]!r} already provides")
            plan[name] = (sf, key)
    if "vlm.embed" not in plan and lm_head is not None:
        plan["vlm.embed"] = lm_head  # tied weights saved under the head's name only
    shapes = {name: sf.shape(key) for name, (sf, key) in plan.items()}
    needs = ("vision.patch.weight", "vision.pos", "vlm.layers.0.q", "vlm.layers.0.k", "expert.layers.0.q",
             "vlm.embed", "action_in.weight") + (("time_in.weight",) if policy == "pi05" else ("state_proj.weight",))
    for needed in needs:
        if needed not in shapes:
            raise CheckpointError(f"{path}: missing tensor for {needed!r}; is this a LeRobot {policy} checkpoint?")
    if head_dim is None:
        k_rows = shapes["vlm.layers.0.k"][0]
        head_dim = 256 if k_rows % 256 == 0 and shapes["vlm.layers.0.q"][0] % 256 == 0 else k_rows
    try:
        config = infer_config(shapes, head_dim=head_dim, vision_heads=vision_heads,
                              **{**_config_fields(lr_cfg), **config_overrides})
        config.validate()
    except (ValueError, KeyError) as e:
        # Head counts are the sizes tensors cannot show: name the override that sets them.
        raise CheckpointError(
            f"{path}: tensor shapes do not form a {policy} model with head_dim={head_dim} and vision_heads="
            f"{vision_heads} ({e}); if its towers are not the standard ones, give their head counts: "
            "server.model.head_dim / server.model.vision_heads in fleet.yaml (head_dim= / vision_heads= "
            "to load_lerobot_checkpoint)") from e

    expected = param_shapes(config)
    for name, shape in expected.items():
        if name not in plan:
            raise CheckpointError(f"{path}: missing tensor for {name!r} (shape {list(shape)})")
        sf, key = plan[name]
        if sf.shape(key) != tuple(shape):
            raise CheckpointError(f"tensor {key!r} ({name}) has shape {list(sf.shape(key))}, expected {list(shape)}")
    extra = sorted(set(plan) - set(expected))
    if extra:
        sf, key = plan[extra[0]]
        raise CheckpointError(f"tensor {key!r} ({extra[0]}) is not part of a {config.vlm.depth}-layer model")

    # Pass 2: read, one tensor at a time.
    total = sum(sf.nbytes(key) for sf, key in plan.values())
    done, t0, last = 0, time.monotonic(), 0.0
    weights: Weights = {}
    by_file: Dict[Path, List[Tuple[str, str]]] = {}
    for name, (sf, key) in plan.items():
        by_file.setdefault(sf.path, []).append((name, key))
    sf_of = {sf.path: sf for sf in files}
    for fpath, items in by_file.items():
        sf = sf_of[fpath]
        items.sort(key=lambda nk: sf.entries[nk[1]]["data_offsets"][0])  # sequential reads
        with open(fpath, "rb", buffering=0) as f:
            for name, key in items:
                weights[name] = sf.read(key, f, dtype)
                done += sf.nbytes(key)
                now = time.monotonic()
                if total >= PROGRESS_MIN_BYTES and (now - last > 2.0 or done == total):
                    last = now
                    report(f"loading {path.name}: {done / 2**30:.1f}/{total / 2**30:.1f} GiB ({now - t0:.0f} s)")
    return config, weights


def normalization_stats(path, feature_names: Optional[List[str]] = None) -> Dict[str, Dict[str, torch.Tensor]]:
    """Normalisation statistics stored with a checkpoint, {feature: {mean|std|min|max: tensor}}:
    LeRobot's normalize_* buffers in model.safetensors (buffer_<feature with . as _>) and processor
    state files (other *.safetensors with keys "<feature>.<stat>"). Empty when absent.
    feature_names (from config.json) resolve the buffer names back to dotted feature names."""
    path = Path(path)
    by_buffer = {f.replace(".", "_"): f for f in (feature_names or [])}
    stats: Dict[str, Dict[str, torch.Tensor]] = {}
    for fpath in sorted(path.glob("*.safetensors")):
        sf = SafetensorsFile(fpath)
        is_model = fpath.name.startswith("model")
        with open(fpath, "rb") as f:
            for key in sf.entries:
                if is_model:
                    m = _NORM_STATS.match(_normalise_key(key))
                    if not m:
                        continue
                    feat, stat = by_buffer.get(m.group(1), m.group(1)), m.group(2)
                else:
                    feat, _, stat = key.rpartition(".")
                    if stat not in ("mean", "std", "min", "max") or not feat:
                        continue
                stats.setdefault(feat, {})[stat] = sf.read(key, f, torch.float32)
    return stats
