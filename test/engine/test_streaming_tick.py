"""The fused streaming tick (streaming_tick.py) against the plain one (B1's layers), tiny pi0.

Every rewrite of the tick is the same function up to fp32 rounding: 2e-5 (measured < 2e-6).
Op counts are deterministic for a given torch build, so they are asserted as bounds with a
margin, never timings."""
import os
import shutil

import pytest
import torch

from physai_lab.op_count import count_aten_ops
from physai_ros.engine.streaming.expert import StreamingExpert

from streaming_helpers import one_torch_thread  # noqa: F401 (autouse)
from streaming_helpers import CFG, robot_input, run_ticks

TOL = 2e-5


def _inputs(b: int, seed: int = 5):
    g = torch.Generator().manual_seed(seed)
    c, n = CFG.chunk_size, CFG.num_steps
    state = torch.randn(b, CFG.max_state_dim, generator=g)
    wrench = torch.randn(b, 6, generator=g) * 5
    x = torch.randn(b, c, CFG.max_action_dim, generator=g)
    tau = torch.rand(b, c, generator=g, dtype=torch.float64)
    tau[:, 0] = 0.0  # final
    tau[:, -1] = 1.0  # fresh noise
    tau[0, 2] = 1.0 - 3.0 / n  # on the chunked sampler's grid (exact float32 time used)
    new = (tau - 0.13).clamp(min=0.0)
    new[0, 3] = 0.0  # becomes final this tick
    return state, wrench, x, tau, new


def _pair(force, b, prompts):
    engine, expert = StreamingExpert.build(CFG, force=force)
    cache = engine.prefix([robot_input(10 + i, 2, p) for i, p in enumerate(prompts)])
    rows = torch.arange(len(prompts)).flip(0)[:b]  # a subset of rows, in another order
    expert.engine_for_tests = engine
    return expert, expert.prepare(cache, rows, plain=True)


@pytest.mark.parametrize("force", [None, "random"])
@pytest.mark.parametrize("b,prompts", [(1, [6]), (1, [6, 11]), (3, [6, 11, 3])])
def test_fused_tick_equals_the_plain_tick(force, b, prompts):
    expert, kv = _pair(force, b, prompts)
    assert expert.tick == "fused"
    state, wrench, x, tau, new = _inputs(b)
    ref_x, ref_p = expert.step_plain(kv, state, wrench, x, tau, new)
    got_x, got_p = expert.step(kv, state, wrench, x, tau, new)
    assert got_x.shape == ref_x.shape and got_p.shape == ref_p.shape
    assert float((got_x - ref_x).abs().max()) < TOL
    assert float((got_p - ref_p).abs().max()) < TOL
    final = tau <= 0
    assert torch.equal(got_x[final], x[final]), "final tokens are left bit for bit"
    now_final = new <= 0
    assert torch.equal(got_p[now_final], got_x[now_final])
    # A second tick on the same snapshot (the suffix K/V buffers are overwritten in place).
    ref2 = expert.step_plain(kv, state * 0.5, wrench, ref_x, new, (new - 0.1).clamp(min=0))
    got2 = expert.step(kv, state * 0.5, wrench, got_x, new, (new - 0.1).clamp(min=0))
    assert float((got2[0] - ref2[0]).abs().max()) < TOL


def test_fused_tick_with_the_prefix_padded_to_its_maximum_equals_the_plain_tick():
    """The compiled tick's layout (one key count for every prompt length), run eagerly."""
    from physai_ros.engine.streaming.tick import FusedTick

    expert, kv = _pair("random", 3, [6, 11, 3])
    expert.fused = FusedTick(expert, pad_prefix=True)
    cache = expert.engine_for_tests.prefix([robot_input(10 + i, 2, p) for i, p in enumerate([6, 11, 3])])
    kv = expert.prepare(cache, torch.arange(3).flip(0), plain=True)
    assert kv.fused.mask_bias.shape[-1] == CFG.max_prefix_len + 1 + 1 + CFG.chunk_size
    state, wrench, x, tau, new = _inputs(3)
    ref = expert.step_plain(kv, state, wrench, x, tau, new)
    got = expert.step(kv, state, wrench, x, tau, new)
    for r, g in zip(ref, got):
        assert float((g - r).abs().max()) < TOL


