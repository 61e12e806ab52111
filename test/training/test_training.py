"""Smoke tests of the data + training path on a tiny model: recording in the LeRobot
layout, chunk labels, the flow-matching loss going down, and the checkpoint running unchanged in
the serving path with the training module's own sampler's results."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import yaml

from physai_ros.config.fleet import default_fleet_path, parse_fleet
from physai_ros.engine.processor.normalizer import STATS_FILE
from physai_ros.engine.processor.tokenizer import PromptTokenizer
from physai_ros.protocol.observation import ImageData, ObservationData
from physai_ros.protocol.registration import RobotRegistration
from physai_ros.serving.startup.engine_builder import build_core
from physai_ros.sim.robot import ArmConfig
from physai_lab.training.checkpoint import save_policy
from physai_lab.training.dataset import (DatasetError, EncodedEpisode, chunk_indices, image_key, load_dataset,
                                         target_chunks, write_dataset)
from physai_lab.training.expert_data import RecordConfig, record_cell
from physai_lab.training.policy_model import TrainablePi0, sample_noise_and_time
from physai_lab.training.train import BatchMaker, ModelSize, TrainConfig, release_frames, train

TOKENIZER = str(default_fleet_path().parents[1] / "physai_ros" / "assets" / "tokenizer.json")
TINY = ModelSize(image_size=28, patch_size=14, vision_width=32, vision_depth=1, vlm_width=32, expert_width=32,
                 depth=1, heads=2, head_dim=16, chunk_size=4)
PROMPTS = {"reach": ["move the gripper to the goal"], "pick_and_place": ["pick up the cube and place it on the goal"]}


@pytest.fixture(scope="module")
def dataset_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("expert")
    eps = []
    for task, seed in (("reach", 5), ("pick_and_place", 6)):
        cfg = RecordConfig(task=task, seed=seed, episodes=1, image_width=48, image_height=32, fps=10)
        eps += [EncodedEpisode.encode(e) for e in record_cell(cfg)]
    write_dataset(root, eps, fps=10, joint_names=ArmConfig().joint_names)
    return root


def test_recording_is_a_lerobot_dataset(dataset_dir):
    import pyarrow.parquet as pq

    info = json.loads((dataset_dir / "meta" / "info.json").read_text())
    assert info["codebase_version"] == "v2.1" and info["fps"] == 10 and info["total_episodes"] == 2
    assert info["features"][image_key(1)] == {"dtype": "image", "shape": [32, 48, 3],
                                              "names": ["height", "width", "channel"]}
    assert info["features"]["action"]["names"] == list(ArmConfig().joint_names)
    episodes = [json.loads(x) for x in (dataset_dir / "meta" / "episodes.jsonl").read_text().splitlines()]
    assert all(e["success"] for e in episodes), "the scripted expert should solve both sampled cells"
    tasks = [json.loads(x)["task"] for x in (dataset_dir / "meta" / "tasks.jsonl").read_text().splitlines()]
    assert len(tasks) == 2
    t = pq.read_table(dataset_dir / info["data_path"].format(episode_chunk=0, episode_index=1))
    assert t.num_rows == episodes[1]["length"]
    assert t.column("index").to_pylist()[0] == episodes[0]["length"]  # global frame index continues
    assert t.column("next.done").to_pylist()[-1] is True
    assert t.column("next.success").to_pylist()[-1] is True  # recorded through reset_delay after success
    stats = json.loads((dataset_dir / "meta" / "stats.json").read_text())
    assert len(stats["action"]["mean"]) == 5 and len(stats["observation.wrench"]["std"]) == 6


def test_loaded_frames_match_what_the_server_would_feed(dataset_dir):
    from physai_ros.engine.processor.images import to_model_pixels

    data = load_dataset(dataset_dir, image_size=24)
    assert data.images.shape[1:] == (2, 3, 24, 24) and data.images.dtype == np.uint8
    # Re-render frame 0 of the reach episode and preprocess it the serving way.
    ep = next(record_cell(RecordConfig(task="reach", seed=5, episodes=1, image_width=48, image_height=32, fps=10)))
    served = to_model_pixels(ep.images[0][1], 24)
    np.testing.assert_array_equal(data.images[0, 1], served)  # the same bytes; the engine scales both
    np.testing.assert_array_equal(data.state[: len(ep)], np.stack(ep.state))
    # The episode's actions are the expert's commands, which the arm's state then follows.
    assert np.abs(data.action[len(ep) - 1] - data.state[len(ep) - 1]).max() < 0.05


def test_chunk_labels_step_at_the_action_rate_and_hold_at_the_end():
    ends = np.array([5, 5, 5, 5, 5, 9, 9, 9, 9])
    idx = chunk_indices(np.arange(9), ends, fps=20, action_rate_hz=10, chunk=3)
    assert idx[0].tolist() == [0, 2, 4]
    assert idx[3].tolist() == [3, 4, 4]  # held at the episode's last frame, never the next episode's
    assert idx[5].tolist() == [5, 7, 8]
    with pytest.raises(DatasetError):
        chunk_indices(np.arange(3), np.array([3, 3, 3]), fps=15, action_rate_hz=10, chunk=2)


def test_unsuccessful_or_missing_data_is_refused(tmp_path):
    with pytest.raises(DatasetError, match="info.json"):
        load_dataset(tmp_path, 24)


def _fixed_loss(model, batch, dim):
    img, masks, tok, tmask, state, actions = batch[:6]  # then the text block (None without text)
    g = torch.Generator().manual_seed(123)
    with torch.no_grad():
        return float(model.loss(img, masks, tok, tmask, state, actions, dim, 2, g))


def test_loss_decreases_and_checkpoint_runs_unchanged_in_serving(dataset_dir, tmp_path):
    data = load_dataset(dataset_dir, image_size=TINY.image_size)
    tc = TrainConfig(size=TINY, steps=60, batch_size=16, samples_per_obs=2, lr=3e-3, warmup=0.1, ema=0.0, seed=1,
                     threads=1, log_every=20)
    tokenizer = PromptTokenizer(TOKENIZER, 48)
    probe = BatchMaker(data, tc, tokenizer, PROMPTS, np.random.default_rng(7)).batch(16)
    model = TrainablePi0(tc.size.config(), seed=1)
    before = _fixed_loss(model, probe, 5)
    res = train(data, tc, tokenizer, PROMPTS, log=lambda m: None, model=model)
    after = _fixed_loss(model, probe, 5)
    assert after < 0.7 * before, (before, after)
    assert res.steps == 60 and len(res.loss_curve) == 3
    assert set(res.prompts) == {"reach", "pick_and_place"} and PROMPTS["reach"][0] in res.prompts["reach"]

    ckpt = tmp_path / "ckpt"
    save_policy(ckpt, res.config, res.weights, res.state_stats, res.action_stats, ArmConfig().joint_names,
                [image_key(0), image_key(1)], TINY.image_size, {"test": True})
    # Load it the way the policy server does: fleet.yaml's server.model.checkpoint.
    doc = yaml.safe_load(default_fleet_path().read_text())
    doc["server"]["model"] = {"checkpoint": str(ckpt), "tokenizer": TOKENIZER, "max_token_len": 48}
    doc["server"]["profile"] = False
    core = build_core(parse_fleet(doc, source=str(tmp_path / "fleet.yaml")))
    engine = next(iter(core.engines.values())).engine
    assert engine.config == res.config
    stats = json.loads((ckpt / STATS_FILE).read_text())
    np.testing.assert_allclose(core.action_runner.normalizer.action.std, stats["action"]["std"])

    # A real observation through the server's preprocessing, sampled by the serving engine (fast
    # path) and by the training module's reference sampler with the same noise.
    ep = next(record_cell(RecordConfig(task="reach", seed=9, episodes=1, fps=10)))
    names = ArmConfig().joint_names
    core.register(RobotRegistration("r0", "reach", "/r0", PROMPTS["reach"][0], ("c0", "c1"), 2, 224, 224, names,
                                    5, 5, 0.1))
    obs = ObservationData("r0", "reach", 2, 0.0, tuple(ImageData(224, 224, "rgb8", 672, im.tobytes())
                                                          for im in ep.images[3]),
                          ep.state[3], ep.wrench[3], 0.0, PROMPTS["reach"][0], 0.0, 0, 0.1, "static", (4.0,))
    from physai_ros.engine.batching import model_pixels

    inp = core.action_runner.prepare(obs, core.registry.get("r0"))  # uint8 views: the engine scales them
    noise, _ = sample_noise_and_time((1, TINY.chunk_size, 8), torch.Generator().manual_seed(5))
    inp.noise = noise[0]
    served = engine.infer([inp])[0].actions
    ref, _ = model.sample(model_pixels(inp.images)[None], inp.image_masks[None], inp.tokens[None], inp.token_mask[None],
                          inp.state[None], noise)
    torch.testing.assert_close(served, ref[0], atol=2e-4, rtol=1e-4)
    assert torch.isfinite(served).all()


def test_text_columns_round_trip_and_co_training_lowers_the_text_loss(dataset_dir):
    """Every recorded frame carries sim.narration's answers; training with text_weight
    asks one of the two questions per observation and learns the answers."""
    data = load_dataset(dataset_dir, image_size=TINY.image_size)
    ep = next(record_cell(RecordConfig(task="reach", seed=5, episodes=1, image_width=48, image_height=32, fps=10)))
    assert data.subtask[: len(ep)] == ep.subtask and data.scene[: len(ep)] == ep.scene
    assert set(data.subtask) >= {"reach the marker", "reach the cube", "place on the goal", "done"}
    tc = TrainConfig(size=TINY, steps=40, batch_size=16, samples_per_obs=1, lr=3e-3, warmup=0.1, ema=0.0, seed=2,
                     threads=1, log_every=10, text_weight=1.0)
    tokenizer = PromptTokenizer(TOKENIZER, 48)
    probe = BatchMaker(data, tc, tokenizer, PROMPTS, np.random.default_rng(8)).batch(16)
    block, mask = probe[6:]
    assert mask.any(1).all()  # every frame of this dataset has text
    model = TrainablePi0(tc.size.config(), seed=2)

    def text_loss_now():
        with torch.no_grad():
            return float(model.losses(*probe[:6], 5, 1, torch.Generator().manual_seed(0), block, mask)[1])

    before = text_loss_now()
    res = train(data, tc, tokenizer, PROMPTS, log=lambda m: None, model=model)
    assert text_loss_now() < 0.5 * before
    assert [s for s, _ in res.text_curve] == [10, 20, 30, 40] and len(res.loss_curve) == 4

    data.subtask = [""] * len(data)  # a dataset recorded before the text columns
    data.scene = [""] * len(data)
    with pytest.raises(ValueError, match="text columns"):
        train(data, tc, tokenizer, PROMPTS, log=lambda m: None)


def test_release_frames_are_drawn_more_often_and_the_gripper_dim_weighs_more(dataset_dir):
    """release_frame_weight oversamples the last chunk before the gripper opens on the pad (the
    pick-and-place expert releases once; reach never closes); gripper_loss_weight reweights the
    flow loss's last dim, normalised so all-equal weights give the plain mean."""
    data = load_dataset(dataset_dir, image_size=TINY.image_size)
    tokenizer = PromptTokenizer(TOKENIZER, 48)
    plain = BatchMaker(data, TrainConfig(size=TINY), tokenizer, PROMPTS, np.random.default_rng(3))
    raw = target_chunks(data, plain.chunk, plain.tc.action_rate_hz)  # what BatchMaker weighs, before normalising
    releasing = release_frames(raw)
    pick = plain.by_task["pick_and_place"]
    assert 0 < releasing[pick].sum() < len(pick) / 3 and not releasing[plain.by_task["reach"]].any()
    first = int(np.flatnonzero(releasing)[0])  # closed now, open within the chunk
    assert raw[first, 0, -1] < 0.04 and raw[first, :, -1].max() > 0.04

    def release_share(tc: TrainConfig) -> float:
        rows, tasks = BatchMaker(data, tc, tokenizer, PROMPTS, np.random.default_rng(4)).draw(800)
        return float(releasing[rows[np.array(tasks) == "pick_and_place"]].mean())

    base, weighted = release_share(TrainConfig(size=TINY)), release_share(TrainConfig(size=TINY, release_frame_weight=6))
    assert weighted > 2 * base, (base, weighted)
    with pytest.raises(ValueError, match="release_frame_weight"):
        BatchMaker(data, TrainConfig(size=TINY, release_frame_weight=0), tokenizer, PROMPTS, np.random.default_rng(0))

    maker = BatchMaker(data, TrainConfig(size=TINY, gripper_loss_weight=5), tokenizer, PROMPTS,
                       np.random.default_rng(5))
    assert torch.allclose(maker.loss_dim_weights, torch.tensor([5 / 9] * 4 + [25 / 9]))
    probe = maker.batch(8)
    model = TrainablePi0(TINY.config(), seed=3)

    def flow(w):
        with torch.no_grad():
            return float(model.losses(*probe[:6], 5, 1, torch.Generator().manual_seed(0), dim_weights=w)[0])

    assert flow(torch.ones(5)) == pytest.approx(flow(None), rel=1e-6)
    assert flow(maker.loss_dim_weights) != pytest.approx(flow(None), rel=1e-3)
