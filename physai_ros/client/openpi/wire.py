"""openpi's wire format, read defensively: msgpack with numpy arrays as maps
{"__ndarray__": true, "data": bytes, "dtype": str, "shape": [...]} (and numpy scalars as
{"__npgeneric__": true, "data": value, "dtype": str}), the convention of openpi_client.msgpack_numpy.

What a hostile peer could send is bounded here before anything is built: the message size, the
number and length of msgpack items, plain numeric dtypes only (no object, void, string or
datetime arrays), and an array's bytes must be exactly what its dtype and shape say. Nothing is
unpickled, ever. Every refusal is a WireError with a short reason that the gateway counts.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgpack
import numpy as np

# Numeric kinds only: bool, signed and unsigned integers, floats.
_ALLOWED_KINDS = frozenset("biuf")
MAX_DIMS = 8


class WireError(ValueError):
    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class WireLimits:
    max_message_bytes: int = 16 * 1024 * 1024
    max_items: int = 4096  # entries of any one msgpack map or array
    max_array_bytes: int = 8 * 1024 * 1024


def _dtype(text: Any) -> np.dtype:
    if not isinstance(text, (str, bytes)):
        raise WireError("bad_array", f"dtype {text!r} is not a string")
    try:
        dt = np.dtype(text.decode() if isinstance(text, bytes) else text)
    except (TypeError, ValueError) as e:
        raise WireError("bad_array", f"dtype {text!r}: {e}") from None
    if dt.kind not in _ALLOWED_KINDS or dt.fields is not None or dt.subdtype is not None:
        raise WireError("bad_array", f"dtype {dt.str} is not a plain number type")
    return dt


def _array(obj: dict, limits: WireLimits) -> Any:
    if obj.get(b"__ndarray__") is True:
        data, shape = obj.get(b"data"), obj.get(b"shape")
        dt = _dtype(obj.get(b"dtype"))
        if not isinstance(data, bytes) or not isinstance(shape, (list, tuple)):
            raise WireError("bad_array", "an array needs bytes `data` and a list `shape`")
        if len(shape) > MAX_DIMS or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape):
            raise WireError("bad_array", f"shape {list(shape)[:MAX_DIMS + 1]} is not a list of sizes")
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if count * dt.itemsize != len(data):
            raise WireError("bad_array", f"{len(data)} bytes for shape {list(shape)} of {dt.str}")
        if len(data) > limits.max_array_bytes:
            raise WireError("too_large", f"an array of {len(data)} bytes (limit {limits.max_array_bytes})")
        return np.frombuffer(data, dtype=dt).reshape(shape)
    if obj.get(b"__npgeneric__") is True:
        dt = _dtype(obj.get(b"dtype"))
        value = obj.get(b"data")
        if isinstance(value, (bytes, str, dict, list)) or value is None:
            raise WireError("bad_array", f"a numpy scalar of {dt.str} holds {type(value).__name__}")
        return dt.type(value)
    return obj


def decode(message: Any, limits: WireLimits = WireLimits()) -> dict:
    """A received websocket message -> the observation dict (str keys, numpy arrays)."""
    if isinstance(message, str):
        raise WireError("malformed", "a text frame; openpi sends msgpack in binary frames")
    if len(message) > limits.max_message_bytes:
        raise WireError("too_large", f"{len(message)} bytes (limit {limits.max_message_bytes})")
    n = limits.max_items
    try:
        out = msgpack.unpackb(message, object_hook=lambda o: _array(o, limits), raw=False, strict_map_key=False,
                              max_array_len=n, max_map_len=n, max_str_len=limits.max_message_bytes,
                              max_bin_len=limits.max_message_bytes, max_ext_len=0)
    except WireError:
        raise
    except (ValueError, TypeError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as e:
        raise WireError("malformed", f"not msgpack: {type(e).__name__}: {e}") from None
    if not isinstance(out, dict):
        raise WireError("malformed", f"expected a map, got {type(out).__name__}")
    return out


def _pack_default(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind not in _ALLOWED_KINDS:
            raise TypeError(f"cannot send a {obj.dtype} array")
        arr = np.ascontiguousarray(obj)
        return {b"__ndarray__": True, b"data": arr.tobytes(), b"dtype": arr.dtype.str, b"shape": list(arr.shape)}
    if isinstance(obj, np.generic):
        return {b"__npgeneric__": True, b"data": obj.item(), b"dtype": obj.dtype.str}
    raise TypeError(f"cannot send {type(obj).__name__}")


def encode(obj: dict) -> bytes:
    """An answer (or the metadata) as openpi's clients read it."""
    return msgpack.packb(obj, default=_pack_default, use_bin_type=True)
