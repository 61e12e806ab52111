"""The whole tiny pi0 engine (B1's fast path) with backend="triton" under the interpreter
matches backend="torch": every GEMM, gated FFN, QKV+RoPE, RMS scale and attention of the
vision tower, the VLM prefix and the action-expert steps runs through the Triton kernels.
Three denoising steps instead of ten keep the interpreter time down; each step runs the same
kernels."""
import torch

from physai_ros.engine import EngineInput, Pi0Config, Pi0Engine
from physai_ros.kernels import ops

CFG = Pi0Config.preset("tiny", num_steps=3)


def _robot(seed, views, valid_tokens):
    g = torch.Generator().manual_seed(seed)
    s = CFG.vision.image_size
    token_mask = torch.arange(6) < valid_tokens  # padded prompt
    return EngineInput(
        images=torch.rand(views, 3, s, s, generator=g) * 2 - 1,
        image_masks=torch.tensor([True] + [False] * (views - 1)),  # a missing camera too
        tokens=torch.randint(0, CFG.vocab_size, (6,), generator=g),
        token_mask=token_mask,
        state=torch.randn(CFG.max_state_dim, generator=g),
        noise=torch.randn(CFG.chunk_size, CFG.max_action_dim, generator=g))


def _actions(backend, dtype, batch):
    engine = Pi0Engine(CFG, backend=backend, seed=0, dtype=dtype)
    return [o.actions.float() for o in engine.infer(batch)]


def test_tiny_engine_triton_matches_torch_fp32():
    batch = [_robot(1, 2, 4), _robot(2, 2, 6)]
    calls_before = ops.counters()
    want = _actions("torch", torch.float32, batch)
    got = _actions("triton", torch.float32, batch)
    for a, b in zip(got, want):
        assert a.shape == (CFG.chunk_size, CFG.max_action_dim)
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    assert ops.counters() == calls_before  # nothing rejected, nothing fell back


def test_tiny_engine_triton_bf16_as_accurate_as_torch_bf16():
    batch = [_robot(3, 2, 5)]
    exact = _actions("torch", torch.float32, batch)[0]
    torch_bf16 = _actions("torch", torch.bfloat16, batch)[0]
    triton_bf16 = _actions("triton", torch.bfloat16, batch)[0]
    err_torch = float((torch_bf16 - exact).abs().max())
    err_triton = float((triton_bf16 - exact).abs().max())
    # The kernels keep fp32 accumulators and epilogues, so they should not be less accurate
    # than torch's bf16 path; both stay near the fp32 chunk.
    assert err_triton <= 2 * err_torch + 1e-2, (err_triton, err_torch)
    torch.testing.assert_close(triton_bf16, exact, rtol=2e-2, atol=6e-2)
