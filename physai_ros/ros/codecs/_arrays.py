"""Array fields of generated messages: written as array.array (kept as is by the generated
setters, where a list is checked element by element) and read without a copy."""
from __future__ import annotations

import array

import numpy as np

from physai_ros.ros.time_conv import time_from_sec


def f32_field(a) -> array.array:
    return array.array("f", np.ascontiguousarray(a, dtype=np.float32).tobytes())


def f32_values(field) -> np.ndarray:
    """A float32[] field as a float32 array (a view of the message's buffer when it is one)."""
    return np.frombuffer(field, np.float32) if isinstance(field, array.array) else np.asarray(field, np.float32)


def safe_time(t: float):
    """A stamp for a header: 0 for a time a ROS Time cannot hold (unset, NaN, negative)."""
    return time_from_sec(t if np.isfinite(t) and t > 0 else 0.0)
