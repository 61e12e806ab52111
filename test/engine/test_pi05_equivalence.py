"""pi0.5: each fast-path rewrite against the plain reference path (PlainPi05), fp32, and the
properties the model must have (batching never changes a robot's chunk; the state is not read
by the expert). LeRobot equivalence is in test_lerobot_pi05_equivalence.py.

Tolerance: max abs error <= 2e-5 on activations of order 1 (measured ~5e-7). Random adaRMS
dense weights make every tabulated modulation matter.
"""
import dataclasses

import pytest
import torch
import torch.nn.functional as F

from physai_ros.engine import Pi0Config, Pi0Engine
from physai_ros.engine.checkpoint.params import param_shapes, random_weights
from physai_ros.engine.pi05.fast import FastPi05
from physai_ros.engine.pi05.modeling import PlainPi05, ada_rms_norm, time_condition

from engine_helpers import make_input, mixed_batch

TOL = 2e-5


def pi05(name="tiny", **kw) -> Pi0Config:
    return Pi0Config.preset(name, policy="pi05", time_schedule="multiply", rope_style="multiply", **kw)


def _pair(name="tiny", seed=0):
    cfg = pi05(name)
    w = random_weights(cfg, seed)
    return cfg, PlainPi05(cfg, dict(w)), FastPi05(cfg, dict(w))


@pytest.fixture(scope="module", params=["tiny", "tiny_mqa"])
def models(request):
    return _pair(request.param)


def test_pi05_weights_have_adarms_and_no_state_projection():
    shapes = param_shapes(pi05())
    e = pi05().expert.width
    assert "state_proj.weight" not in shapes and "action_time_in.weight" not in shapes
    assert shapes["expert.layers.0.ada_attn.weight"] == (3 * e, e)
    assert shapes["time_in.weight"] == (e, e)
    assert not any(n.endswith("ln_attn") for n in shapes if n.startswith("expert."))
    assert any(n.endswith("ln_attn") for n in shapes if n.startswith("vlm."))  # the VLM keeps Gemma norms


def test_ada_rms_norm_hand_checked():
    # x = [3, 4]: mean(x^2) = 12.5, rsqrt -> 1/sqrt(12.5 + eps); dense = identity-like picks.
    x = torch.tensor([[[3.0, 4.0]]])
    cond = torch.tensor([[0.5, -1.0]])
    w = torch.zeros(6, 2)
    w[0, 0] = 1.0  # scale_0 = 0.5
    w[3, 1] = 2.0  # shift_1 = -2
    b = torch.zeros(6)
    b[4:] = 1.0  # gate = [1, 1]
    out, gate = ada_rms_norm(x, cond, w, b, eps=0.0)
    r = 1 / 12.5**0.5
    torch.testing.assert_close(out, torch.tensor([[[3 * r * 1.5, 4 * r - 2.0]]]))
    torch.testing.assert_close(gate, torch.tensor([[[1.0, 1.0]]]))


def test_prefix_is_pi0s(models):
    cfg, plain, fast = models
    b = mixed_batch(cfg, torch.Generator().manual_seed(4))
    ref = plain.prefix(b.images, b.image_masks, b.tokens, b.token_mask)
    got = fast.prefix(b.images, b.image_masks, b.tokens, b.token_mask)
    valid = ref.pad[:, :, None, None]
    for kr, kg in zip(ref.keys, got.keys):
        torch.testing.assert_close(kg * valid, kr * valid, rtol=0, atol=TOL)


def test_tabulated_per_step_conditioning(models):
    """cond(t_s) and each adaRMS's (1 + scale, shift, gate) tabulated at load equal what the
    plain path computes per call."""
    cfg, plain, fast = models
    for s, t in enumerate(cfg.step_times()):
        cond = time_condition(plain.w, cfg, torch.tensor([t], dtype=torch.float32))
        for i, layer in enumerate(fast.expert_layers):
            for norm, name in ((layer.attn_norm, "ada_attn"), (layer.mlp_norm, "ada_mlp")):
                p = f"expert.layers.{i}.{name}."
                scale, shift, gate = F.linear(cond, plain.w[p + "weight"], plain.w[p + "bias"]).chunk(3, -1)
                torch.testing.assert_close(norm.scale1p[s], (1 + scale)[0], rtol=0, atol=TOL)
                torch.testing.assert_close(norm.shift[s], shift[0], rtol=0, atol=TOL)
                torch.testing.assert_close(norm.gate[s], gate[0], rtol=0, atol=TOL)


