"""Checkpoint loading: key mapping, shape checks, deliberate skips, clear errors, size inference."""
import json

import numpy as np
import pytest
import torch

from physai_ros.engine import CheckpointError, Pi0Config, Pi0Engine, load_lerobot_checkpoint, random_weights
from physai_ros.engine.checkpoint.loader import SafetensorsFile, map_key, normalization_stats
from physai_ros.engine.checkpoint.writer import lerobot_key, save_lerobot_checkpoint
from physai_ros.engine.processor.normalizer import Normalizer

from engine_helpers import make_input

CFG = Pi0Config.preset("tiny")


def _write(tmp_path, cfg=CFG, extra=None, seed=0, mutate=None):
    w = random_weights(cfg, seed)
    if mutate:
        mutate(w)
    save_lerobot_checkpoint(tmp_path, cfg, lambda name, shape: w[name], extra=extra)
    return w


def test_round_trip_every_tensor_and_sizes_from_shapes(tmp_path):
    lm_head = torch.randn(CFG.vocab_size, CFG.expert.width)
    w = _write(tmp_path, extra={"model.paligemma_with_expert.gemma_expert.lm_head.weight": lm_head})
    # tiny has 2 KV heads of dim 16: head_dim is not readable from shapes, so it is passed.
    cfg, loaded = load_lerobot_checkpoint(tmp_path, head_dim=16, vision_heads=2)
    assert (cfg.vlm, cfg.expert, cfg.vision, cfg.vocab_size) == (CFG.vlm, CFG.expert, CFG.vision, CFG.vocab_size)
    assert (cfg.chunk_size, cfg.max_state_dim, cfg.max_action_dim) == (CFG.chunk_size, CFG.max_state_dim, CFG.max_action_dim)
    assert set(loaded) == set(w)  # expert lm_head skipped on purpose, everything else consumed
    for k in w:
        assert torch.equal(loaded[k], w[k]), k


def test_single_kv_head_default_infers_head_dim(tmp_path):
    cfg = Pi0Config.preset("tiny_mqa", vision=Pi0Config.preset("tiny").vision.__class__(
        width=32, depth=1, mlp_dim=64, num_heads=16, patch_size=14, image_size=28))
    _write(tmp_path, cfg=cfg)
    got, _ = load_lerobot_checkpoint(tmp_path)  # defaults: 1 KV head -> head_dim = rows of k_proj
    assert got.vlm == cfg.vlm and got.expert == cfg.expert and got.vision == cfg.vision


def test_engine_from_checkpoint_matches_engine_from_weights(tmp_path):
    w = _write(tmp_path, seed=3)
    gen = torch.Generator().manual_seed(0)
    batch = [make_input(CFG, 2, 6, gen)]
    ref = Pi0Engine(CFG, {k: v.clone() for k, v in w.items()}, fast=False).infer(batch)[0]
    eng = Pi0Engine.from_lerobot_checkpoint(tmp_path, head_dim=16, vision_heads=2)
    torch.testing.assert_close(eng.infer(batch)[0].actions, ref.actions, rtol=0, atol=2e-5)


def test_tied_embedding_read_from_lm_head(tmp_path):
    w = random_weights(CFG, 0)
    save_lerobot_checkpoint(tmp_path, CFG, lambda n, s: w[n])
    # Rewrite without embed_tokens but with the tied lm_head, as save_pretrained does.
    sf = SafetensorsFile(tmp_path / "model.safetensors")
    from safetensors.torch import load_file, save_file

    t = load_file(str(tmp_path / "model.safetensors"))
    emb = t.pop(lerobot_key("vlm.embed"))
    t["model.paligemma_with_expert.paligemma.lm_head.weight"] = emb
    save_file(t, str(tmp_path / "model.safetensors"))
    _, loaded = load_lerobot_checkpoint(tmp_path, head_dim=16, vision_heads=2)
    assert torch.equal(loaded["vlm.embed"], w["vlm.embed"])
    assert len(sf.entries) == len(t)


def test_unknown_key_is_named(tmp_path):
    _write(tmp_path, extra={"model.some_new_head.weight": torch.zeros(2)})
    with pytest.raises(CheckpointError, match="model.some_new_head.weight"):
        load_lerobot_checkpoint(tmp_path, head_dim=16, vision_heads=2)


def test_adarms_key_hints_at_pi05():
    with pytest.raises(CheckpointError, match="pi0.5"):
        map_key("model.paligemma_with_expert.gemma_expert.model.layers.0.input_layernorm.dense.weight")


def test_shape_mismatch_names_the_key(tmp_path):
    def bad(w):
        w["expert.layers.1.up"] = torch.zeros(CFG.expert.mlp_dim + 1, CFG.expert.width)

    cfg = CFG
    w = random_weights(cfg, 0)
    bad(w)
    shapes = {}

    # The writer checks shapes too, so write the bad tensor through `extra` under the real key.
    key = lerobot_key("expert.layers.1.up")
    save_lerobot_checkpoint(tmp_path, cfg, lambda n, s: w[n] if n != "expert.layers.1.up" else torch.zeros(s))
    from safetensors.torch import load_file, save_file

    t = load_file(str(tmp_path / "model.safetensors"))
    t[key] = w["expert.layers.1.up"]
    save_file(t, str(tmp_path / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"up_proj.*\[65, 32\].*\[64, 32\]"):
        load_lerobot_checkpoint(tmp_path, head_dim=16, vision_heads=2)
    del shapes


def test_missing_tensor_is_named(tmp_path):
    _write(tmp_path)
    from safetensors.torch import load_file, save_file

    t = load_file(str(tmp_path / "model.safetensors"))
    del t[lerobot_key("vlm.layers.1.down")]
    save_file(t, str(tmp_path / "model.safetensors"))
    with pytest.raises(CheckpointError, match="vlm.layers.1.down"):
        load_lerobot_checkpoint(tmp_path, head_dim=16, vision_heads=2)


def test_not_a_pi0_checkpoint(tmp_path):
    with pytest.raises(CheckpointError, match="config.json"):
        load_lerobot_checkpoint(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"type": "act"}))
    with pytest.raises(CheckpointError, match="'act'"):
        load_lerobot_checkpoint(tmp_path)


