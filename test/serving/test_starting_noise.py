"""fleet.yaml's per-task `noise_scale`: the flow sampler's starting noise, drawn by the server
(serving.starting_noise), reaching the engine in the input; a task without it keeps the engine's
own N(0, I) draw (tiny random model, no ROS)."""
import numpy as np
import pytest
import torch
import yaml

from physai_ros.client.robot_client import RobotClientCore
from physai_ros.config.fleet import FleetConfigError, default_fleet_path
from physai_ros.protocol.chunk import STATUS_OK
from physai_ros.serving.starting_noise import StartingNoise

from observation_builders import make_obs
from tiny_fleet import fleet_with

T0 = 1_000_000.0


@pytest.fixture(scope="module")
def doc():
    return yaml.safe_load(default_fleet_path().read_text())


def _with(doc, scale, task="pick_place", tiny=False):
    return fleet_with(doc, task, "noise_scale", scale, tiny)


def test_noise_scale_defaults_to_the_policys_own_sampler(doc):
    assert all(t.noise_scale == 1.0 for t in _with(doc, None).tasks.values())
    assert _with(doc, 0.5).tasks["pick_place"].noise_scale == 0.5
    assert _with(doc, 0).tasks["pick_place"].noise_scale == 0.0


@pytest.mark.parametrize("scale,task,match", [
    (1.5, "pick_place", r"^tasks\.pick_place\.noise_scale: expected a number from 0 to 1"),
    (-0.1, "pick_place", r"^tasks\.pick_place\.noise_scale: expected a number from 0 to 1"),
    ("low", "pick_place", r"^tasks\.pick_place\.noise_scale: expected a number from 0 to 1 .*got 'low'"),
    (True, "pick_place", r"^tasks\.pick_place\.noise_scale: expected a number"),
    (0.5, "reach_streaming", r"^tasks\.reach_streaming\.noise_scale: the streaming action expert draws its own"),
])
def test_noise_scale_mistakes_name_the_key(doc, scale, task, match):
    with pytest.raises(FleetConfigError, match=match):
        _with(doc, scale, task)


def test_tasks_at_scale_one_draw_nothing_and_others_draw_scaled_noise_from_the_seed():
    a, b = StartingNoise({"x": 0.5, "y": 1.0}, seed=7), StartingNoise({"x": 0.5}, seed=7)
    assert a.scales == {"x": 0.5} and a.draw("y", 10, 8) is None and a.draw("z", 10, 8) is None
    n = a.draw("x", 50, 8)
    assert n.shape == (50, 8) and torch.equal(n, b.draw("x", 50, 8))  # the server's seed: replayable
    assert 0.4 < float(n.std()) < 0.6
    assert torch.equal(StartingNoise({"x": 0.0}).draw("x", 10, 8), torch.zeros(10, 8))


def _round(core, robots, images, round_id):
    """One served round with the same frames and state for each robot: only the sampler's noise
    can change a chunk."""
    for r in robots:
        assert core.submit(make_obs(r, round_id, stamp=T0 - 0.5, images=images[r.id]), now=T0) == []
    chunks = {c.robot_id: c for c in core.step(T0).chunks}
    assert all(c.status == STATUS_OK for c in chunks.values()), [c.error for c in chunks.values()]
    return chunks


def _served(doc, scale, instance_id):
    from physai_ros.serving.startup.engine_builder import build_core

    cfg = _with(doc, scale, tiny=True)
    robots = (cfg.robot("robot_0"), cfg.robot("robot_1"))
    core = build_core(cfg, instance_id=instance_id)
    core.clock = lambda: T0
    for r in robots:
        assert core.register(RobotClientCore(r).registration()).accepted
    return core, robots, {r.id: make_obs(r, 2, stamp=T0 - 0.5).images for r in robots}


def test_core_sends_the_tasks_noise_to_the_engine_and_zero_makes_chunks_repeat(doc):
    core, (scaled, plain), images = _served(doc, 0.0, "noise")
    assert (scaled.task.noise_scale, plain.task.noise_scale) == (0.0, 1.0)
    seen = []
    slot = core.engines["engine_0"]
    infer = slot.engine.infer
    slot.engine.infer = lambda inputs: seen.append([i.noise for i in inputs]) or infer(inputs)
    one, two = (_round(core, (scaled, plain), images, i) for i in (2, 4))
    assert len(seen) == 2 and all(n[1] is None for n in seen)  # robot_1: the engine's own draw
    assert all(torch.equal(n[0], torch.zeros_like(n[0])) for n in seen)
    np.testing.assert_array_equal(one["robot_0"].actions, two["robot_0"].actions)  # deterministic
    assert not np.array_equal(one["robot_1"].actions, two["robot_1"].actions)  # sampled afresh


def test_a_benchmark_restarts_both_noise_streams_between_settings(doc):
    from physai_lab.evaluation.servers import restart_noise

    core, robots, images = _served(doc, 0.5, "restart")
    before = [_round(core, robots, images, i) for i in (2, 4)]
    restart_noise(core)  # the next setting of a comparison starts here
    after = [_round(core, robots, images, i) for i in (6, 8)]
    for rid in ("robot_0", "robot_1"):  # the server's scaled draw and the engine's own
        assert not np.array_equal(before[0][rid].actions, before[1][rid].actions)
        for b, a in zip(before, after):
            np.testing.assert_allclose(a[rid].actions, b[rid].actions, rtol=0, atol=1e-6)


def test_benchmarks_set_every_chunked_tasks_scale_and_leave_streaming_ones(doc):
    from physai_lab.evaluation.sweep import with_noise_scale

    cfg = with_noise_scale(_with(doc, None), 0.5)
    assert {n: t.noise_scale for n, t in cfg.tasks.items()} == {
        n: (0.5 if t.mode == "chunked" else 1.0) for n, t in cfg.tasks.items()}
    assert cfg.tasks["reach_streaming"].noise_scale == 1.0
    assert all(r.task == cfg.tasks[r.task.name] for r in cfg.robots)  # each robot's copy too
