"""openpi's observations into the fleet's types: a layout's (protocol.openpi_layouts) cameras
feed the robot's views in order (fleet.yaml's robot lists as many cameras as it uses); its state
keys are concatenated. Images must be uint8 (openpi's clients convert with
image_tools.convert_to_uint8), HxWx3 or 3xHxW, or HxW for a mono camera.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from physai_ros.protocol.observation import ImageData
from physai_ros.protocol.openpi_layouts import Path


class LayoutError(ValueError):
    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def _get(obs: Mapping[str, Any], path: Path) -> Any:
    node: Any = obs
    for key in path:
        if not isinstance(node, Mapping) or key not in node:
            raise LayoutError("missing_key", f"no {'/'.join(path)!r} in the observation")
        node = node[key]
    return node


def image_from(obs: Mapping[str, Any], path: Path) -> ImageData:
    """One camera as an rgb8 (or mono8) image, channels last; no copy when already so."""
    arr = _get(obs, path)
    name = "/".join(path)
    if not isinstance(arr, np.ndarray) or arr.dtype != np.uint8:
        raise LayoutError("bad_image", f"{name}: expected a uint8 array, got "
                          f"{arr.dtype if isinstance(arr, np.ndarray) else type(arr).__name__}")
    if arr.ndim == 3 and arr.shape[0] == 3 and arr.shape[2] != 3:
        arr = arr.transpose(1, 2, 0)  # 3xHxW (aloha) -> HxWx3
    if arr.ndim == 2:
        arr, encoding = arr[:, :, None], "mono8"
    elif arr.ndim == 3 and arr.shape[2] == 3:
        encoding = "rgb8"
    else:
        raise LayoutError("bad_image", f"{name}: expected HxWx3, 3xHxW or HxW, got shape {list(arr.shape)}")
    arr = np.ascontiguousarray(arr)
    h, w, c = arr.shape
    return ImageData(h, w, encoding, w * c, arr.reshape(-1))


def state_from(obs: Mapping[str, Any], paths: tuple[Path, ...], dim: int) -> np.ndarray:
    parts = []
    for path in paths:
        v = _get(obs, path)
        try:
            parts.append(np.asarray(v, dtype=np.float64).reshape(-1))
        except (TypeError, ValueError):
            raise LayoutError("bad_state", f"{'/'.join(path)}: not numbers") from None
    state = np.concatenate(parts) if parts else np.zeros(0)
    if state.shape != (dim,):
        raise LayoutError("bad_state", f"{state.shape[0]} state values, the robot has {dim} joints")
    if not np.all(np.isfinite(state)):
        raise LayoutError("bad_state", "the state has NaN or inf")
    return state.astype(np.float32)


def prompt_from(obs: Mapping[str, Any], path: Path, default: str, max_chars: int = 1000) -> str:
    """The client's prompt, or the task's when it sends none."""
    try:
        node = _get(obs, path)
    except LayoutError:  # none sent
        return default
    if not isinstance(node, str):
        raise LayoutError("bad_prompt", f"prompt: expected a string, got {type(node).__name__}")
    if len(node) > max_chars or any(ord(ch) < 32 and ch not in "\t\n" for ch in node):
        raise LayoutError("bad_prompt", f"prompt: over {max_chars} characters or control characters")
    return node or default