def test_truncated_file_is_reported(tmp_path):
    _write(tmp_path)
    p = tmp_path / "model.safetensors"
    p.write_bytes(p.read_bytes()[:-100])
    with pytest.raises(CheckpointError, match="truncated"):
        load_lerobot_checkpoint(tmp_path, head_dim=16, vision_heads=2)


def test_progress_reported_for_large_checkpoints(tmp_path, monkeypatch):
    _write(tmp_path)
    import physai_ros.engine.checkpoint.loader as wmod

    monkeypatch.setattr(wmod, "PROGRESS_MIN_BYTES", 0)
    seen = []
    load_lerobot_checkpoint(tmp_path, head_dim=16, vision_heads=2, progress=seen.append)
    assert seen and "GiB" in seen[-1]


def test_bf16_load_and_normalisation_stats(tmp_path):
    mean, std = torch.randn(6), torch.rand(6) + 0.5
    _write(tmp_path, extra={"normalize_inputs.buffer_observation_state.mean": mean,
                            "normalize_inputs.buffer_observation_state.std": std})
    _, loaded = load_lerobot_checkpoint(tmp_path, dtype=torch.bfloat16, head_dim=16, vision_heads=2)
    assert all(t.dtype == torch.bfloat16 for t in loaded.values())
    stats = normalization_stats(tmp_path, feature_names=["observation.state"])
    assert torch.equal(stats["observation.state"]["mean"], mean)
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg.update(input_features={"observation.state": {"type": "STATE", "shape": [6]}},
               output_features={"action": {"type": "ACTION", "shape": [5]}},
               normalization_mapping={"STATE": "MEAN_STD", "ACTION": "MEAN_STD"})
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    # Action statistics missing: refused at load naming the feature (never a silent identity).
    with pytest.raises(CheckpointError, match="'action'.*mean, std missing"):
        Normalizer.from_checkpoint(tmp_path)
    a_mean, a_std = torch.randn(5), torch.rand(5) + 0.5
    _write(tmp_path, extra={"normalize_inputs.buffer_observation_state.mean": mean,
                            "normalize_inputs.buffer_observation_state.std": std,
                            "unnormalize_outputs.buffer_action.mean": a_mean,
                            "unnormalize_outputs.buffer_action.std": a_std})
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    # The serving normaliser reads them as a user's LeRobot checkpoint carries them.
    n = Normalizer.from_checkpoint(tmp_path)
    assert n.state.mode == "MEAN_STD" and n.action.mode == "MEAN_STD"
    raw = torch.randn(6)
    np.testing.assert_allclose(n.normalize_state(raw.numpy(), 8)[:6], ((raw - mean) / (std + 1e-8)).numpy(),
                               rtol=1e-6, atol=1e-6)
    assert n.unnormalize_actions(np.ones((3, 8), np.float32), 5).shape == (3, 5)


def test_head_counts_the_tensors_cannot_show_name_their_override(tmp_path):
    """A vision tower whose width 16 heads do not divide: the error names the fleet.yaml keys and
    the loader arguments; given them, the checkpoint loads. (Counts that do divide cannot be told
    from the shapes at all: that is why they are parameters.)"""
    import dataclasses

    from physai_ros.engine.types import VisionSpec

    base = Pi0Config.preset("tiny")
    cfg = dataclasses.replace(base, vision=VisionSpec(width=36, depth=1, mlp_dim=24, num_heads=3, image_size=28))
    w = random_weights(cfg, 3)
    save_lerobot_checkpoint(tmp_path, cfg, lambda n, s: w[n])
    with pytest.raises(CheckpointError, match=r"vision_heads=16 .*server\.model\.vision_heads in fleet\.yaml"):
        load_lerobot_checkpoint(tmp_path, head_dim=16)
    loaded_cfg, _ = load_lerobot_checkpoint(tmp_path, head_dim=16, vision_heads=3)
    assert loaded_cfg.vision.num_heads == 3


def test_fleet_yaml_model_head_counts():
    from physai_ros.config_fields import FleetConfigError
    from physai_ros.config.server import _parse_model

    m = _parse_model({"checkpoint": "c", "tokenizer": "t", "vision_heads": 3, "head_dim": 16}, "server.model")
    assert m.load_args() == {"vision_heads": 3, "head_dim": 16}
    assert _parse_model({"checkpoint": "c", "tokenizer": "t"}, "server.model").load_args() == {}
    with pytest.raises(FleetConfigError, match=r"server\.model\.vision_heads: expected an integer >= 1"):
        _parse_model({"checkpoint": "c", "tokenizer": "t", "vision_heads": 0}, "server.model")
