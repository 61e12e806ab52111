"""The one normaliser: our statistics file, a LeRobot checkpoint's stored statistics and modes,
LeRobot's formulas (MEAN_STD, MIN_MAX, IDENTITY), and which source wins."""
import json

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from physai_ros.serving.normalizer import STATS_FILE, FeatureStats, Normalizer


def _lerobot_dir(tmp_path, mapping, stats):
    """A LeRobot >= 0.4 style directory: config.json plus a processor state file of
    "<feature>.<stat>" tensors."""
    (tmp_path / "config.json").write_text(json.dumps({
        "type": "pi0", "normalization_mapping": mapping,
        "input_features": {"observation.state": {"type": "STATE", "shape": [3]}},
        "output_features": {"action": {"type": "ACTION", "shape": [2]}}}))
    save_file({k: torch.tensor(v, dtype=torch.float32) for k, v in stats.items()},
              str(tmp_path / "policy_preprocessor_step_3_normalizer_processor.safetensors"))
    return tmp_path


def test_lerobot_checkpoint_modes_and_formulas(tmp_path):
    d = _lerobot_dir(tmp_path, {"STATE": "MIN_MAX", "ACTION": "MEAN_STD", "VISUAL": "IDENTITY"}, {
        "observation.state.min": [0.0, -1.0, 2.0], "observation.state.max": [1.0, 1.0, 4.0],
        "action.mean": [10.0, 20.0], "action.std": [0.5, 4.0]})
    n = Normalizer.from_checkpoint(d)
    assert n.state.mode == "MIN_MAX" and n.action.mode == "MEAN_STD"
    x = np.array([0.5, 0.0, 4.0], np.float32)
    np.testing.assert_allclose(n.normalize_state(x, 5), [0.0, 0.0, 1.0, 0, 0], atol=1e-6)
    acts = np.array([[0.0, 0.0, 7.0], [2.0, -1.0, 7.0]], np.float32)
    np.testing.assert_allclose(n.unnormalize_actions(acts, 2), [[10, 20], [11, 16]], atol=1e-5)


def test_min_max_inverts_what_it_normalises():
    s = FeatureStats("MIN_MAX", min=np.array([-2.0, 0.0], np.float32), max=np.array([2.0, 10.0], np.float32))
    x = np.array([[1.0, 7.5], [-2.0, 0.0]], np.float32)
    np.testing.assert_allclose(s.inverse(s.forward(x)), x, atol=1e-5)


def test_identity_where_the_checkpoint_stores_nothing_and_bad_modes_are_named(tmp_path):
    d = _lerobot_dir(tmp_path, {"STATE": "MEAN_STD", "ACTION": "MEAN_STD"},
                     {"observation.state.mean": [0.0, 0.0, 0.0], "observation.state.std": [1.0, 1.0, 1.0]})
    n = Normalizer.from_checkpoint(d)
    assert n.state is not None and n.action is None
    (tmp_path / "other").mkdir()
    d2 = _lerobot_dir(tmp_path / "other", {"STATE": "QUANTILES"},
                      {"observation.state.mean": [0.0] * 3, "observation.state.std": [1.0] * 3})
    with pytest.raises(Exception, match="QUANTILES"):
        Normalizer.from_checkpoint(d2)
    with pytest.raises(ValueError, match="needs statistics"):
        FeatureStats("MEAN_STD", mean=np.zeros(2, np.float32))


def test_our_statistics_file_wins_over_stored_buffers(tmp_path):
    d = _lerobot_dir(tmp_path, {"STATE": "MEAN_STD", "ACTION": "MEAN_STD"},
                     {"action.mean": [5.0, 5.0], "action.std": [1.0, 1.0]})
    (d / STATS_FILE).write_text(json.dumps({"action": {"mean": [1.0, 2.0], "std": [1.0, 1.0]}}))
    n = Normalizer.from_checkpoint(d)
    np.testing.assert_allclose(n.unnormalize_actions(np.zeros((1, 4), np.float32), 2), [[1.0, 2.0]])
    assert Normalizer.from_checkpoint(tmp_path / "nowhere").state is None


def test_a_served_lerobot_checkpoint_uses_its_stored_statistics():
    """A LeRobot checkpoint is served with the normalisation stored beside its weights (before
    the serving redesign only our own statistics file was read, and a LeRobot checkpoint's
    state and actions went through un-normalised)."""
    from pathlib import Path

    import yaml

    from physai_ros.engine.weights import normalization_stats
    from physai_ros.serving.config import default_fleet_path, parse_fleet
    from physai_ros.serving.factory import build_core

    ckpt = Path(__file__).resolve().parents[1] / "fixtures" / "lerobot_pi0" / "checkpoint"
    doc = yaml.safe_load(default_fleet_path().read_text())
    doc["server"]["model"] = {"checkpoint": str(ckpt), "tokenizer": "package://physai_ros/assets/tokenizer.json",
                              "max_token_len": 16}
    core = build_core(parse_fleet(doc, source=str(default_fleet_path())), instance_id="lerobot")
    stored = normalization_stats(ckpt, feature_names=["observation.state", "action"])
    n = core.action_runner.normalizer
    assert n.state.mode == n.action.mode == "MEAN_STD"
    np.testing.assert_array_equal(n.state.std, stored["observation.state"]["std"].numpy())
    np.testing.assert_array_equal(n.action.mean, stored["action"]["mean"].numpy())
    acts = np.zeros((2, core.model_config.max_action_dim), np.float32)
    np.testing.assert_allclose(n.unnormalize_actions(acts, 5), np.tile(stored["action"]["mean"].numpy(), (2, 1)))
