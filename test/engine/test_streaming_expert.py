"""The streaming action expert against B1's chunked sampler (tiny pi0, fp32, CPU)."""
import pytest
import torch

from physai_ros.engine import Pi0Config
from physai_ros.engine.checkpoint.params import random_weights
from physai_ros.engine.streaming.expert import StreamingExpert
from physai_ros.engine.streaming.force_token import ForceProjection
from physai_ros.engine.streaming.schedule import StaggeredSchedule

from engine_helpers import make_input
from streaming_helpers import one_torch_thread  # noqa: F401 (autouse)
from streaming_helpers import CFG, build, robot_input, run_ticks

# fp32 rounding only: the same kernels run; the suffix GEMMs have one or two more rows and the
# time bias is summed per token (measured 4.8e-7).
EXACT = 1e-5


def chunked(core, inp):
    cache = core.engine.prefix([inp])
    actions, _ = core.engine.denoise(cache, inp.state[None], inp.noise[None])
    return actions[0]


@pytest.mark.parametrize("views,prompt", [(2, 6), (1, 11)])
def test_synchronous_stream_reproduces_the_chunked_sampler(views, prompt):
    core = build(stagger=False)
    inp = robot_input(5, views, prompt)
    core.add_robot("r", inp, noise=inp.noise)
    core.vlm_pass(0.0)
    segs = run_ticks(core, CFG.num_steps)
    due, values, tau = core.window("r")
    assert float(tau.max()) == 0.0, "every token final after num_steps ticks"
    assert torch.allclose(values, chunked(core, inp), atol=EXACT, rtol=0)
    last = segs[-1][0]
    assert last.committed.all()


def test_checkpoint_without_force_runs_without_the_token_and_wrench_changes_nothing():
    core = build(stagger=False)
    assert not core.expert.has_force
    inp = robot_input(6)
    core.add_robot("r", inp, noise=inp.noise)
    core.vlm_pass(0.0)
    run_ticks(core, CFG.num_steps, on_tick=lambda k, now: core.set_wrench("r", [50.0 * k, 0, -3, 1, 0, 2]))
    assert torch.allclose(core.window("r")[1], chunked(core, inp), atol=EXACT, rtol=0)


def test_force_token_is_read_from_checkpoint_weights_and_changes_the_actions():
    w = random_weights(CFG, seed=0)
    proj = ForceProjection.random(CFG.expert.width, seed=3)
    w["force_proj.weight"], w["force_proj.bias"] = proj.weight, proj.bias
    engine, expert = StreamingExpert.build(CFG, weights=w)
    assert expert.has_force and expert.context_tokens == 2
    assert "force_proj.weight" in w, "the caller's dict is left alone"
    inp = robot_input(7)
    cache = engine.prefix([inp])
    kv = expert.prepare(cache, torch.arange(1))
    tau = torch.ones(1, CFG.chunk_size, dtype=torch.float64)
    new = tau - 0.1
    x0, _ = expert.step(kv, inp.state[None], torch.zeros(1, 6), inp.noise[None], tau, new)
    x1, _ = expert.step(kv, inp.state[None], torch.tensor([[5.0, 0, 0, 0, 0, 0]]), inp.noise[None], tau, new)
    assert float((x0 - x1).abs().min()) > 0, "a wrench reaches every action token"
    with pytest.raises(ValueError, match="force_proj"):
        bad = random_weights(CFG, seed=0)
        bad["force_proj.weight"], bad["force_proj.bias"] = torch.zeros(3, 6), torch.zeros(3)
        StreamingExpert.build(CFG, weights=bad)


def test_final_tokens_are_left_bit_for_bit():
    engine, expert = StreamingExpert.build(CFG, force="random")
    inp = robot_input(8)
    kv = expert.prepare(engine.prefix([inp]), torch.arange(1))
    tau = torch.linspace(0, 1, CFG.chunk_size, dtype=torch.float64)[None]
    x, preview = expert.step(kv, inp.state[None], torch.ones(1, 6), inp.noise[None], tau, (tau - 0.2).clamp(min=0))
    assert torch.equal(x[0, 0], inp.noise[0]) and torch.equal(preview[0, 0], inp.noise[0])
    assert not torch.equal(x[0, 1:], inp.noise[1:])


