"""Real-time chunking guidance (physai_ros/engine/rtc.py): the soft mask and weight against the
paper's formulas, one guided step computed by hand on a linear velocity field, and the guided
sampler of both model paths: the delay region follows the previous chunk, robots without a
guide get exactly the unguided chunk, and bad guides are refused by name."""
import dataclasses
import math

import pytest
import torch

from physai_ros.engine import EngineInputError, Pi0Config, Pi0Engine, random_weights
from physai_ros.engine.rtc import (SCHEDULES, RtcBatch, RtcGuide, guidance_weight, guided_velocity,
                                   prefix_weights)

from engine_helpers import make_input

CFG = Pi0Config.preset("tiny")  # chunk 8, 8 action dims, 10 steps


def _paper_weights(d, s, chunk, schedule):
    """Paper eq. 5 with H = chunk and the paper's execution horizon H - s (ours: s = where W hits 0)."""
    out = []
    for i in range(chunk):
        if schedule == "zeros":
            out.append(1.0 if i < d else 0.0)
        elif schedule == "ones":
            out.append(1.0 if i < s else 0.0)
        elif i < d:
            out.append(1.0)
        elif i >= s:
            out.append(0.0)
        else:
            c = (s - i) / (s - d + 1)
            out.append(c * (math.exp(c) - 1) / (math.e - 1) if schedule == "exp" else c)
    return out


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("d,s", [(2, 6), (0, 4), (3, 3), (0, 0), (8, 8), (1, 8)])
def test_soft_mask_matches_the_paper(schedule, d, s):
    got = prefix_weights(d, s, 8, schedule)
    assert got.dtype == torch.float32 and got.shape == (8,)
    torch.testing.assert_close(got, torch.tensor(_paper_weights(d, s, 8, schedule)), rtol=0, atol=1e-7)


def test_soft_mask_hand_values():
    assert prefix_weights(2, 6, 8, "linear").tolist() == pytest.approx([1, 1, 0.8, 0.6, 0.4, 0.2, 0, 0])
    exp = prefix_weights(2, 6, 8, "exp").tolist()
    assert exp[:2] == [1, 1] and exp[6:] == [0, 0]
    assert exp[2] == pytest.approx(0.8 * (math.exp(0.8) - 1) / (math.e - 1))
    assert all(a > b for a, b in zip(exp[1:6], exp[2:7]))  # strictly decreasing across the ramp
    with pytest.raises(ValueError, match="schedule"):
        prefix_weights(1, 2, 8, "cosine")
    with pytest.raises(ValueError, match="delay <= execution_horizon"):
        prefix_weights(3, 2, 8, "exp")


def test_guidance_weight_formula_and_clip():
    # ((1-t)^2 + t^2) / (t (1-t)), the paper's (1-tau)/(tau r^2) with tau = 1 - t.
    assert guidance_weight(0.5, 10.0) == pytest.approx(2.0)
    assert guidance_weight(0.8, 10.0) == pytest.approx(0.68 / 0.16)
    assert guidance_weight(0.8, 10.0) == pytest.approx(guidance_weight(0.2, 10.0))  # symmetric
    assert guidance_weight(0.9, 5.0) == 5.0  # 9.1 clipped to beta
    assert guidance_weight(1.0, 5.0) == 5.0 and guidance_weight(0.0, 3.0) == 3.0  # infinite ends


def test_one_guided_step_on_a_linear_field_by_hand():
    """v(x) = a x + b elementwise: x0_hat = (1 - t a) x - t b, J = (1 - t a) I, so
    v' = v - w(t) (1 - t a) W (Y - x0_hat), with every number below worked out by hand."""
    a, b, t = 0.5, 0.2, 0.5
    chunk, dims = 4, 2
    x = torch.ones(2, chunk, dims)  # robot 0 guided, robot 1 not
    y = torch.full((chunk, dims), 2.0)
    guide = RtcGuide(y, delay=1, execution_horizon=3, schedule="linear", max_guidance_weight=5.0, action_dim=1)
    calls = []

    def velocity(xs, rows):
        calls.append(rows.tolist())
        return a * xs + b

    base = a * x + b  # 0.7 everywhere
    v = guided_velocity(velocity, x, t, [guide, None], base=base)
    assert calls == [[0]]  # only the guided row runs the differentiable forward
    # x0_hat = 1 - 0.5 * 0.7 = 0.65; error 1.35; J^T = 0.75; w(0.5) = 2.
    # W over actions (linear, d=1, s=3): [1, 2/3, 1/3, 0]; action dim 1 is padding: not guided.
    want = torch.full((2, chunk, dims), 0.7)
    for i, w_i in enumerate([1.0, 2 / 3, 1 / 3, 0.0]):
        want[0, i, 0] = 0.7 - 2.0 * 0.75 * w_i * 1.35
    torch.testing.assert_close(v, want, rtol=0, atol=1e-6)
    assert float(want[0, 0, 0]) == pytest.approx(-1.325)
    assert torch.equal(v[1], base[1])


