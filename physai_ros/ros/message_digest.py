"""A canonical SHA-256 digest of a generated ROS message, the content that auth tags cover.

Not the CDR bytes: Fast DDS leaves alignment padding uninitialised, so the same message
serialises to different bytes on the sender and the receiver. The digest walks the fields in
declaration order instead, feeding each value in a fixed encoding (type tag, length, little-
endian values; arrays as their raw buffers, without a copy where the field already is one), so
both sides hash the same bytes for the same field values. Fields named in `skip` (the auth field
itself) are left out.
"""
from __future__ import annotations

import array
import hashlib
import struct

import numpy as np

_LEN = struct.Struct("<Q")
# The primitive types, little-endian. Scalars: struct packs a Python float into a 4-byte float as
# the wire does (rounding it), so the sender's unrounded value and the receiver's rounded one give
# the same bytes. Arrays: the same layout, as numpy dtypes.
_SCALAR = {name: struct.Struct(code) for name, code in {
    "boolean": "<?", "octet": "<B", "uint8": "<B", "char": "<B", "byte": "<B", "int8": "<b", "int16": "<h",
    "uint16": "<H", "int32": "<i", "uint32": "<I", "int64": "<q", "uint64": "<Q", "float": "<f",
    "double": "<d"}.items()}
_PRIMITIVE = {name: np.dtype(s.format) for name, s in _SCALAR.items()}


def _element_type(typ: str) -> tuple[str, bool]:
    """('double', True) for 'sequence<double>', 'sequence<double, 8>' or 'double[8]'."""
    if typ.startswith("sequence<"):
        return typ[len("sequence<"):-1].split(",")[0].strip(), True
    if typ.endswith("]") and "[" in typ:
        return typ[:typ.index("[")], True
    return typ, False


def _primitive_buffer(value, dtype: np.dtype):
    if isinstance(value, array.array) and np.dtype(value.typecode) == dtype:
        return memoryview(value).cast("B")  # the field's own buffer (native order: equal only if little-endian)
    if isinstance(value, (bytes, bytearray)) and dtype.itemsize == 1:
        return value
    return np.ascontiguousarray(np.asarray(value, dtype=dtype)).tobytes()


# Per message class: [(field name, element type, is_array, kind)], built once (walking the
# generated type description on every message was most of a small message's digest time).
_PLANS: dict = {}


def _plan(cls) -> list:
    plan = _PLANS.get(cls)
    if plan is None:
        plan = []
        for name, typ in cls.get_fields_and_field_types().items():
            elem, is_array = _element_type(typ)
            kind = "str" if elem.startswith(("string", "wstring")) else "prim" if elem in _PRIMITIVE else "msg"
            plan.append((name, elem, is_array, kind))
        _PLANS[cls] = plan
    return plan


def _feed_string(h, value: str) -> None:
    # ROS strings are C strings: a NUL ends them in transport, so it ends them here too.
    data = value.split("\0", 1)[0].encode("utf-8", "surrogatepass")
    h.update(b"s" + _LEN.pack(len(data)))
    h.update(data)


def _feed_message(h, msg, skip) -> None:
    h.update(b"{" + type(msg).__name__.encode())
    for name, elem, is_array, kind in _plan(type(msg)):
        if name in skip:
            continue
        value = getattr(msg, name)
        if kind == "str":
            if is_array:
                h.update(b"S" + _LEN.pack(len(value)))
                for v in value:
                    _feed_string(h, v)
            else:
                _feed_string(h, value)
        elif kind == "prim":
            dtype = _PRIMITIVE[elem]
            if is_array:
                buf = _primitive_buffer(value, dtype)
                h.update(b"a" + _LEN.pack(len(buf)))
                h.update(buf)
            else:
                try:
                    h.update(b"p" + _SCALAR[elem].pack(value))
                except (OverflowError, struct.error):  # e.g. 1e300 in a float: what the wire holds
                    h.update(b"p" + np.asarray(value).astype(dtype).tobytes())
        elif is_array:  # nested messages
            h.update(b"M" + _LEN.pack(len(value)))
            for m in value:
                _feed_message(h, m, ())
        else:
            _feed_message(h, value, ())
    h.update(b"}")


def digest(msg, skip: tuple[str, ...] = ("auth",)) -> bytes:
    h = hashlib.sha256()
    _feed_message(h, msg, skip)
    return h.digest()
