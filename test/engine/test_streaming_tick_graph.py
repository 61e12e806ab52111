"""The captured streaming tick's bookkeeping (tick_graph.py), tiny pi0 on the CPU.

A CUDA graph cannot be captured here, so `StaticTick` stands in for the capture with the same
contract: per-tick inputs copied into static buffers, the tick run on them, the outputs copied
out; one per snapshot shape, each new snapshot refilling the buffers of its shape. Against the eager fused tick over ticks that cross a
snapshot change and a robot-count change, the answers are bit for bit equal (same ops, same
order). The capture itself is checked on a GPU by bench/gpu_steps (correctness step)."""
import pytest
import torch

from physai_ros.engine.streaming.expert import StreamingExpert
from physai_ros.engine.streaming.tick import FusedTick
from physai_ros.engine.streaming.tick_graph import StaticTick

from streaming_helpers import one_torch_thread  # noqa: F401 (autouse)
from streaming_helpers import CFG, robot_input


def _tick_inputs(b: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    c, n = CFG.chunk_size, CFG.num_steps
    tau = torch.rand(b, c, generator=g, dtype=torch.float64)
    tau[:, 0] = 0.0
    tau[:, -1] = 1.0
    return (torch.randn(b, CFG.max_state_dim, generator=g), torch.randn(b, 6, generator=g) * 5,
            torch.randn(b, c, CFG.max_action_dim, generator=g), tau, (tau - 1.0 / n).clamp(min=0.0))


def test_static_ticks_equal_the_eager_tick_across_snapshots_and_robot_counts():
    engine, expert = StreamingExpert.build(CFG, force="random")
    eager = expert.fused
    staged = FusedTick(expert, graph_maker=StaticTick)
    prompts = [6, 11, 3]
    cache_a = engine.prefix([robot_input(10 + i, 2, p) for i, p in enumerate(prompts)])
    cache_b = engine.prefix([robot_input(20 + i, 2, p) for i, p in enumerate(prompts)])
    # Each implementation gets its own snapshots: a tick writes its suffix K/V into them.
    plan = [(cache_a, 3, 0), (cache_a, 3, 1), (cache_a, 3, 2), (cache_b, 3, 3), (cache_b, 3, 4),
            (cache_b, 2, 5), (cache_b, 2, 6)]
    snaps = {}
    x_eager = x_staged = None
    for cache, b, seed in plan:
        key = (id(cache), b)
        if key not in snaps:
            rows = torch.arange(b).flip(0)
            snaps[key] = (eager.prepare(cache, rows), staged.prepare(cache, rows))
        kv_e, kv_s = snaps[key]
        state, wrench, x, tau, new = _tick_inputs(b, seed)
        if x_eager is not None and x_eager.shape == x.shape:
            x_e, x_s = x_eager, x_staged  # the Euler state carries over, as in the stream
        else:
            x_e = x_s = x
        ref = eager.step(kv_e, state, wrench, x_e, tau, new)
        got = staged.step(kv_s, state, wrench, x_s, tau, new)
        for r, g in zip(ref, got):
            assert torch.equal(r, g)
        x_eager, x_staged = ref[0], got[0]
    graphs = staged.graphs
    # One capture per snapshot shape: three robots (snapshot a, then b refilled into a's
    # buffers), two robots.
    assert graphs.captures == 2
    assert graphs.replays == len(plan) - 2
    assert snaps[(id(cache_a), 3)][1] is snaps[(id(cache_b), 3)][1]


def test_a_replayed_tick_returns_its_own_tensors_not_the_static_outputs():
    engine, expert = StreamingExpert.build(CFG, force=None)
    staged = FusedTick(expert, graph_maker=StaticTick)
    kv = staged.prepare(engine.prefix([robot_input(3, 2, 6)]), torch.arange(1))
    state, wrench, x, tau, new = _tick_inputs(1, 0)
    staged.step(kv, state, wrench, x, tau, new)  # captures
    first = staged.step(kv, state, wrench, x, tau, new)
    kept = [t.clone() for t in first]
    staged.step(kv, state * 2, wrench, x * 3, tau, new)  # a robot may still read `first` now
    for a, b in zip(first, kept):
        assert torch.equal(a, b)


def test_graphs_are_refused_off_a_gpu_and_with_torch_compile():
    engine, expert = StreamingExpert.build(CFG)
    with pytest.raises(ValueError, match="CUDA graphs"):
        StreamingExpert(engine.model, expert.tw, None, tick="graphs")
    with pytest.raises(ValueError, match="not both"):
        FusedTick(expert, compile=True, graph_maker=StaticTick)


def test_a_capture_that_fails_leaves_the_ticks_eager_and_says_why():
    engine, expert = StreamingExpert.build(CFG, force=None)

    def refuse(*args):
        raise RuntimeError("operation not permitted when stream is capturing")

    staged = FusedTick(expert, graph_maker=refuse)
    kv = staged.prepare(engine.prefix([robot_input(3, 2, 6)]), torch.arange(1))
    state, wrench, x, tau, new = _tick_inputs(1, 0)
    ref = expert.fused.step(expert.fused.prepare(engine.prefix([robot_input(3, 2, 6)]), torch.arange(1)),
                            state, wrench, x, tau, new)
    for _ in range(3):
        got = staged.step(kv, state, wrench, x, tau, new)
        assert all(torch.equal(a, b) for a, b in zip(got, ref))
    assert staged.graphs.failed.startswith("RuntimeError: operation not permitted")
    assert (staged.graphs.captures, staged.graphs.replays) == (0, 0)
