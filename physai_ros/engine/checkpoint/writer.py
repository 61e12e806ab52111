"""Write a checkpoint directory in LeRobot's layout (tests, benchmarks, the fixtures' other
direction): our tensor names back to LeRobot's keys, streamed to model.safetensors one tensor at a
time, and a config.json whose keys say which LeRobot family (and so which sampler variant) it is.
"""
from __future__ import annotations

import json
import re
import struct
from pathlib import Path
from typing import Callable, Dict, Optional, Tuple

import torch

from physai_ros.engine.checkpoint.loader import _DTYPES
from physai_ros.engine.checkpoint.params import param_shapes
from physai_ros.engine.types import Pi0Config

def lerobot_key(name: str) -> str:
    """LeRobot 0.6.1 key for one of our names (the layout PI0Policy.save_pretrained writes)."""
    pg = "model.paligemma_with_expert.paligemma.model."
    vis = pg + "vision_tower.vision_model."
    m = re.match(r"vision\.layers\.(\d+)\.(.+)$", name)
    if m:
        i, rest = m.groups()
        sub = {"ln1": "layer_norm1", "ln2": "layer_norm2", "q": "self_attn.q_proj", "k": "self_attn.k_proj",
               "v": "self_attn.v_proj", "o": "self_attn.out_proj", "fc1": "mlp.fc1", "fc2": "mlp.fc2"}
        part, kind = rest.split(".")
        return f"{vis}encoder.layers.{i}.{sub[part]}.{kind}"
    m = re.match(r"expert\.layers\.(\d+)\.(ada_attn|ada_mlp)\.(weight|bias)$", name)
    if m:
        i, norm, kind = m.groups()
        sub = "input_layernorm" if norm == "ada_attn" else "post_attention_layernorm"
        return f"model.paligemma_with_expert.gemma_expert.model.layers.{i}.{sub}.dense.{kind}"
    m = re.match(r"(vlm|expert)\.layers\.(\d+)\.(.+)$", name)
    if m:
        tower, i, part = m.groups()
        base = pg + "language_model." if tower == "vlm" else "model.paligemma_with_expert.gemma_expert.model."
        sub = {"ln_attn": "input_layernorm", "ln_mlp": "post_attention_layernorm", "q": "self_attn.q_proj",
               "k": "self_attn.k_proj", "v": "self_attn.v_proj", "o": "self_attn.o_proj", "gate": "mlp.gate_proj",
               "up": "mlp.up_proj", "down": "mlp.down_proj"}
        return f"{base}layers.{i}.{sub[part]}.weight"
    fixed = {
        "vision.patch.weight": vis + "embeddings.patch_embedding.weight",
        "vision.patch.bias": vis + "embeddings.patch_embedding.bias",
        "vision.pos": vis + "embeddings.position_embedding.weight",
        "vision.post_ln.weight": vis + "post_layernorm.weight",
        "vision.post_ln.bias": vis + "post_layernorm.bias",
        "projector.weight": pg + "multi_modal_projector.linear.weight",
        "projector.bias": pg + "multi_modal_projector.linear.bias",
        "vlm.embed": pg + "language_model.embed_tokens.weight",
        "vlm.norm": pg + "language_model.norm.weight",
        "expert.norm": "model.paligemma_with_expert.gemma_expert.model.norm.weight",
        "expert.ada_norm.weight": "model.paligemma_with_expert.gemma_expert.model.norm.dense.weight",
        "expert.ada_norm.bias": "model.paligemma_with_expert.gemma_expert.model.norm.dense.bias",
    }
    if name in fixed:
        return fixed[name]
    head, _, kind = name.rpartition(".")
    sub = {"state_proj": "state_proj", "action_in": "action_in_proj", "action_time_in": "action_time_mlp_in",
           "action_time_out": "action_time_mlp_out", "action_out": "action_out_proj",
           "time_in": "time_mlp_in", "time_out": "time_mlp_out"}
    if head in sub:
        return f"model.{sub[head]}.{kind}"
    raise KeyError(name)


_DTYPE_NAMES = {v: k for k, v in _DTYPES.items()}


def save_lerobot_checkpoint(path, config: Pi0Config, tensor_for: Callable[[str, Tuple[int, ...]], torch.Tensor],
                            dtype: torch.dtype = torch.float32, extra: Optional[Dict[str, torch.Tensor]] = None) -> Path:
    """Write a checkpoint directory in LeRobot's layout, streaming: `tensor_for(name, shape)` is
    called once per tensor and the result written immediately, so a full-size random model can
    be produced without holding it. `extra` adds tensors under raw LeRobot keys (e.g. the
    expert's lm_head, to check that the loader skips it)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    shapes = param_shapes(config)
    items = [(lerobot_key(n), n, s, dtype) for n, s in shapes.items()]
    for key, t in (extra or {}).items():
        items.append((key, None, tuple(t.shape), t.dtype))
    header, off = {}, 0
    for key, _, shape, dt in items:
        nbytes = int(torch.Size(shape).numel()) * torch.empty(0, dtype=dt).element_size()
        header[key] = {"dtype": _DTYPE_NAMES[dt], "shape": list(shape), "data_offsets": [off, off + nbytes]}
        off += nbytes
    header["__metadata__"] = {"format": "pt"}
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    with open(path / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for key, name, shape, dt in items:
            t = (extra[key] if name is None else tensor_for(name, shape)).to(dt).contiguous()
            if tuple(t.shape) != tuple(shape):
                raise ValueError(f"tensor_for({name!r}) returned shape {list(t.shape)}, expected {list(shape)}")
            f.write(t.view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    variant = (config.time_schedule, config.rope_style)
    common = {"type": config.policy, "chunk_size": config.chunk_size, "n_action_steps": config.chunk_size,
              "max_state_dim": config.max_state_dim, "max_action_dim": config.max_action_dim,
              "tokenizer_max_length": config.max_tokens}
    # The config keys say which LeRobot family wrote it, and the loader reads the family's
    # sampler variant from them (checkpoint_format), so write the keys of the family whose
    # variant the config runs: a round trip must not change the chunk.
    if variant == ("multiply", "multiply"):
        lr_cfg = {**common, "paligemma_variant": "gemma_2b", "action_expert_variant": "gemma_300m",
                  "num_inference_steps": config.num_steps, "min_period": config.min_period,
                  "max_period": config.max_period, "image_resolution": [config.vision.image_size] * 2}
    elif variant == ("accumulate", "divide") and config.policy == "pi0":
        if (config.min_period, config.max_period) != (4e-3, 4.0):
            raise ValueError("LeRobot <= 0.3 has no min_period / max_period keys (fixed 4e-3 / 4.0)")
        lr_cfg = {**common, "num_steps": config.num_steps,
                  "resize_imgs_with_padding": [config.vision.image_size] * 2}
    else:
        raise ValueError(f"no LeRobot release runs {config.policy} with time_schedule={variant[0]!r}, "
                         f"rope_style={variant[1]!r}: nothing to write it as")
    (path / "config.json").write_text(json.dumps(lr_cfg, indent=2))
    return path
