"""System 1's recovery data on place_in_order's subgoals (training.subgoal_rollouts): the truth
planner's subgoal is the prompt the policy is served, each episode comes back cut per subgoal as
the demonstrations' step tasks (k: the cube's place in the instruction), and an attempt that can
no longer succeed ends there."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from physai_ros.config.fleet import default_fleet_path, load_fleet
from physai_lab.evaluation.lockstep import LockstepConfig
from physai_lab.evaluation.sweep import scale_setting
from physai_ros.sim.robot import ArmConfig
from physai_ros.sim.tasks import order_prompt
from physai_ros.sim.world import SimWorld
from physai_lab.training.dataset import EncodedEpisode, load_dataset, write_dataset
from physai_lab.training.rollouts import RolloutJob
from physai_lab.training.subgoal_rollouts import (TruthPlanner, lost, plan_jobs, run_subgoal_job,
                                                  split_encoded)

FLEET = default_fleet_path().parent / "fleet_pipeline.yaml"
BLUE_FIRST = order_prompt("blue cube", "red cube")
PICK = "pick up the {} cube and place it on the green pad"


@pytest.fixture(scope="module")
def tiny_fleet():
    return scale_setting(load_fleet(FLEET), checkpoint=None, preset="tiny")


def test_the_noisy_expert_blue_first_comes_back_as_two_steps_in_the_instructions_order(tiny_fleet, tmp_path):
    job = RolloutJob("place_in_order", "perturbed_expert", (840_123,), slots=1, prompt=BLUE_FIRST,
                     perturb_prob=0.0, gripper_fault_prob=0.0)
    eps = run_subgoal_job(job, tiny_fleet)
    assert [(e.task, e.prompt) for e in eps] == [("place_in_order.step1.blue", PICK.format("blue")),
                                                ("place_in_order.step2.red", PICK.format("red"))]
    for ep in eps:
        assert ep.driver == "perturbed_expert" and ep.labels.shape == (len(ep), 10, 5)
        np.testing.assert_array_equal(ep.action, ep.labels[:, 0])
        assert len(ep.subtask) == len(ep.scene) == len(ep.png) == len(ep.state)
    assert eps[-1].success_flags[-1] and not eps[0].success_flags.any()
    # They load as labelled recovery episodes, one prompt per step task.
    write_dataset(tmp_path, eps, fps=10, joint_names=ArmConfig().joint_names)
    data = load_dataset(tmp_path, image_size=24)
    assert data.episodes_used == 2 and set(data.driver) == {"perturbed_expert"}
    assert len(data.label_chunks) == sum(len(e) for e in eps)


def test_the_policy_is_served_the_planners_subgoal(tiny_fleet):
    seen = []
    job = RolloutJob("place_in_order", "policy", (840_124,), slots=1, prompt=BLUE_FIRST)
    lock = LockstepConfig(latency_s=0.05, max_episode_s=0.6)
    import physai_lab.evaluation.servers as servers

    build = servers.build_policy_server

    def spy(cfg, clock):
        core = build(cfg, clock)
        submit = core.submit

        def submit_seen(obs, now=None):
            seen.append(obs.prompt)
            return submit(obs, now)
        core.submit = submit_seen
        return core
    servers.build_policy_server = spy
    try:
        eps = run_subgoal_job(job, tiny_fleet, lock)
    finally:
        servers.build_policy_server = build
    assert seen and set(seen) == {PICK.format("blue")}  # not the task's two-cube instruction
    assert [e.task for e in eps] == ["place_in_order.step1.blue"] and 5 <= len(eps[0]) <= 7


def test_truth_planner_sets_the_clients_prompt_at_its_rate():
    world = SimWorld(task="place_in_order", seed=5)
    slot = SimpleNamespace(robot=SimpleNamespace(id="r"), client=SimpleNamespace(prompt=None),
                           runtime=SimpleNamespace(world=world))
    planner = TruthPlanner(every=3)
    planner.on_tick(slot, 0.0)
    assert slot.client.prompt == PICK.format("red")
    world.held = 1  # the wrong cube in the hand: still told the red one
    slot.client.prompt = None
    planner.on_tick(slot, 0.0)
    planner.on_tick(slot, 0.0)
    assert slot.client.prompt is None  # between the client's ticks nothing is re-read
    planner.on_tick(slot, 0.0)
    assert slot.client.prompt == PICK.format("red")


def test_an_attempt_is_lost_once_the_wrong_cube_is_on_the_pad_or_a_cube_off_the_table():
    w = SimWorld(task="place_in_order", seed=2)
    assert not lost(w)
    w.objects[1] = np.array([w.goal[0], w.goal[1], w.scene.goal_height + w.scene.object_size / 2])
    w.step(1 / 480)
    assert lost(w)
    w = SimWorld(task="place_in_order", seed=2)
    w.objects[0] = np.array([w.objects[0][0], w.objects[0][1], -0.05])
    assert lost(w)


def test_split_numbers_steps_by_the_cubes_place_in_the_order():
    n = 5
    ep = EncodedEpisode("place_in_order", "x", 1, False, [[b""]] * n, np.zeros((n, 5)), np.zeros((n, 6)),
                        np.arange(n * 5.0).reshape(n, 5), np.zeros(n, bool), labels=np.zeros((n, 10, 5)),
                        driver="policy", subtask=list("abcde"), scene=list("vwxyz"))
    red, blue = PICK.format("red"), PICK.format("blue")
    parts = split_encoded(ep, [red, red, blue, red, red])
    # The red cube came off the pad: its second run is step 1 again, not a step 3.
    assert [(p.task, len(p), p.prompt) for p in parts] == [("place_in_order.step1.red", 2, red),
                                                          ("place_in_order.step2.blue", 1, blue),
                                                          ("place_in_order.step1.red", 2, red)]
    np.testing.assert_array_equal(parts[1].action, ep.action[2:3])
    assert parts[2].subtask == ["d", "e"]
    assert [p.task for p in split_encoded(ep, [blue] * 5, BLUE_FIRST)] == ["place_in_order.step1.blue"]
    with pytest.raises(ValueError, match="4 subgoals for 5 frames"):
        split_encoded(ep, [red] * 4)


def test_plan_jobs_alternates_the_orders_on_disjoint_seeds():
    jobs = plan_jobs("place_in_order", {"policy": 5, "perturbed_expert": 2}, 840_000)
    assert [(j.driver, j.prompt.split()[2], j.seeds) for j in jobs] == [
        ("policy", "red", (840_000, 840_002, 840_004)), ("policy", "blue", (840_001, 840_003)),
        ("perturbed_expert", "red", (850_000,)), ("perturbed_expert", "blue", (850_001,))]
