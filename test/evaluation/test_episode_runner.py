"""The lockstep episode runner drives the real serving path (tiny random-weight pi0) and the
scripted expert through the same client / buffer / sim loop."""
from __future__ import annotations

import pytest
import torch

from physai_ros.config.fleet import load_fleet
from physai_lab.evaluation.lockstep import LockstepConfig, SimClock, clone_robots, run_episodes
from physai_lab.evaluation.servers import ExpertServer, build_policy_server
from physai_lab.evaluation.sweep import Setting, run_setting, scale_setting, task_robot


@pytest.fixture(scope="module")
def tiny_fleet():
    torch.set_num_threads(1)
    # Pin the random tiny model: the embedded default may be a trained checkpoint.
    return scale_setting(load_fleet(), preset="tiny", checkpoint=None)


def test_policy_episodes_run_through_serving_core(tiny_fleet):
    lock = LockstepConfig(latency_s=0.05, max_episode_s=1.0)
    # One slot: the second episode reuses the robot id, so the server must keep taking its
    # rounds (fresh client, round ids continued) after re-registration.
    res = run_setting(tiny_fleet, Setting("pick_and_place", "static", (3,)), [101, 102], slots=1, lockstep=lock)
    assert [r.seed for r in res] == [101, 102]
    for r in res:
        assert r.task == "pick_and_place" and not r.success  # random weights, 1 s
        assert r.sim_time_s == pytest.approx(1.0, abs=0.01)
        # 8-action chunks at 10 Hz, H=3: a round every ~0.3 s of simulated time.
        assert 3 <= r.rounds <= 8 and set(r.horizons) == {3}
        assert r.refused == 0 and r.errors == 0


def test_confidence_policy_horizons_stay_in_range(tiny_fleet):
    lock = LockstepConfig(max_episode_s=0.8)
    res = run_setting(tiny_fleet, Setting("reach", "confidence", (0.5, 2)), [7], slots=1, lockstep=lock)
    (r,) = res
    assert r.rounds >= 2 and all(2 <= h <= 8 for h in r.horizons)


def test_expert_solves_reach_through_the_same_loop(tiny_fleet):
    # The scripted expert answering over the client -> buffer -> follower -> sim path must still
    # succeed: proves chunks are timed, inserted and executed, not only produced.
    robot = task_robot(tiny_fleet, "reach")
    slots = {}
    server = ExpertServer(lambda rid: slots[rid].runtime.world, chunk_size=8)
    res = run_episodes(server, clone_robots(robot, 2), [11, 12, 13], LockstepConfig(), "expert",
                       slot_hook=lambda ss: slots.update({s.robot.id: s for s in ss}))
    assert len(res) == 3 and all(r.success for r in res)
    assert all(r.sim_time_s < 8.0 for r in res)


def test_chunks_arrive_after_the_modeled_latency(tiny_fleet):
    clock = SimClock()
    core = build_policy_server(tiny_fleet, clock)
    robot = task_robot(tiny_fleet, "reach")
    arrivals = []

    def hook(slots):
        s = slots[0]
        deliver = s.deliver

        def spy(chunk, now):
            arrivals.append((chunk.stamp, now))
            deliver(chunk, now)
        s.deliver = spy

    run_episodes(core, [robot], [3], LockstepConfig(latency_s=0.1, max_episode_s=0.6), clock=clock, slot_hook=hook)
    assert arrivals
    # Observation stamp = newest camera frame (30 Hz), sent at the next client tick (100 Hz).
    for stamp, at in arrivals:
        assert 0.1 <= at - stamp <= 0.1 + 1 / 30 + 0.011


def test_lockstep_config_rejects_bad_rates():
    with pytest.raises(ValueError):
        LockstepConfig(latency_s=-1)
    with pytest.raises(ValueError):
        LockstepConfig(client_rate_hz=1000)


def test_a_setting_can_name_the_fleet_robot_it_evaluates(tiny_fleet):
    # robot_2 of the default fleet runs pick and place with one camera; the first one has two.
    assert task_robot(tiny_fleet, "pick_and_place").num_views == 2
    assert task_robot(tiny_fleet, "pick_and_place", "robot_2").num_views == 1
    with pytest.raises(ValueError, match="robot 'robot_1'.*pick_and_place"):
        task_robot(tiny_fleet, "pick_and_place", "robot_1")  # a reach robot
    lock = LockstepConfig(latency_s=0.05, max_episode_s=0.3)
    setting = Setting("pick_and_place", "static", (3,), robot="robot_2")
    (r,) = run_setting(tiny_fleet, setting, [103], slots=1, lockstep=lock)
    assert setting.label == "pick_and_place@robot_2 static(3)" and r.rounds >= 1 and r.errors == 0