def _segments(core, n):
    out = []
    for k, segs in enumerate(run_ticks(core, n, vlm_every=7,
                                       on_tick=lambda k, now: core.set_wrench("r", [0, 0, -3.0 * (k % 5), 0, 0, 0]))):
        out += [(s.start_time, s.positions, s.committed) for s in segs]
    return out


def test_streams_with_the_fused_and_the_plain_tick_send_the_same_nodes():
    cores = []
    for tick in ("plain", "fused"):
        engine, expert = StreamingExpert.build(CFG, force="random", tick=tick)
        from physai_ros.engine.streaming.streams import StreamingConfig, StreamingCore
        from streaming_helpers import FAST

        core = StreamingCore(engine, expert, StreamingConfig(**FAST), clock=lambda: 0.0)
        inp = robot_input(3)
        core.add_robot("r", inp, noise=inp.noise)
        cores.append(core)
    a, b = _segments(cores[0], 60), _segments(cores[1], 60)
    assert len(a) == len(b) > 0
    for (ta, pa, ca), (tb, pb, cb) in zip(a, b):
        assert ta == tb and (ca == cb).all()
        assert abs(pa - pb).max() < TOL


def test_op_count_of_the_fused_tick():
    """One robot, force token: the plain tick ran 719 aten ops (all levels; 781 for the whole
    core tick) before this change; the fused one 246 (111 top-level, 22 of them GEMMs). Bounds
    leave room for other torch builds, not for a regression to per-op Python."""
    expert, kv = _pair("random", 1, [6])
    args = (kv,) + _inputs(1)
    for _ in range(2):
        expert.step(*args)
    fused = count_aten_ops(lambda: expert.step(*args))
    plain = count_aten_ops(lambda: expert.step_plain(*args))
    assert fused.top <= 120, fused
    assert fused.all <= 270, fused
    assert plain.all >= 2.5 * fused.all, (plain, fused)


# Runs in CI (about a minute of inductor C++ compilation on 2 cores); only a machine without a
# C++ compiler, where tick="compiled" cannot work at all, skips it.
@pytest.mark.skipif(shutil.which(os.environ.get("CXX", "g++")) is None,
                    reason="torch.compile's CPU inductor backend needs a C++ compiler (g++), none found")
def test_compiled_tick_equals_the_plain_tick():
    engine, expert = StreamingExpert.build(CFG, force="random", tick="compiled")
    cache = engine.prefix([robot_input(10, 2, 6)])
    kv = expert.prepare(cache, torch.arange(1), plain=True)
    args = (kv,) + _inputs(1)
    ref = expert.step_plain(*args)
    got = expert.step(*args)
    assert expert.fused.compile_s is not None
    for r, g in zip(ref, got):
        assert float((g - r).abs().max()) < TOL
    again = expert.step(*args)  # no recompilation for the same shapes
    assert torch.equal(again[0], got[0])
    compiled_ops = count_aten_ops(lambda: expert.step(*args)).all
    _, fused = StreamingExpert.build(CFG, force="random")
    kv_f = fused.prepare(cache, torch.arange(1))
    fused_ops = count_aten_ops(lambda: fused.step(kv_f, *args[1:])).all
    assert compiled_ops < fused_ops, (compiled_ops, fused_ops)  # measured 169 vs 294 per core tick


def test_turning_the_force_token_off_after_build_re_prepares_the_fused_tick():
    """serving/streaming/service.py sets `expert.force = None` for `force: none`."""
    engine, expert = StreamingExpert.build(CFG, force="random")
    expert.force = None
    assert expert.context_tokens == 1 and not expert.fused.has_force
    kv = expert.prepare(engine.prefix([robot_input(4)]), torch.arange(1), plain=True)
    state, wrench, x, tau, new = _inputs(1)
    ref = expert.step_plain(kv, state, wrench, x, tau, new)
    got = expert.step(kv, state, wrench * 0 + 7.0, x, tau, new)  # the wrench is ignored
    assert float((got[0] - ref[0]).abs().max()) < TOL
