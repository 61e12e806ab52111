"""GEMM kernels with fused epilogues vs the torch reference, through Triton's interpreter."""
import pytest
import torch

from physai_ros.kernels import ops
from physai_ros.kernels.gemm import gated_2d, linear_2d
from physai_ros.kernels.tiles import TileConfig
from kernel_ref import DTYPES, assert_close, rand

# Odd sizes: M, K and N are not multiples of any tile, so every mask edge is exercised.
M, K, N = 37, 70, 50


def _inputs(dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = rand(2, M, K, dtype=dtype, gen=g)
    w = rand(N, K, dtype=dtype, scale=K ** -0.5, gen=g)
    b = rand(N, dtype=dtype, gen=g)
    r = rand(2, M, N, dtype=dtype, gen=g)
    return x, w, b, r


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("activation", ops.ACTIVATIONS)
def test_linear_all_epilogues(dtype, activation):
    x, w, b, r = _inputs(dtype)
    s = ops.rms_row_scale(x)
    got = ops.linear(x, w, b, row_scale=s, activation=activation, residual=r, backend="triton")
    want = ops.linear(x, w, b, row_scale=s, activation=activation, residual=r)
    assert got.dtype == dtype and got.shape == want.shape
    assert_close(got, want, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_linear_without_epilogue_operands(dtype):
    x, w, _, _ = _inputs(dtype, seed=1)
    assert_close(ops.linear(x, w, backend="triton"), ops.linear(x, w), dtype)


def test_linear_strided_inputs():
    # x as a transposed view, weight and residual sliced with a step: no unit inner strides.
    g = torch.Generator().manual_seed(2)
    xt = rand(K, M, gen=g).t()  # [M, K], strides (1, M)
    w_big = rand(N, 2 * K, gen=g, scale=K ** -0.5)
    w = w_big[:, ::2]  # non-unit inner stride
    r = rand(M, 2 * N, gen=g)[:, ::2]
    assert not xt.is_contiguous() and not w.is_contiguous() and not r.is_contiguous()
    got = ops.linear(xt, w, residual=r, activation="silu", backend="triton")
    want = ops.linear(xt.contiguous(), w.contiguous(), residual=r.contiguous(), activation="silu")
    assert_close(got, want, torch.float32)


SMALL = TileConfig(16, 16, 16)
SPLIT_ALL = TileConfig(16, 16, 16, split_k=3, split_from_n=0, tail_block_m=16, tail_block_n=16)
# Partial split-K (§4.3): columns [0, 32) in 16x16 tiles, the rest 32x32 split 2-way along K.
PARTIAL = TileConfig(16, 16, 32, split_k=2, split_from_n=32, tail_block_m=32, tail_block_n=32)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cfg", [SMALL, SPLIT_ALL, PARTIAL], ids=["multi_tile", "split_k",
                                                                  "partial_split_k"])
def test_linear_tile_configs(dtype, cfg):
    # Non-default configs put several tiles and K iterations (and split regions) on the shape;
    # the nonlinear activation proves the split partials are summed before the epilogue.
    x, w, b, r = _inputs(dtype, seed=3)
    x2, r2 = x[0], r[0]
    s = ops.rms_row_scale(x2)
    got = linear_2d(x2, w, b, s, "gelu_tanh", r2, config=cfg)
    want = ops.linear(x2, w, b, row_scale=s, activation="gelu_tanh", residual=r2)
    assert_close(got, want, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("activation", ["gelu_tanh", "silu"])
def test_gated_ffn(dtype, activation):
    g = torch.Generator().manual_seed(4)
    x = rand(3, 11, K, dtype=dtype, gen=g)
    wgu = rand(2 * 45, K, dtype=dtype, scale=K ** -0.5, gen=g)
    s = ops.rms_row_scale(x)
    got = ops.gated_ffn(x, wgu, row_scale=s, activation=activation, backend="triton")
    want = ops.gated_ffn(x, wgu, row_scale=s, activation=activation)
    assert got.shape == (3, 11, 45)
    assert_close(got, want, dtype)


def test_gated_ffn_multi_tile_strided():
    g = torch.Generator().manual_seed(5)
    x = rand(40, 2 * K, gen=g)[:, 1::2]
    wgu = rand(2 * 45, K, gen=g, scale=K ** -0.5)
    got = gated_2d(x, wgu, None, "gelu_tanh", config=SMALL)
    assert_close(got, ops.gated_ffn(x.contiguous(), wgu), torch.float32)


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_row_scale(dtype):
    g = torch.Generator().manual_seed(6)
    x = rand(5, 67, 300, dtype=dtype, gen=g, scale=3.0)[:, ::2]  # strided rows, K=150
    got = ops.rms_row_scale(x, eps=1e-6, backend="triton")
    assert got.dtype == torch.float32 and got.shape == (5, 34)
    torch.testing.assert_close(got, ops.rms_row_scale(x, eps=1e-6), rtol=1e-5, atol=1e-6)


def test_row_scale_matches_pi0_rmsnorm_fold():
    # The row scale after the GEMM with (1 + w)-folded weights equals RMSNorm(x) @ W^T.
    g = torch.Generator().manual_seed(7)
    x = rand(9, 64, gen=g, scale=2.0)
    norm_w = rand(64, gen=g, scale=0.1)
    w = rand(32, 64, gen=g, scale=0.125)
    normed = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * (1 + norm_w)
    folded = w * (1 + norm_w)[None, :]
    s = ops.rms_row_scale(x, backend="triton")
    got = ops.linear(x, folded, row_scale=s, backend="triton")
    torch.testing.assert_close(got, normed @ w.t(), rtol=1e-4, atol=1e-4)