def test_identity_jacobian_step_by_hand_needs_no_differentiable_forward():
    """LeRobot's variant: J = I, so v' = v - w(t) W (Y - x0_hat) from the ordinary velocity alone."""
    a, b, t = 0.5, 0.2, 0.5
    x = torch.ones(2, 4, 2)
    guide = RtcGuide(torch.full((4, 2), 2.0), 1, 3, "linear", 5.0, action_dim=1, jacobian="identity")
    vjp = dataclasses.replace(guide, jacobian="vjp")
    base = a * x + b
    calls = []
    v = guided_velocity(lambda xs, rows: calls.append(1) or a * xs + b, x, t, [guide, vjp], base=base)
    for i, w_i in enumerate([1.0, 2 / 3, 1 / 3, 0.0]):
        assert float(v[0, i, 0]) == pytest.approx(0.7 - 2.0 * w_i * 1.35)          # identity row
        assert float(v[1, i, 0]) == pytest.approx(0.7 - 2.0 * 0.75 * w_i * 1.35)   # VJP row beside it
    assert calls == [1]  # one differentiable forward, for the batch's guided rows together
    calls.clear()
    only = guided_velocity(lambda xs, rows: calls.append(1) or a * xs + b, x, t, [guide, None], base=base)
    assert calls == [] and float(only[0, 0, 0]) == pytest.approx(0.7 - 2.0 * 1.35)


def test_guided_velocity_without_base_needs_every_row_guided():
    guide = RtcGuide(torch.zeros(4, 2), 1, 2)
    with pytest.raises(ValueError, match="base"):
        guided_velocity(lambda xs, rows: xs, torch.ones(2, 4, 2), 0.5, [guide, None])
    v = guided_velocity(lambda xs, rows: xs, torch.ones(2, 4, 2), 0.5, [guide, guide])
    assert v.shape == (2, 4, 2)
    assert RtcBatch.build([None, None]) is None


def _prev_chunk(engine, inp, seed):
    """A previous chunk the model itself could have produced: same observation, other noise."""
    other = dataclasses.replace(inp, noise=torch.randn(CFG.chunk_size, CFG.max_action_dim,
                                                       generator=torch.Generator().manual_seed(seed)))
    return engine.infer([other])[0].actions


@pytest.mark.parametrize("fast,jacobian", [(False, "vjp"), (True, "vjp"), (False, "identity"), (True, "identity")])
def test_delay_region_follows_the_previous_chunk(fast, jacobian):
    engine = Pi0Engine(CFG, fast=fast, seed=5)
    gen = torch.Generator().manual_seed(6)
    d, s = 3, 6
    worst_ratio = 0.0
    for k in range(3):
        inp = make_input(CFG, 2, 6, gen)
        prev = _prev_chunk(engine, inp, 100 + k)
        free = engine.infer([inp])[0].actions
        guided = engine.infer([dataclasses.replace(inp, rtc=RtcGuide(prev, d, s, jacobian=jacobian))])[0].actions
        err_free = (free[:d] - prev[:d]).abs().max()
        err_guided = (guided[:d] - prev[:d]).abs().max()
        worst_ratio = max(worst_ratio, float(err_guided / err_free))
        # Past the execution horizon the mask is 0: no pull towards the previous chunk there.
        assert (guided[s:] - prev[s:]).abs().max() > 2 * err_guided
    # The random tiny model's chunks differ by ~4 normalised units from noise to noise; guided,
    # the delay region stays within a tenth of that (measured: ~1/25).
    assert worst_ratio < 0.1, worst_ratio


def test_plain_and_fast_paths_guide_alike():
    w = random_weights(CFG, 7)
    gen = torch.Generator().manual_seed(8)
    inp = make_input(CFG, 1, 5, gen)
    guide = RtcGuide(torch.randn(CFG.chunk_size, CFG.max_action_dim, generator=gen), 2, 5, "exp", 8.0, action_dim=5)
    plain = Pi0Engine(CFG, {k: v.clone() for k, v in w.items()}, fast=False)
    fast = Pi0Engine(CFG, {k: v.clone() for k, v in w.items()}, fast=True)
    a = plain.infer([dataclasses.replace(inp, rtc=guide)])[0]
    b = fast.infer([dataclasses.replace(inp, rtc=guide)])[0]
    torch.testing.assert_close(b.actions, a.actions, rtol=0, atol=1e-4)
    torch.testing.assert_close(b.updates, a.updates, rtol=0, atol=1e-4)
    assert a.timings_ms["rtc_guided"] == 1


