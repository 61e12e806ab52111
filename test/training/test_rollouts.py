"""Recovery data (training.rollouts): expert labels equal what the recording would command, the
perturbed expert perturbs, policy-driven episodes are recorded through the evaluation's lockstep
loop, and labelled episodes survive the dataset round trip and merge with demonstrations."""
from __future__ import annotations

import copy

import numpy as np
import pytest

from physai_ros.config.fleet import load_fleet
from physai_lab.evaluation.lockstep import LockstepConfig
from physai_lab.evaluation.sweep import scale_setting
from physai_ros.protocol.observation import ObservationData
from physai_ros.protocol.registration import RobotRegistration
from physai_ros.sim.expert import ScriptedExpert
from physai_ros.sim.robot import ArmConfig
from physai_ros.sim.world import SimWorld
from physai_lab.training.dataset import (EncodedEpisode, chunk_indices, load_dataset, merge_datasets,
                                         write_dataset)
from physai_lab.training.expert_data import RecordConfig, record_cell
from physai_lab.training.rollouts import PerturbedExpertServer, RolloutJob, expert_label, run_job

NAMES = ArmConfig().joint_names


def test_expert_label_is_what_the_recording_would_command():
    world = SimWorld(ArmConfig(num_joints=4), task="pick_and_place", seed=11)
    for _ in range(40):  # somewhere mid-approach, not the home pose
        world.set_command(ScriptedExpert(world).act(world.snapshot(), 1 / 60))
        for _ in range(8):
            world.step(1 / 480)
    label = expert_label(world, chunk=4, action_period=0.1)
    # The recording's loop (expert_data.record_cell): 60 Hz commands, 8 physics steps each.
    live, expert, commands = copy.deepcopy(world), ScriptedExpert(world), []
    for step in range(19):
        cmd = expert.act(live.snapshot(), 1 / 60)
        if step % 6 == 0:
            commands.append(cmd)
        live.set_command(cmd)
        for _ in range(8):
            live.step(1 / 480)
    np.testing.assert_allclose(label, np.stack(commands), atol=1e-6)
    assert np.abs(label[-1] - label[0]).max() > 1e-3  # it moves: not a held command
    with pytest.raises(ValueError, match="whole number"):
        expert_label(world, chunk=4, action_period=0.105)


def _submit_one(server, world):
    reg = RobotRegistration("r0", "pick_place", "/r0", "p", ("c0",), 1, 8, 8, NAMES, 5, 5, 0.1)
    server.register(reg)
    obs = ObservationData("r0", "pick_place", 2, 0.0, (), world.arm.positions(), np.zeros(6), 0.0, "p", 0.0, 0,
                          0.1, "static", (5.0,))
    server.submit(obs, 0.0)
    return server.step(0.0).chunks[0].actions


def test_perturbed_expert_changes_the_chunks_only_when_asked():
    world = SimWorld(ArmConfig(num_joints=4), task="pick_and_place", seed=3)
    width = world.arm.cfg.gripper_max_width
    clean_job = RolloutJob("pick_and_place", "perturbed_expert", (1,), perturb_prob=0.0, gripper_fault_prob=0.0)
    clean = _submit_one(PerturbedExpertServer(lambda _: world, 10, 5, clean_job, width), world)
    noisy_job = RolloutJob("pick_and_place", "perturbed_expert", (1,), perturb_prob=1.0, gripper_fault_prob=1.0)
    noisy = _submit_one(PerturbedExpertServer(lambda _: world, 10, 5, noisy_job, width), world)
    assert clean.shape == noisy.shape == (10, 5)
    assert np.abs(noisy[0, :-1] - clean[0, :-1]).max() < 1e-6  # the offset ramps in: no jump
    assert np.abs(noisy[-1, :-1] - clean[-1, :-1]).max() > 1e-3
    assert np.all(noisy[:, -1] != clean[:, -1])  # the gripper command inverted
    with pytest.raises(ValueError, match="driver"):
        RolloutJob("reach", "teleop", (1,))


@pytest.fixture(scope="module")
def recovery(tmp_path_factory):
    """Policy-driven (random tiny model) and perturbed-expert episodes, cut at 0.6 s."""
    cfg = scale_setting(load_fleet(None), checkpoint=None, preset="tiny")
    lock = LockstepConfig(latency_s=0.05, max_episode_s=0.6)
    eps = run_job(RolloutJob("reach", "policy", (900_001, 900_002), slots=2), cfg, lock)
    eps += run_job(RolloutJob("pick_and_place", "perturbed_expert", (900_003,), slots=1), cfg, lock)
    root = tmp_path_factory.mktemp("recovery")
    write_dataset(root, eps, fps=10, joint_names=NAMES)
    return eps, root


def test_rollouts_record_a_labelled_frame_per_tenth_of_a_second(recovery):
    eps, _ = recovery
    assert [e.driver for e in eps].count("policy") == 2 and eps[-1].driver == "perturbed_expert"
    for ep in eps:
        assert 5 <= len(ep) <= 7, len(ep)  # 0.6 s at 10 fps
        assert ep.labels.shape == (len(ep), 10, 5) and len(ep.png[0]) == 2
        np.testing.assert_array_equal(ep.action, ep.labels[:, 0])
        assert not ep.success  # cut short
    # The random policy does not move like the expert, so the labels are not what happened next.
    ep = eps[0]
    assert np.abs(ep.labels[0, 5] - ep.state[5]).max() > 1e-3


def test_failed_recovery_episodes_load_with_their_labels_and_merge(recovery, tmp_path):
    eps, root = recovery
    data = load_dataset(root, image_size=24)
    assert data.episodes_used == len(eps) and data.episodes_skipped == 0
    np.testing.assert_array_equal(data.label_chunks, np.concatenate([e.labels for e in eps]))
    demo_root = tmp_path / "demo"
    demo = [EncodedEpisode.encode(e) for e in record_cell(RecordConfig(task="reach", seed=4, episodes=1,
                                                                       image_width=48, image_height=32, fps=10))]
    write_dataset(demo_root, demo, fps=10, joint_names=NAMES)
    expert = load_dataset(demo_root, image_size=24)
    merged = merge_datasets([expert, data], chunk=10, action_rate_hz=10)
    n = len(expert)
    assert merged.label_chunks.shape == (n + len(data), 10, 5) and len(merged.driver) == n + len(data)
    idx = chunk_indices(np.arange(n), expert.episode_end, 10, 10, 10)
    np.testing.assert_array_equal(merged.label_chunks[:n], expert.action[idx])
    np.testing.assert_array_equal(merged.label_chunks[n:], data.label_chunks)
    assert merged.episode_end[n] == n + len(eps[0])  # the second part's episodes end in its own rows
    with pytest.raises(Exception, match="label chunks hold"):
        merge_datasets([data], chunk=4, action_rate_hz=10)
