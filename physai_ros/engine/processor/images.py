"""Observation -> model input as a pi0 checkpoint expects it.

Our checkpoints' images are letterboxed to the model's square size (aspect ratio kept, black
padding) because stretching would distort the geometry the policy was trained on; pixels stay
uint8 (the engine scales them to [-1, 1] when it collates a batch). A LeRobot checkpoint's frames
go to the engine as they are (engine.camera_frames resizes them as LeRobot does).
State and actions: engine/processor/normalizer.py.
"""
from __future__ import annotations

import cv2
import numpy as np

from physai_ros.protocol.observation import ENCODINGS


def image_to_rgb(data: np.ndarray, encoding: str) -> np.ndarray:
    """HxWxC uint8 view in `encoding` -> HxWx3 RGB (a view when already rgb8)."""
    if encoding == "rgb8":
        return data
    if encoding == "bgr8":
        return data[..., ::-1]
    if encoding == "rgba8":
        return data[..., :3]
    if encoding == "bgra8":
        return data[..., 2::-1]
    if encoding == "mono8":
        return np.repeat(data.reshape(data.shape[0], data.shape[1], 1), 3, axis=2)
    raise ValueError(f"unsupported image encoding {encoding!r}; expected one of {sorted(ENCODINGS)}")


def letterbox(rgb: np.ndarray, size: int) -> np.ndarray:
    """Resize keeping the aspect ratio, pad to size x size with black, centred (the extra pixel
    of an odd padding at the bottom/right): the long side becomes `size` (rounded), area
    interpolation when shrinking (no aliasing), bilinear when growing. Our checkpoints were
    trained on frames made this way; a LeRobot checkpoint's frames are resized by the engine as
    LeRobot does (engine.camera_frames)."""
    h, w = rgb.shape[:2]
    if h == size and w == size:
        return rgb
    scale = size / max(h, w)
    nh, nw = max(1, round(h * scale)), max(1, round(w * scale))
    interp = cv2.INTER_AREA if scale < 1 else cv2.INTER_LINEAR
    resized = cv2.resize(np.ascontiguousarray(rgb), (nw, nh), interpolation=interp)
    out = np.zeros((size, size, 3), dtype=np.uint8)
    top, left = (size - nh) // 2, (size - nw) // 2
    out[top:top + nh, left:left + nw] = resized
    return out


def to_model_pixels(rgb: np.ndarray, size: int, out: np.ndarray | None = None) -> np.ndarray:
    """HxWx3 uint8 RGB -> 3 x size x size uint8, letterboxed (written into `out` when given).

    Pixels stay bytes until the engine's collation (engine.batching.model_pixels) scales them:
    4x less to copy here and to send to a remote engine worker."""
    boxed = letterbox(rgb, size)
    if out is None:
        out = np.empty((3, size, size), dtype=np.uint8)
    out[...] = boxed.transpose(2, 0, 1)
    return out