@pytest.mark.parametrize("jac1", ["vjp", "identity"])
@pytest.mark.parametrize("fast", [False, True])
def test_mixed_batch_leaves_unguided_robots_bit_identical(fast, jac1):
    engine = Pi0Engine(CFG, fast=fast, seed=9)
    gen = torch.Generator().manual_seed(10)
    batch = [make_input(CFG, 1, 4, gen), make_input(CFG, 3, 9, gen), make_input(CFG, 2, 6, gen, pad_to=8),
             make_input(CFG, 1, 3, gen)]
    g1 = RtcGuide(torch.randn(CFG.chunk_size, CFG.max_action_dim, generator=gen), 2, 6, "exp", 5.0, jacobian=jac1)
    g3 = RtcGuide(torch.randn(CFG.chunk_size, CFG.max_action_dim, generator=gen), 4, 8, "linear", 10.0, action_dim=3,
                  jacobian="identity")
    unguided = engine.infer(batch)
    with torch.inference_mode():  # as the serving path calls it
        mixed = engine.infer([batch[0], dataclasses.replace(batch[1], rtc=g1), batch[2],
                              dataclasses.replace(batch[3], rtc=g3)])
    for i in (0, 2):
        assert torch.equal(mixed[i].actions, unguided[i].actions)
        assert torch.equal(mixed[i].updates, unguided[i].updates)
    for i in (1, 3):
        assert not torch.allclose(mixed[i].actions, unguided[i].actions, atol=1e-3)
    # Each guided robot gets what it gets guided alone (two robots, two settings, one batch).
    alone = engine.infer([dataclasses.replace(batch[3], rtc=g3)])[0]
    torch.testing.assert_close(mixed[3].actions, alone.actions, rtol=0, atol=1e-5)
    # Padded action dims (beyond action_dim=3) are not pulled towards the leftover.
    free_pad = (unguided[3].actions[:4, 3:] - g3.leftover[:4, 3:]).abs().max()
    assert (mixed[3].actions[:4, :3] - g3.leftover[:4, :3]).abs().max() < 0.2 * free_pad


@pytest.mark.parametrize("fast", [False, True])
def test_no_guide_is_the_unguided_path(fast):
    engine = Pi0Engine(CFG, fast=fast, seed=11)
    gen = torch.Generator().manual_seed(12)
    batch = [make_input(CFG, 1, 4, gen), make_input(CFG, 2, 5, gen)]
    a = engine.infer(batch)
    b = engine.infer([dataclasses.replace(x, rtc=None) for x in batch])
    cache = engine.prefix(batch)
    state = torch.stack([x.state for x in batch])
    noise = torch.stack([x.noise for x in batch])
    c_actions, _ = engine.denoise(cache, state, noise, rtc=[None, None])
    for i in range(2):
        assert torch.equal(a[i].actions, b[i].actions) and torch.equal(a[i].updates, b[i].updates)
        assert torch.equal(c_actions[i], a[i].actions)
        assert "rtc_guided" not in a[i].timings_ms


def test_denoise_split_takes_guides():
    engine = Pi0Engine(CFG, seed=13)
    gen = torch.Generator().manual_seed(14)
    batch = [make_input(CFG, 1, 4, gen), make_input(CFG, 1, 6, gen)]
    guide = RtcGuide(torch.randn(CFG.chunk_size, CFG.max_action_dim, generator=gen), 1, 4)
    whole = engine.infer([batch[0], dataclasses.replace(batch[1], rtc=guide)])
    actions, _ = engine.denoise(engine.prefix(batch), torch.stack([x.state for x in batch]),
                                torch.stack([x.noise for x in batch]), rtc=[None, guide])
    torch.testing.assert_close(actions[1], whole[1].actions, rtol=0, atol=1e-6)
    with pytest.raises(EngineInputError, match="expected 2 guides"):
        engine.denoise(engine.prefix(batch), torch.stack([x.state for x in batch]),
                       torch.stack([x.noise for x in batch]), rtc=[guide])


