"""Stacking several robots' observations into one padded batch.

Padding never changes a robot's result: padded prompt tokens and missing view slots are masked
out of attention, and RoPE positions count only valid tokens (cumsum of the mask).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

import torch

from physai_ros.engine.camera_frames import robots_model_pixels
from physai_ros.engine.types import EngineInput, Pi0Config

# Camera byte q -> q * (2/255) - 1 in float32: the model's pixel space, as LeRobot's pi0 expects.
_PIXEL_SCALE = torch.tensor(2.0 / 255.0, dtype=torch.float32)


def model_pixels(images: torch.Tensor) -> torch.Tensor:
    """uint8 camera pixels -> float32 in [-1, 1]; float images (already in model space) pass.

    The one place pixels are scaled: images travel as uint8 from the robot to here (4x fewer
    bytes through the server and to remote workers), and on a GPU the bytes cross to the device
    before they become floats."""
    if images.dtype != torch.uint8:
        return images
    # Convert, then scale in place: the same two roundings as q * (2/255) - 1 in float32. (A
    # mixed-dtype torch.mul(uint8, float) is about 20x slower on the CPU: no vectorised path.)
    return images.to(torch.float32).mul_(_PIXEL_SCALE.to(images.device)).sub_(1.0)


def model_space_views(inputs: List[EngineInput], size: int, device="cpu") -> List[torch.Tensor]:
    """Each input's views as float32 [V, 3, size, size] in [-1, 1] on `device`, as collate()
    makes them: raw frames resized as LeRobot does (one call per frame size across the inputs),
    bytes scaled, floats as they are."""
    raw = [i for i, x in enumerate(inputs) if isinstance(x.images, tuple)]
    frames = dict(zip(raw, robots_model_pixels([inputs[i].images for i in raw], size, device)))
    return [frames[i] if i in frames else model_pixels(x.images.to(device)).to(torch.float32)
            for i, x in enumerate(inputs)]


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
    nv = num_views or max(len(x.images) for x in inputs)
    nl = num_tokens or max(x.tokens.shape[0] for x in inputs)
    s = config.vision.image_size
    if any(isinstance(x.images, tuple) for x in inputs):
        # Raw camera frames (LeRobot checkpoints): resized as LeRobot does, on the device;
        # missing view slots exactly 0, as on the byte path.
        images = torch.zeros(b, nv, 3, s, s, dtype=torch.float32, device=device)
        for i, views in enumerate(model_space_views(inputs, s, device)):
            images[i, :len(views)] = views
        return _with_the_rest(images.to(dtype), inputs, config, device, generator, nv, nl)
    as_bytes = all(x.images.dtype == torch.uint8 for x in inputs)
    images = torch.zeros(b, nv, 3, s, s, dtype=torch.uint8 if as_bytes else dtype)
    for i, x in enumerate(inputs):
        v = x.images.shape[0]
        images[i, :v] = x.images if as_bytes else model_pixels(x.images)
    if as_bytes:
        images = model_pixels(images.to(device))
        views = [x.images.shape[0] for x in inputs]
        if min(views) < nv:
            # Missing view slots stay exactly 0 (not -1), as for float inputs: masked out anyway.
            present = torch.zeros(b, nv, dtype=torch.bool)
            for i, v in enumerate(views):
                present[i, :v] = True
            images.masked_fill_(~present.to(device)[:, :, None, None, None], 0.0)
    return _with_the_rest(images.to(device, dtype), inputs, config, device, generator, nv, nl)


def _with_the_rest(images: torch.Tensor, inputs, config: Pi0Config, device, generator, nv: int, nl: int) -> Batch:
    """The batch of these images: everything but the images padded and stacked, on the device."""
    b = len(inputs)
    image_masks = torch.zeros(b, nv, dtype=torch.bool)
    tokens = torch.zeros(b, nl, dtype=torch.int64)
    token_mask = torch.zeros(b, nl, dtype=torch.bool)
    state = torch.zeros(b, config.max_state_dim, dtype=torch.float32)
    noise = torch.empty(b, config.chunk_size, config.max_action_dim, dtype=torch.float32)
    for i, x in enumerate(inputs):
        n = x.tokens.shape[0]
        image_masks[i, :len(x.images)] = x.image_masks
        tokens[i, :n] = x.tokens
        token_mask[i, :n] = x.token_mask
        state[i] = x.state
        if x.noise is not None:
            noise[i] = x.noise
        else:
            noise[i] = torch.randn(config.chunk_size, config.max_action_dim, generator=generator)
    return Batch(images=images, image_masks=image_masks.to(device), tokens=tokens.to(device),
                 token_mask=token_mask.to(device), state=state.to(device), noise=noise.to(device))

