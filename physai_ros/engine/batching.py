"""Stacking several robots' observations into one padded batch.

Padding never changes a robot's result: padded prompt tokens and missing view slots are masked
out of attention, and RoPE positions count only valid tokens (cumsum of the mask).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

import torch

from .types import EngineInput, Pi0Config


@dataclass
class Batch:
    images: torch.Tensor  # [B, V, 3, S, S]
    image_masks: torch.Tensor  # bool [B, V]
    tokens: torch.Tensor  # int64 [B, L]
    token_mask: torch.Tensor  # bool [B, L]
    state: torch.Tensor  # [B, max_state_dim]
    noise: torch.Tensor  # [B, chunk, max_action_dim]

    @property
    def size(self) -> int:
        return int(self.state.shape[0])


def collate(
    inputs: List[EngineInput],
    config: Pi0Config,
    device,
    dtype: torch.dtype,
    generator: Optional[torch.Generator] = None,
    num_views: Optional[int] = None,
    num_tokens: Optional[int] = None,
) -> Batch:
    """Pad to the largest view count and prompt length in the batch (or to the given static
    sizes, used for CUDA graphs) and stack. Inputs must already be validated."""
    b = len(inputs)
    nv = num_views or max(x.images.shape[0] for x in inputs)
    nl = num_tokens or max(x.tokens.shape[0] for x in inputs)
    s = config.vision.image_size
    images = torch.zeros(b, nv, 3, s, s, dtype=dtype)
    image_masks = torch.zeros(b, nv, dtype=torch.bool)
    tokens = torch.zeros(b, nl, dtype=torch.int64)
    token_mask = torch.zeros(b, nl, dtype=torch.bool)
    state = torch.zeros(b, config.max_state_dim, dtype=torch.float32)
    noise = torch.empty(b, config.chunk_size, config.max_action_dim, dtype=torch.float32)
    for i, x in enumerate(inputs):
        v, n = x.images.shape[0], x.tokens.shape[0]
        images[i, :v] = x.images
        image_masks[i, :v] = x.image_masks
        tokens[i, :n] = x.tokens
        token_mask[i, :n] = x.token_mask
        state[i] = x.state
        if x.noise is not None:
            noise[i] = x.noise
        else:
            noise[i] = torch.randn(config.chunk_size, config.max_action_dim, generator=generator)
    return Batch(
        images=images.to(device),
        image_masks=image_masks.to(device),
        tokens=tokens.to(device),
        token_mask=token_mask.to(device),
        state=state.to(device),
        noise=noise.to(device),
    )