@pytest.mark.parametrize("change,match", [
    (dict(leftover=torch.zeros(7, 8)), "rtc: leftover: expected shape"),
    (dict(leftover=torch.full((8, 8), float("nan"))), "rtc: leftover contains NaN"),
    (dict(delay=5, execution_horizon=4), "0 <= delay <= execution_horizon <= chunk_size=8"),
    (dict(execution_horizon=9), "execution_horizon <= chunk_size"),
    (dict(delay=-1), "0 <= delay"),
    (dict(delay=1.5), "rtc: delay: expected an integer"),
    (dict(schedule="cosine"), "rtc: schedule"),
    (dict(max_guidance_weight=0.0), "rtc: max_guidance_weight"),
    (dict(max_guidance_weight=float("inf")), "rtc: max_guidance_weight"),
    (dict(action_dim=9), "rtc: action_dim"),
    (dict(jacobian="none"), "rtc: jacobian"),
])
def test_bad_guides_are_refused_by_name(change, match):
    engine = Pi0Engine(CFG, seed=15)
    good = RtcGuide(torch.zeros(8, 8), 2, 4)
    inp = dataclasses.replace(make_input(CFG, 1, 3, torch.Generator().manual_seed(16)),
                              rtc=dataclasses.replace(good, **change))
    with pytest.raises(EngineInputError, match=match):
        engine.infer([make_input(CFG, 1, 3, torch.Generator().manual_seed(17)), inp])
    assert engine.stats.errors_by_field.get("rtc") == 1
    assert "robot 1: rtc:" in engine.stats.last_error or engine.stats.last_error.startswith("rtc:")
    with pytest.raises(EngineInputError, match="expected an RtcGuide"):
        engine.infer([dataclasses.replace(inp, rtc="exp")])


@pytest.mark.slow
def test_triton_backend_routes_guided_rows_through_torch_ops():
    """Triton kernels have no backward: a guided robot's step runs the torch ops (and matches the
    torch backend's guided chunk); the unguided robot beside it keeps the Triton kernels' result."""
    base = Pi0Config.preset("tiny")
    cfg = dataclasses.replace(base, chunk_size=4, num_steps=2,
                              vlm=dataclasses.replace(base.vlm, depth=2), expert=dataclasses.replace(base.expert, depth=2),
                              vision=dataclasses.replace(base.vision, depth=1, image_size=28))
    w = random_weights(cfg, 18)
    gen = torch.Generator().manual_seed(19)
    batch = [make_input(cfg, 1, 3, gen), make_input(cfg, 2, 5, gen)]
    guide = RtcGuide(torch.randn(cfg.chunk_size, cfg.max_action_dim, generator=gen), 1, 3)
    mixed = [batch[0], dataclasses.replace(batch[1], rtc=guide)]
    triton = Pi0Engine(cfg, {k: v.clone() for k, v in w.items()}, backend="triton")
    torch_be = Pi0Engine(cfg, {k: v.clone() for k, v in w.items()})
    plain = triton.infer(batch)
    got = triton.infer(mixed)
    ref = torch_be.infer(mixed)
    assert torch.equal(got[0].actions, plain[0].actions)
    torch.testing.assert_close(got[1].actions, ref[1].actions, rtol=0, atol=1e-4)


def test_pi05_is_guided_on_both_paths_and_mixed_batches_keep_unguided_rows():
    """PlainPi05 inherits the guided denoise and differentiates through its adaRMS velocity;
    FastPi05 runs guided rows through a differentiable copy of its tabulated step: the two agree,
    and a robot without a guide in the same batch gets its unguided chunk bit for bit."""
    cfg = Pi0Config.preset("tiny", policy="pi05", time_schedule="multiply", rope_style="multiply")
    gen = torch.Generator().manual_seed(20)
    inp, other = make_input(cfg, 1, 5, gen), make_input(cfg, 2, 9, gen)
    w = random_weights(cfg, 21)
    plain = Pi0Engine(cfg, {k: v.clone() for k, v in w.items()}, fast=False)
    fast = Pi0Engine(cfg, {k: v.clone() for k, v in w.items()}, fast=True)
    prev = _prev_chunk_of(plain, inp, 22)
    free = plain.infer([inp])[0].actions
    guide = RtcGuide(prev, 3, 6)
    guided = plain.infer([dataclasses.replace(inp, rtc=guide)])[0].actions
    assert (guided[:3] - prev[:3]).abs().max() < 0.1 * (free[:3] - prev[:3]).abs().max()
    fast_mixed = fast.infer([dataclasses.replace(inp, rtc=guide), other])
    torch.testing.assert_close(fast_mixed[0].actions, guided, rtol=0, atol=1e-4)
    assert torch.equal(fast_mixed[1].actions, fast.infer([inp, other])[1].actions)


def _prev_chunk_of(engine, inp, seed):
    other = dataclasses.replace(inp, noise=torch.randn(engine.config.chunk_size, engine.config.max_action_dim,
                                                       generator=torch.Generator().manual_seed(seed)))
    return engine.infer([other])[0].actions
