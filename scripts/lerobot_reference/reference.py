"""Build a LeRobot PI0 with random weights and sample action chunks with it (reference venv only).

Used by scripts/make_lerobot_fixture.py (fixtures and the live equivalence test) and by
time_lerobot.py (the benchmark's `lerobot_ms`). The sampling itself is LeRobot's
`PI0FlowMatching.sample_actions`; we only observe its denoising steps.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, List, Optional

import torch

import lerobot_compat as lc


@dataclass(frozen=True)
class PolicySpec:
    sizes: lc.TinySizes
    chunk_size: int = 10
    state_dim: int = 6
    action_dim: int = 5
    max_state_dim: int = 8
    max_action_dim: int = 8
    num_cameras: int = 3
    num_steps: int = 10


# Sizes by name: "fixture" is the committed equivalence fixture; the others mirror
# physai_ros.engine's Pi0Config presets of the same name. name -> (sizes, chunk, max_state, max_action)
PRESETS = {
    "fixture": (lc.TinySizes(), 10, 8, 8),
    "tiny": (lc.TinySizes(vlm_width=64, vlm_mlp=128, expert_width=32, expert_mlp=64, depth=2, num_heads=4,
                          num_kv_heads=2, head_dim=16, vision_width=32, vision_mlp=64, vision_depth=2,
                          vision_heads=2, image_size=56, patch_size=14, vocab_size=1024), 8, 8, 8),
    "tiny_mqa": (lc.TinySizes(vlm_width=64, vlm_mlp=128, expert_width=32, expert_mlp=64, depth=2, num_heads=8,
                              num_kv_heads=1, head_dim=16, vision_width=32, vision_mlp=64, vision_depth=2,
                              vision_heads=2, image_size=56, patch_size=14, vocab_size=1024), 8, 8, 8),
    "pi0": (lc.TinySizes.pi0(), 50, 32, 32),
    "pi0_2layer": (lc.TinySizes.pi0(depth=2, vision_depth=2), 50, 32, 32),
    "pi0_1layer": (lc.TinySizes.pi0(depth=1, vision_depth=1), 50, 32, 32),
}


def spec_for(preset: str) -> PolicySpec:
    sizes, chunk, sdim, adim = PRESETS[preset]
    if preset == "fixture":
        return PolicySpec(sizes=sizes, chunk_size=chunk, max_state_dim=sdim, max_action_dim=adim)
    # Real robots' dims are below the padded ones; keep 2 padded slots to exercise unpadding.
    return PolicySpec(sizes=sizes, chunk_size=chunk, state_dim=sdim - 2, action_dim=adim - 2,
                      max_state_dim=sdim, max_action_dim=adim)


def load_checkpoint(policy, path) -> None:
    """Copy a LeRobot-layout model.safetensors into policy.model. Every model tensor must be
    provided except the two lm_heads, which PI0 inference never reads."""
    from pathlib import Path

    from safetensors.torch import load_file

    state = {k[len("model."):]: v for k, v in load_file(str(Path(path) / "model.safetensors")).items()
             if k.startswith("model.")}
    emb = "paligemma_with_expert.paligemma.model.language_model.embed_tokens.weight"
    head = "paligemma_with_expert.paligemma.lm_head.weight"
    if emb not in state and head in state:
        state[emb] = state[head]
    result = policy.model.load_state_dict(state, strict=False)
    missing = [k for k in result.missing_keys if not k.endswith("lm_head.weight")]
    if missing or result.unexpected_keys:
        raise ValueError(f"{path}: checkpoint does not fit these sizes: missing {missing[:5]}, "
                         f"unexpected {result.unexpected_keys[:5]}")


def _features(spec: PolicySpec):
    from lerobot.configs.types import FeatureType, PolicyFeature

    s = spec.sizes.image_size
    inputs = {
        f"observation.images.cam{i}": PolicyFeature(type=FeatureType.VISUAL, shape=(3, s, s))
        for i in range(spec.num_cameras)
    }
    inputs["observation.state"] = PolicyFeature(type=FeatureType.STATE, shape=(spec.state_dim,))
    outputs = {"action": PolicyFeature(type=FeatureType.ACTION, shape=(spec.action_dim,))}
    return inputs, outputs


def build_policy(spec: PolicySpec, seed: int, stats: Optional[Dict[str, Dict[str, torch.Tensor]]] = None,
                 randomize: bool = True):
    """A PI0Policy of `spec`'s sizes in fp32 with seeded random weights.

    LeRobot's own init (std 0.02, zero norm weights and biases) leaves most of the network near
    the identity at tiny widths, which would let a wrong norm or bias go unnoticed; so every
    parameter is redrawn at a scale that keeps activations O(1)."""
    lc.prepare(spec.sizes)
    from lerobot.policies.pi0.configuration_pi0 import PI0Config
    from lerobot.policies.pi0.modeling_pi0 import PI0Policy

    inputs, outputs = _features(spec)
    config = PI0Config(
        chunk_size=spec.chunk_size,
        n_action_steps=spec.chunk_size,
        max_state_dim=spec.max_state_dim,
        max_action_dim=spec.max_action_dim,
        proj_width=spec.sizes.expert_width,
        num_steps=spec.num_steps,
        resize_imgs_with_padding=(spec.sizes.image_size, spec.sizes.image_size),
        device="cpu",
        input_features=inputs,
        output_features=outputs,
    )
    torch.manual_seed(seed)
    policy = PI0Policy(config, dataset_stats=stats)
    if randomize:
        randomize_weights(policy.model, seed)
    policy.eval()
    return policy


def randomize_weights(model: torch.nn.Module, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1:
                # LayerNorm scales multiply directly; Gemma RMSNorm applies (1 + w).
                is_layer_norm_scale = "vision_tower" in name and "norm" in name and name.endswith(".weight")
                base = 1.0 if is_layer_norm_scale else 0.0
                p.copy_(base + 0.1 * torch.randn(p.shape, generator=gen))
            elif "embed_tokens" in name:
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[1]))
            elif "position_embedding" in name:
                p.copy_(0.5 * torch.randn(p.shape, generator=gen))
            else:
                fan_in = math.prod(p.shape[1:])
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(fan_in))


@dataclass
class Sample:
    actions: torch.Tensor  # [B, chunk, max_action_dim], normalised space
    times: List[float]  # the float32 flow time of each Euler step, as LeRobot computed it
    velocities: torch.Tensor  # [steps, B, chunk, max_action_dim]


@torch.no_grad()
def sample(policy, images: List[torch.Tensor], img_masks: List[torch.Tensor], tokens: torch.Tensor,
           token_masks: torch.Tensor, state: torch.Tensor, noise: torch.Tensor) -> Sample:
    """LeRobot's sample_actions on prepared inputs (images [-1, 1], one [B, 3, S, S] per view,
    masks [B]; tokens [B, L] with bool masks; state [B, max_state_dim]; noise [B, C, A])."""
    model = policy.model
    times: List[float] = []
    velocities: List[torch.Tensor] = []
    original = model.denoise_step

    def observed(state_, prefix_pad_masks, past_key_values, x_t, timestep):
        v = original(state_, prefix_pad_masks, past_key_values, x_t, timestep)
        times.append(float(timestep[0]))
        velocities.append(v.clone())
        return v

    model.denoise_step = observed
    try:
        actions = model.sample_actions(images, img_masks, tokens, token_masks, state, noise=noise.clone())
    finally:
        del model.denoise_step
    return Sample(actions=actions, times=times, velocities=torch.stack(velocities))


@torch.no_grad()
def sample_with_times(policy, images, img_masks, tokens, token_masks, state, noise, times: List[float]):
    """Diagnostic only: LeRobot 0.3.2's sample_actions loop with a given time schedule (to measure
    how much the schedule alone moves the result; see docs/lerobot_reference.md)."""
    from lerobot.policies.pi0.modeling_pi0 import make_att_2d_masks

    model = policy.model
    prefix_embs, prefix_pad, prefix_att = model.embed_prefix(images, img_masks, tokens, token_masks)
    att2d = make_att_2d_masks(prefix_pad, prefix_att)
    pos = torch.cumsum(prefix_pad, dim=1) - 1
    _, kv = model.paligemma_with_expert.forward(
        attention_mask=att2d, position_ids=pos, past_key_values=None,
        inputs_embeds=[prefix_embs, None], use_cache=True, fill_kv_cache=True,
    )
    dt = torch.tensor(-1.0 / model.config.num_steps, dtype=torch.float32)
    x = noise.clone()
    for t in times:
        tt = torch.tensor(t, dtype=torch.float32).expand(x.shape[0])
        x += dt * model.denoise_step(state, prefix_pad, kv, x, tt)
    return x