def test_final_norm_shift_and_dt_folded_into_action_out(models):
    cfg, plain, fast = models
    gen = torch.Generator().manual_seed(5)
    h = torch.randn(2, cfg.chunk_size, cfg.expert.width, generator=gen)
    for s, t in enumerate(cfg.step_times()):
        cond = time_condition(plain.w, cfg, torch.full((2,), t, dtype=torch.float32))
        n, _ = ada_rms_norm(h, cond, plain.w["expert.ada_norm.weight"], plain.w["expert.ada_norm.bias"], cfg.rms_eps)
        ref = cfg.dt * F.linear(n, plain.w["action_out.weight"], plain.w["action_out.bias"])
        rs = torch.rsqrt(h.pow(2).mean(-1) + cfg.rms_eps)
        got = F.linear(h * fast.final_scale1p[s], fast.out_w) * rs[..., None] + fast.out_b_table[s]
        torch.testing.assert_close(got, ref, rtol=0, atol=TOL)


def test_denoise_fused_static_buffers(models):
    cfg, plain, fast = models
    b = mixed_batch(cfg, torch.Generator().manual_seed(6))
    cache = plain.prefix(b.images, b.image_masks, b.tokens, b.token_mask)
    a_ref, u_ref = plain.denoise(cache, b.state, b.noise)
    a_got, u_got = fast.denoise(cache, b.state, b.noise)  # same cache: isolates the expert rewrites
    assert a_ref.abs().max() > 0.5
    torch.testing.assert_close(u_got, u_ref, rtol=0, atol=TOL)
    torch.testing.assert_close(a_got, a_ref, rtol=0, atol=TOL)


def test_whole_engine_fast_equals_plain_batched_equals_alone_and_consumes_weights():
    cfg = pi05()
    w = random_weights(cfg, 7)
    gen = torch.Generator().manual_seed(8)
    batch = [make_input(cfg, 2, 7, gen), make_input(cfg, 1, 3, gen), make_input(cfg, 3, 12, gen, masked_views=[0])]
    plain_engine = Pi0Engine(cfg, {k: v.clone() for k, v in w.items()}, fast=False)
    plain = plain_engine.infer(batch)
    consumed = {k: v.clone() for k, v in w.items()}
    fast = Pi0Engine(cfg, consumed, fast=True).infer(batch)
    assert consumed == {}
    for i, (p, f) in enumerate(zip(plain, fast)):
        torch.testing.assert_close(f.actions, p.actions, rtol=0, atol=TOL)
        alone = plain_engine.infer([batch[i]])[0]
        torch.testing.assert_close(alone.actions, p.actions, rtol=0, atol=TOL)


def test_state_is_not_read_by_the_expert():
    """pi0.5 carries the state in the prompt: the state vector handed to the engine (kept for
    one interface) cannot move the chunk."""
    cfg = pi05()
    eng = Pi0Engine(cfg, random_weights(cfg, 9))
    gen = torch.Generator().manual_seed(10)
    inp = make_input(cfg, 1, 6, gen)
    a = eng.infer([inp])[0].actions
    inp.state = inp.state + 5.0
    assert torch.equal(eng.infer([inp])[0].actions, a)


def test_pi0_and_pi05_configs_refuse_the_wrong_class():
    with pytest.raises(ValueError, match="pi05"):
        PlainPi05(Pi0Config.preset("tiny"), {})
    with pytest.raises(ValueError, match="policy"):
        Pi0Config.preset("tiny", policy="pi1").validate()


@pytest.mark.slow
def test_pi05_fast_path_through_triton_kernels_matches_torch_backend():
    from physai_ros.kernels import ops

    base = pi05()
    cfg = dataclasses.replace(base, chunk_size=4, num_steps=2, vlm=dataclasses.replace(base.vlm, depth=2),
                              expert=dataclasses.replace(base.expert, depth=2),
                              vision=dataclasses.replace(base.vision, depth=1, image_size=28))
    w = random_weights(cfg, 13)
    gen = torch.Generator().manual_seed(14)
    batch = [make_input(cfg, 1, 3, gen), make_input(cfg, 2, 5, gen)]
    before = ops.counters()
    ref = Pi0Engine(cfg, {k: v.clone() for k, v in w.items()}).infer(batch)
    got = Pi0Engine(cfg, {k: v.clone() for k, v in w.items()}, backend="triton").infer(batch)
    assert {k: v for k, v in ops.counters().items() if k.startswith("fallback")} == \
        {k: v for k, v in before.items() if k.startswith("fallback")}
    for r, g in zip(ref, got):
        torch.testing.assert_close(g.actions, r.actions, rtol=0, atol=1e-4)
