"""openpi's msgpack-numpy wire read defensively (client.openpi.wire): what openpi's clients send
decodes to the same arrays, and every hostile shape of message is a counted WireError."""
import msgpack
import numpy as np
import pytest

from physai_ros.client.openpi.wire import WireError, WireLimits, decode, encode


def _array_map(data: bytes, dtype: str, shape) -> dict:
    # openpi_client.msgpack_numpy's layout for an ndarray
    return {b"__ndarray__": True, b"data": data, b"dtype": dtype, b"shape": shape}


def test_arrays_scalars_strings_and_nesting_round_trip():
    obs = {"observation/image": np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3),
           "observation/state": np.linspace(0, 1, 8).astype(np.float64), "prompt": "pick",
           "images": {"cam_high": np.ones((3, 4, 5), np.uint8)}, "step": np.int64(7)}
    out = decode(encode(obs))
    assert out["prompt"] == "pick" and out["step"] == 7 and isinstance(out["step"], np.int64)
    np.testing.assert_array_equal(out["observation/image"], obs["observation/image"])
    np.testing.assert_array_equal(out["observation/state"], obs["observation/state"])
    assert out["images"]["cam_high"].shape == (3, 4, 5)


def test_the_map_openpis_client_packs_decodes():
    raw = msgpack.packb({"state": _array_map(np.float32([1, 2]).tobytes(), "<f4", [2])})
    np.testing.assert_array_equal(decode(raw)["state"], [1.0, 2.0])


@pytest.mark.parametrize("message, reason", [
    (b"\xc1", "malformed"),  # never used in msgpack
    ("a text frame", "malformed"),
    (msgpack.packb([1, 2, 3]), "malformed"),  # not a map
    (msgpack.packb({"a": _array_map(b"x" * 8, "|O", [1])}), "bad_array"),  # object array: never built
    (msgpack.packb({"a": _array_map(b"x" * 8, "|V8", [1])}), "bad_array"),
    (msgpack.packb({"a": _array_map(b"x" * 4, "<U1", [1])}), "bad_array"),
    (msgpack.packb({"a": _array_map(b"x" * 3, "<f4", [1])}), "bad_array"),  # bytes do not fit the shape
    (msgpack.packb({"a": _array_map(b"", "<f4", [-1])}), "bad_array"),
    (msgpack.packb({"a": _array_map(b"", "<f4", [1] * 9)}), "bad_array"),
    (msgpack.packb({"a": _array_map(b"", "no such dtype", [0])}), "bad_array"),
    (msgpack.packb({"a": {b"__npgeneric__": True, b"data": b"xx", b"dtype": "<f4"}}), "bad_array"),
])
def test_hostile_messages_are_refused_with_a_reason(message, reason):
    with pytest.raises(WireError) as e:
        decode(message)
    assert e.value.reason == reason


def test_sizes_are_bounded_before_anything_is_built():
    limits = WireLimits(max_message_bytes=1000, max_items=10, max_array_bytes=100)
    with pytest.raises(WireError, match="too_large"):
        decode(b"\x80" + b"\x00" * 2000, limits)
    with pytest.raises(WireError, match="too_large"):
        decode(encode({"a": np.zeros(200, np.uint8)}), limits)
    with pytest.raises(WireError, match="malformed"):
        decode(msgpack.packb({str(i): i for i in range(11)}), limits)


def test_only_number_arrays_are_sent():
    with pytest.raises(TypeError):
        encode({"a": np.array(["x"], dtype=object)})
