"""Raw camera frames -> the model's pixels, as LeRobot's pi0 / pi0.5 compute them.

A LeRobot checkpoint was trained (and is evaluated by LeRobot) on frames that become floats
first: q / 255 in float32, then `resize_with_pad` (openpi's: the aspect ratio kept with the float
ratio max(w / W, h / H) and int() truncation of the new sides, bilinear with half-pixel centres
and no antialiasing, clamped to [0, 1], zero padding centred with the odd pixel at the
bottom/right), then x * 2 - 1. Resizing the uint8 frame and rounding back to bytes (what the
server did) moved actions by up to 0.14 robot units on a 128x96 camera.

Frames travel as bytes (a robot's own size, RGB, [3, H, W]) up to here, the engine's collation,
which runs this on the device that runs the model, one interpolate per frame size across the
batch's robots (interpolation treats every image of a batch alone: batching changes no value).
"""
from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

import torch
import torch.nn.functional as F


def resize_with_pad(images: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """[B, C, h, w] float in [0, 1] -> [B, C, height, width], LeRobot's (openpi's) resize_with_pad."""
    h, w = int(images.shape[-2]), int(images.shape[-1])
    ratio = max(w / width, h / height)
    new_h, new_w = int(h / ratio), int(w / ratio)
    resized = F.interpolate(images, size=(new_h, new_w), mode="bilinear", align_corners=False).clamp(0.0, 1.0)
    top, extra_h = divmod(height - new_h, 2)
    left, extra_w = divmod(width - new_w, 2)
    return F.pad(resized, (left, left + extra_w, top, top + extra_h), mode="constant", value=0.0)


def frames_to_model_pixels(frames: Sequence[torch.Tensor], size: int) -> torch.Tensor:
    """Frames of one size, uint8 [3, h, w] each -> float32 [N, 3, size, size] in [-1, 1]."""
    x = torch.stack(list(frames)).to(torch.float32) / 255.0
    if tuple(x.shape[-2:]) != (size, size):
        x = resize_with_pad(x, size, size)
    return x * 2.0 - 1.0


def robots_model_pixels(robots: Sequence[Sequence[torch.Tensor]], size: int, device) -> List[torch.Tensor]:
    """Each robot's frames -> its float32 [V, 3, size, size] views on `device`; the frames of
    equal size across all robots go through one call."""
    by_size: Dict[Tuple[int, int], List[Tuple[int, int]]] = {}
    for r, frames in enumerate(robots):
        for v, f in enumerate(frames):
            by_size.setdefault((int(f.shape[-2]), int(f.shape[-1])), []).append((r, v))
    out = [torch.empty(len(frames), 3, size, size, dtype=torch.float32, device=device) for frames in robots]
    for slots in by_size.values():
        pixels = frames_to_model_pixels([robots[r][v].to(device) for r, v in slots], size)
        for (r, v), p in zip(slots, pixels):
            out[r][v] = p
    return out


def check_frames(frames, max_views: int) -> str | None:
    """Why `frames` are not 1..max_views uint8 [3, h, w] tensors, or None."""
    if not 1 <= len(frames) <= max_views:
        return f"expected 1..{max_views} camera frames, got {len(frames)}"
    for i, f in enumerate(frames):
        if not isinstance(f, torch.Tensor) or f.dtype != torch.uint8 or f.dim() != 3 or f.shape[0] != 3 \
                or f.shape[1] < 1 or f.shape[2] < 1:
            what = f"{f.dtype} {list(f.shape)}" if isinstance(f, torch.Tensor) else type(f).__name__
            return f"frame {i}: expected uint8 [3, H, W] RGB, got {what}"
    return None
