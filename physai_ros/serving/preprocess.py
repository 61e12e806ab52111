"""Observation -> model input as a pi0 checkpoint expects it.

Images are letterboxed to the model's square size (aspect ratio kept, black padding) because
stretching would distort the geometry the policy was trained on; pixel values go to [-1, 1].
State and actions are normalised with the checkpoint's mean/std when it ships statistics, and
passed through unchanged otherwise (the built-in random-weight model has none).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

# Channels each supported encoding has, and how to turn it into RGB.
ENCODINGS = {"rgb8": 3, "bgr8": 3, "rgba8": 4, "bgra8": 4, "mono8": 1}


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
    """Resize keeping the aspect ratio so the long side is `size`, pad to size x size, centred."""
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


def to_model_image(rgb: np.ndarray, size: int, out: np.ndarray | None = None) -> np.ndarray:
    """HxWx3 uint8 RGB -> 3 x size x size float32 in [-1, 1] (written into `out` when given)."""
    boxed = letterbox(rgb, size)
    if out is None:
        out = np.empty((3, size, size), dtype=np.float32)
    np.multiply(boxed.transpose(2, 0, 1), np.float32(2.0 / 255.0), out=out, casting="unsafe")
    out -= 1.0
    return out


@dataclass(frozen=True)
class Stats:
    mean: np.ndarray
    std: np.ndarray


class Normalizer:
    """State/action (un)normalisation with checkpoint statistics; identity without them."""

    EPS = 1e-8

    def __init__(self, state: Stats | None = None, action: Stats | None = None):
        self.state = state
        self.action = action

    @classmethod
    def from_file(cls, path: str | Path | None) -> "Normalizer":
        """Reads `{"state": {"mean": [...], "std": [...]}, "action": {...}}` if the file exists."""
        if path is None or not Path(path).is_file():
            return cls()
        doc = json.loads(Path(path).read_text())

        def stats(key: str) -> Stats | None:
            d = doc.get(key)
            if d is None:
                return None
            mean = np.asarray(d["mean"], dtype=np.float32)
            std = np.asarray(d["std"], dtype=np.float32)
            if mean.shape != std.shape or mean.ndim != 1:
                raise ValueError(f"{path}: {key}.mean and {key}.std must be equal-length lists")
            return Stats(mean, std)

        return cls(stats("state"), stats("action"))

    def normalize_state(self, state: np.ndarray, pad_to: int) -> np.ndarray:
        """Normalise then zero-pad to the model's state width."""
        if state.shape[0] > pad_to:
            raise ValueError(f"state has {state.shape[0]} values, model takes at most {pad_to}")
        out = np.zeros(pad_to, dtype=np.float32)
        s = state.astype(np.float32, copy=False)
        if self.state is not None:
            n = s.shape[0]
            s = (s - self.state.mean[:n]) / (self.state.std[:n] + self.EPS)
        out[: s.shape[0]] = s
        return out

    def unnormalize_actions(self, actions: np.ndarray, action_dim: int) -> np.ndarray:
        """[T, max_action_dim] normalised -> [T, action_dim] in robot units."""
        a = np.ascontiguousarray(actions[:, :action_dim], dtype=np.float32)
        if self.action is not None:
            a = a * (self.action.std[:action_dim] + self.EPS) + self.action.mean[:action_dim]
        return a
