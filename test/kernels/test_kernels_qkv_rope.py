"""QKV projection with RoPE in the epilogue vs the torch reference (rotate-half, Gemma/pi0)."""
import math

import pytest
import torch

from physai_ros.kernels import ops
from physai_ros.kernels.qkv_rope import qkv_rope_2d
from physai_ros.kernels.tiles import TileConfig
from kernel_ref import DTYPES, assert_close, rand


def _rope_tables(b, seq, d, offset=0):
    # pi0/Gemma: inv_freq over half the dims, angles duplicated across both halves.
    inv = 1.0 / (10000 ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    pos = torch.arange(offset, offset + seq, dtype=torch.float32)[None, :].expand(b, seq)
    ang = pos[..., None] * inv
    emb = torch.cat([ang, ang], dim=-1)
    return emb.cos(), emb.sin()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("heads", [(4, 1), (3, 3)], ids=["gqa", "mha"])
def test_qkv_rope(dtype, heads):
    h, kvh = heads
    d, k_in = 24, 70  # half = 12: not a power of two, exercises the column mask
    g = torch.Generator().manual_seed(0)
    x = rand(2, 13, k_in, dtype=dtype, gen=g)
    w = rand((h + 2 * kvh) * d, k_in, dtype=dtype, scale=k_in ** -0.5, gen=g)
    cos, sin = _rope_tables(2, 13, d, offset=5)
    s = ops.rms_row_scale(x)
    got = ops.qkv_rope(x, w, cos, sin, h, kvh, d, row_scale=s, backend="triton")
    want = ops.qkv_rope(x, w, cos, sin, h, kvh, d, row_scale=s)
    for name, a, e in zip("qkv", got, want):
        assert a.shape == e.shape, name
        assert_close(a, e, dtype)
    assert got[0].shape == (2, 13, h, d) and got[1].shape == (2, 13, kvh, d)


def test_rope_is_a_rotation():
    # Independent of the reference: RoPE preserves each (i, i + D/2) pair's norm, and with
    # cos=1, sin=0 the op is the plain projection.
    d, h, kvh = 16, 2, 1
    g = torch.Generator().manual_seed(1)
    x = rand(1, 7, 32, gen=g)
    w = rand((h + 2 * kvh) * d, 32, gen=g)
    cos, sin = _rope_tables(1, 7, d)
    q, k, v = ops.qkv_rope(x, w, cos, sin, h, kvh, d, backend="triton")
    plain = (x @ w.t()).view(1, 7, h + 2 * kvh, d)
    pair = lambda t: t[..., : d // 2] ** 2 + t[..., d // 2:] ** 2  # noqa: E731
    torch.testing.assert_close(pair(q), pair(plain[:, :, :h]), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(v, plain[:, :, h + kvh:], rtol=1e-5, atol=1e-5)
    ones, zeros = torch.ones(1, 7, d), torch.zeros(1, 7, d)
    q0, k0, _ = ops.qkv_rope(x, w, ones, zeros, h, kvh, d, backend="triton")
    torch.testing.assert_close(k0, plain[:, :, h:h + kvh], rtol=1e-5, atol=1e-5)
    assert not math.isclose(float((q - q0).abs().max()), 0.0)


def test_qkv_rope_multi_tile_strided():
    d, h, kvh, k_in = 40, 2, 1, 48
    g = torch.Generator().manual_seed(2)
    x = rand(2, 9, 2 * k_in, gen=g)[..., ::2]
    w = rand((h + 2 * kvh) * d, k_in, gen=g, scale=k_in ** -0.5)
    cos, sin = _rope_tables(2, 9, d)
    want = ops.qkv_rope(x.contiguous(), w, cos, sin, h, kvh, d)
    out = qkv_rope_2d(x.reshape(-1, k_in), w, cos.reshape(-1, d), sin.reshape(-1, d),
                      h, kvh, d, None, config=TileConfig(16, 16, 16))
    out = out.view(2, 9, h + 2 * kvh, d)
    assert_close(out[:, :, :h], want[0], torch.float32)
    assert_close(out[:, :, h:h + kvh], want[1], torch.float32)
    assert_close(out[:, :, h + kvh:], want[2], torch.float32)