def test_staggered_sampler_converges_to_the_chunked_one_as_the_stagger_shrinks():
    """Token j's flow times are the chunked grid shifted by j * stagger, plus one short last
    step, so the deviation is first order in the stagger times dv/dtau. It needs a velocity
    smooth in tau: pi0's 4e-3 minimum period makes a random model's velocity rough at that
    scale, so this test uses min_period 0.1 (a trained model is smooth there)."""
    cfg = Pi0Config.preset("tiny", min_period=0.1)
    engine, expert = StreamingExpert.build(cfg)
    inp = make_input(cfg, 2, 6, torch.Generator().manual_seed(3))
    cache = engine.prefix([inp])
    ref, _ = engine.denoise(cache, inp.state[None], inp.noise[None])
    kv = expert.prepare(cache, torch.arange(1))
    n, c = cfg.num_steps, cfg.chunk_size
    errors = []
    for r in (1e-2, 1e-3, 1e-4, 1e-5):
        sched = StaggeredSchedule(span_s=float(n), stagger_s=r * n)  # time unit: one tick
        finish = sched.finish_times(n - 1, torch.arange(c))[None]
        x, tau, k = inp.noise[None].clone(), torch.ones(1, c, dtype=torch.float64), 0
        while bool((tau > 0).any()):
            new = torch.minimum(sched.tau(finish, k), tau)
            final_before = tau <= 0
            x_prev = x
            x, _ = expert.step(kv, inp.state[None], None, x, tau, new)
            assert torch.equal(x[final_before], x_prev[final_before])
            tau, k = new, k + 1
        errors.append(float((x - ref).abs().max()))
    assert errors[1] > errors[2] > errors[3]
    assert errors[3] < 2e-3, errors  # measured 0.10, 0.0090, 0.00088 for 1e-3..1e-5


def test_streaming_over_the_chunked_engine_shares_its_weights_and_ticks_the_same():
    """A server's streams over its chunked engine's prepared model (StreamingExpert.over) hold the
    weights once and compute what streams built from the same weights compute, bit for bit."""
    from physai_ros.engine import Pi0Engine

    chunked = Pi0Engine(CFG, seed=0)
    engine, expert = StreamingExpert.over(chunked, force="random", seed=0)
    own_engine, own_expert = StreamingExpert.build(CFG, force="random", seed=0)
    assert engine.model is chunked.model and expert.model is chunked.model
    assert engine.model is not own_engine.model
    robots = [robot_input(s, 2, p) for s, p in ((1, 6), (2, 9))]
    cache, own_cache = engine.prefix(robots), own_engine.prefix(robots)
    for a, b in zip(cache.keys + cache.values, own_cache.keys + own_cache.values):
        assert torch.equal(a, b)
    rows = torch.arange(2)
    kv, own_kv = expert.prepare(cache, rows), own_expert.prepare(own_cache, rows)
    g = torch.Generator().manual_seed(4)
    x = torch.randn(2, CFG.chunk_size, CFG.max_action_dim, generator=g)
    tau = torch.rand(2, CFG.chunk_size, generator=g, dtype=torch.float64)  # off the sampler's grid
    state, wrench = torch.randn(2, CFG.max_state_dim, generator=g), torch.randn(2, 6, generator=g)
    got = expert.step(kv, state, wrench, x, tau, (tau - 0.07).clamp(min=0))
    ref = own_expert.step(own_kv, state, wrench, x, tau, (tau - 0.07).clamp(min=0))
    for a, b in zip(got, ref):
        assert torch.equal(a, b)
    # The chunked engine still serves chunks meanwhile: its own model, untouched.
    assert chunked.infer(robots)[0].actions.shape == (CFG.chunk_size, CFG.max_action_dim)


def test_streaming_over_a_plain_engine_or_with_a_mismatched_model_is_refused():
    from physai_ros.engine import Pi0Engine

    with pytest.raises(ValueError, match="fast pi0 engine"):
        StreamingExpert.over(Pi0Engine(CFG, fast=False))
    chunked = Pi0Engine(CFG)
    with pytest.raises(ValueError, match="built for cpu/torch.float32"):
        Pi0Engine(CFG, dtype=torch.bfloat16, model=chunked.model)
    with pytest.raises(ValueError, match="without weights"):
        Pi0Engine(CFG, weights={}, model=chunked.model)
