"""The rewrites of the fast path's CPU torch backend, each against the plain path
(fp32, atol 2e-5): the layers' GEMMs on oneDNN weights prepacked at load (kernels/onednn.py,
with bias, GELU / SiLU, residual add and the gated product fused in the epilogue), and
attention without a mask when no key is padded. Both the packed and the unpacked fast path are
checked, on batches with padding (masked attention) and without (unmasked), pi0 and pi0.5.
"""
import pytest
import torch
import torch.nn.functional as F

from physai_ros.engine import Pi0Config
from physai_ros.engine.batching import collate
from physai_ros.engine.checkpoint.params import random_weights
from physai_ros.engine.pi0.fast import FastPi0
from physai_ros.engine.pi0.modeling import PlainPi0
from physai_ros.engine.pi05.fast import FastPi05
from physai_ros.engine.pi05.modeling import PlainPi05
from physai_ros.kernels import onednn

from engine_helpers import make_input, mixed_batch

TOL = 2e-5

needs_onednn = pytest.mark.skipif(not onednn.supported(torch.device("cpu"), torch.float32),
                                  reason="this torch build has no oneDNN")


def _cfg(name: str, policy: str) -> Pi0Config:
    if policy == "pi05":
        return Pi0Config.preset(name, policy="pi05", time_schedule="multiply", rope_style="multiply")
    return Pi0Config.preset(name)


def _models(name: str, policy: str, seed: int = 0):
    cfg = _cfg(name, policy)
    w = random_weights(cfg, seed)
    plain_cls, fast_cls = (PlainPi05, FastPi05) if policy == "pi05" else (PlainPi0, FastPi0)
    return cfg, plain_cls(cfg, dict(w)), fast_cls(cfg, dict(w), pack=True), fast_cls(cfg, dict(w), pack=False)


def _full_batch(cfg: Pi0Config, gen: torch.Generator):
    """Two robots, same views and prompt length, nothing padded: the unmasked attention path."""
    inputs = [make_input(cfg, 2, 7, gen), make_input(cfg, 2, 7, gen)]
    return collate(inputs, cfg, "cpu", torch.float32)


@needs_onednn
@pytest.mark.parametrize("act", [None, "gelu_tanh", "silu"])
def test_onednn_linear_epilogues_match_torch(act):
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(2, 7, 48, generator=gen)
    w = torch.randn(40, 48, generator=gen) / 7
    b = torch.randn(40, generator=gen)
    p = onednn.pack(w)
    ref = F.linear(x, w, b)
    want = {None: ref, "gelu_tanh": F.gelu(ref, approximate="tanh"), "silu": F.silu(ref)}[act]
    torch.testing.assert_close(onednn.linear(x, p, b, activation=act), want, rtol=0, atol=1e-5)
    other = torch.randn(2, 7, 40, generator=gen)
    torch.testing.assert_close(onednn.linear(x, p, residual=other), F.linear(x, w) + other, rtol=0, atol=1e-5)
    torch.testing.assert_close(onednn.linear(x, p, mul=other), F.linear(x, w) * other, rtol=0, atol=1e-5)
    xs = x[:, ::2]  # strided rows
    torch.testing.assert_close(onednn.linear(xs, p, b), F.linear(xs, w, b), rtol=0, atol=1e-5)
    with pytest.raises(ValueError):
        onednn.linear(x, p, activation="silu", residual=other)


@needs_onednn
def test_packing_keeps_the_expert_dense_and_drops_the_prefix_towers():
    cfg, _, packed, unpacked = _models("tiny", "pi0")
    assert packed.packed and not unpacked.packed
    assert all(L.packed is not None and L.w_qkv is None for L in packed.vision_layers)
    assert all(L.packed is not None and L.w_qkv is None for L in packed.vlm_layers)
    assert packed.vlm_layers[-1].kv_only and set(packed.vlm_layers[-1].packed) == {"qkv"}
    assert all(L.packed is not None and L.w_qkv is not None for L in packed.expert_layers)
    assert all(L.packed is None for L in unpacked.vision_layers + unpacked.vlm_layers + unpacked.expert_layers)
    with pytest.raises(ValueError):
        FastPi0(cfg, random_weights(cfg, 0), dtype=torch.bfloat16, pack=True)


@needs_onednn
@pytest.mark.parametrize("policy", ["pi0", "pi05"])
@pytest.mark.parametrize("name", ["tiny", "tiny_mqa"])
@pytest.mark.parametrize("batch", ["padded", "full"])
def test_packed_and_unpacked_fast_paths_match_plain(policy, name, batch):
    cfg, plain, packed, unpacked = _models(name, policy)
    gen = torch.Generator().manual_seed(2)
    b = mixed_batch(cfg, gen) if batch == "padded" else _full_batch(cfg, gen)
    assert bool(b.token_mask.all() and b.image_masks.all()) == (batch == "full")
    args = (b.images, b.image_masks, b.tokens, b.token_mask)
    ref = plain.prefix(*args)
    valid = ref.pad[:, :, None, None]
    a_ref, u_ref = plain.denoise(ref, b.state, b.noise)
    for fast in (packed, unpacked):
        got = fast.prefix(*args)
        for kr, kg, vr, vg in zip(ref.keys, got.keys, ref.values, got.values):
            torch.testing.assert_close(kg * valid, kr * valid, rtol=0, atol=TOL)
            torch.testing.assert_close(vg * valid, vr * valid, rtol=0, atol=TOL)
        a_got, u_got = fast.denoise(ref, b.state, b.noise)  # the plain cache: the expert alone
        torch.testing.assert_close(u_got, u_ref, rtol=0, atol=TOL)
        torch.testing.assert_close(a_got, a_ref, rtol=0, atol=TOL)
        a_own, _ = fast.denoise(got, b.state, b.noise)  # and end to end
        torch.testing.assert_close(a_own, a_ref, rtol=0, atol=TOL)


@pytest.mark.parametrize("pack", [False, pytest.param(True, marks=needs_onednn)])
@pytest.mark.parametrize("kv", [1, 2])
def test_unmasked_attention_equals_all_true_mask(kv, pack):
    """Grouped attention (and with one KV head on a packed model, the oneDNN scores product)
    with mask None, an all-True mask and a padded mask, against the reference einsum."""
    cfg = Pi0Config.preset("tiny")
    fast = FastPi0(cfg, random_weights(cfg, 0), pack=pack)
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(2, 5, 4, 16, generator=gen)
    k = torch.randn(2, 9, kv, 16, generator=gen)
    v = torch.randn(2, 9, kv, 16, generator=gen)
    everything = torch.ones(2, 5, 9, dtype=torch.bool)
    torch.testing.assert_close(fast._attention(q, k, v, None), fast._attention(q, k, v, everything), rtol=0, atol=0)
    strided = torch.cat([k, v], dim=2)  # K / V views with a row stride, as the prefix's V is
    torch.testing.assert_close(fast._attention(q, strided[:, :, :kv], strided[:, :, kv:], None),
                               fast._attention(q, k, v, None), rtol=0, atol=1e-6)
    # and the grouped layout against the reference op (query head h reads KV head h // (H / KV))
    some = everything.clone()
    some[1, :, 6:] = False
    want = torch.einsum("bhqk,bkhd->bqhd", torch.softmax(torch.einsum(
        "bqhd,bkhd->bhqk", q, k.repeat_interleave(4 // kv, 2)).masked_fill(~some[:, None], float("-inf")), -1),
        v.repeat_interleave(4 // kv, 2))
    torch.testing.assert_close(fast._attention(q, k, v, some), want, rtol=0, atol=1e-5)
