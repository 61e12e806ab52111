"""The one normaliser: our statistics file, a LeRobot >= 0.4 checkpoint's processors, a LeRobot
0.3 checkpoint's buffers, which source wins, and the refusals at load time (missing, unset or
too-short statistics name the file and the feature; no silent identity)."""
import json
from pathlib import Path

import numpy as np
import pytest
from lerobot_layout import ACTION, CAMERA, STATE, dataset_stats, f32, write_v03, write_v04

from physai_ros.engine.checkpoint.format import CheckpointError
from physai_ros.engine.processor import lerobot_steps as lp
from physai_ros.engine.processor.normalizer import STATS_FILE, FeatureStats, Normalizer

REPO = Path(__file__).resolve().parents[3]
SHIPPED = REPO / "physai_ros" / "assets" / "policy" / "sim_pi0"
FIXTURE_03 = REPO / "test" / "fixtures" / "lerobot_pi0" / "checkpoint"
FIXTURE_06 = REPO / "test" / "fixtures" / "lerobot_pi05"


def test_lerobot_04_checkpoint_modes_and_formulas(tmp_path):
    stats = {STATE: {"min": f32([0, -1, 2]), "max": f32([1, 1, 4])}, ACTION: {"mean": f32([10, 20]), "std": f32([0.5, 4])}}
    d = write_v04(tmp_path, norm_map={"STATE": "MIN_MAX", "ACTION": "MEAN_STD", "VISUAL": "IDENTITY"}, stats=stats)
    n = Normalizer.from_checkpoint(d)
    assert n.state.mode == "MIN_MAX" and n.action.mode == "MEAN_STD" and n.state.rules == "lerobot>=0.4"
    x = f32([0.5, 0.0, 4.0])
    np.testing.assert_allclose(n.normalize_state(x, 5), [0.0, 0.0, 1.0, 0, 0], atol=1e-6)
    np.testing.assert_array_equal(n.normalized_state(x), f32([0.0, 0.0, 1.0]))  # unpadded (pi0.5's prompt)
    acts = f32([[0.0, 0.0, 7.0], [2.0, -1.0, 7.0]])
    np.testing.assert_allclose(n.unnormalize_actions(acts, 2), [[10, 20], [11, 16]], atol=1e-5)
    assert "policy_preprocessor.json" in n.describe()["normalisation"]
    assert n.describe()["state"] == "MIN_MAX over 3 values (observation.state)"


def test_pi05_quantiles_from_its_processors(tmp_path):
    stats = dataset_stats(4, 3)
    n = Normalizer.from_checkpoint(write_v04(tmp_path, policy="pi05", stats=stats, state_dim=4, action_dim=3))
    assert n.state.mode == n.action.mode == "QUANTILES"
    s = stats[STATE]
    x = (s["q01"] + s["q99"]) / 2
    np.testing.assert_allclose(n.normalized_state(x), 0.0, atol=1e-6)
    np.testing.assert_array_equal(n.normalized_state(x), lp.normalize(x, lp.QUANTILES, s))
    np.testing.assert_allclose(n.unnormalize_actions(-np.ones((2, 8), np.float32), 3), [stats[ACTION]["q01"]] * 2,
                               rtol=1e-6)


@pytest.mark.parametrize("drop, feature, file", [
    (STATE, "observation.state", "policy_preprocessor_step_6_normalizer_processor.safetensors"),
    (ACTION, "action", "policy_preprocessor_step_6_normalizer_processor.safetensors"),
])
def test_missing_statistics_are_refused_naming_file_and_feature(tmp_path, drop, feature, file):
    stats = dataset_stats()
    del stats[drop]
    with pytest.raises(CheckpointError) as err:
        Normalizer.from_checkpoint(write_v04(tmp_path, stats=stats))
    msg = str(err.value)
    assert file in msg and f"feature {feature!r}" in msg and "statistics mean, std missing" in msg


def test_a_checkpoint_without_any_statistics_is_refused(tmp_path):
    with pytest.raises(CheckpointError, match=r"\(no state_file\): feature 'observation.state' \(STATE, MEAN_STD\): "
                                              "statistics mean, std missing"):
        Normalizer.from_checkpoint(write_v04(tmp_path, stats={}))


def test_statistics_shorter_than_the_declared_state_are_refused(tmp_path):
    with pytest.raises(CheckpointError, match=r"normalizer_processor\.safetensors: feature 'observation.state' .*"
                                              "statistics cover 3 values but the feature declares 6"):
        Normalizer.from_checkpoint(write_v04(tmp_path, state_dim=3, decl_state_dim=6))


def test_statistics_longer_than_the_declared_state_are_refused(tmp_path):
    with pytest.raises(CheckpointError, match=r"normalizer_processor\.safetensors: feature 'observation.state' .*"
                                              "statistics cover 6 values but the feature declares 3"):
        Normalizer.from_checkpoint(write_v04(tmp_path, state_dim=6, decl_state_dim=3))


def test_a_state_longer_than_the_statistics_is_refused_at_run_time(tmp_path):
    n = Normalizer.from_checkpoint(write_v04(tmp_path, state_dim=3))
    with pytest.raises(ValueError, match=r"observation\.state \(statistics from .*normalizer_processor\.safetensors\): "
                                         "4 values, but the statistics cover 3"):
        n.normalize_state(f32([1, 2, 3, 4]), 8)
    with pytest.raises(ValueError, match=r"action .*: 3 values, but the statistics cover 2"):
        n.unnormalize_actions(np.zeros((2, 8), np.float32), 3)
    assert n.normalize_state(f32([1, 2]), 8).shape == (8,)  # a robot may use the first values


def test_relative_actions_and_normalised_images_are_refused(tmp_path):
    with pytest.raises(CheckpointError, match=r"policy_preprocessor\.json: relative actions are enabled"):
        Normalizer.from_checkpoint(write_v04(tmp_path / "rel", relative=True))
    with pytest.raises(CheckpointError, match=f"feature '{CAMERA}' is VISUAL with MEAN_STD"):
        Normalizer.from_checkpoint(write_v04(tmp_path / "img", norm_map={"VISUAL": "MEAN_STD", "STATE": "MEAN_STD",
                                                                          "ACTION": "MEAN_STD"}))


def test_identity_features_and_state_left_out_by_normalize_observation_keys(tmp_path):
    n = Normalizer.from_checkpoint(write_v04(tmp_path / "id", norm_map={"STATE": "IDENTITY", "ACTION": "MEAN_STD"},
                                             stats={ACTION: dataset_stats()[ACTION]}))
    assert n.state is None and n.action is not None and n.describe()["state"] == "identity"
    n = Normalizer.from_checkpoint(write_v04(tmp_path / "keys", observation_keys=[CAMERA]))
    assert n.state is None and n.action.mode == "MEAN_STD"


def test_lerobot_03_buffers(tmp_path):
    n = Normalizer.from_checkpoint(FIXTURE_03)
    assert n.state.mode == n.action.mode == "MEAN_STD" and n.state.rules == "lerobot<=0.3"
    assert "model.safetensors" in n.source
    # 0.3's MIN_MAX keeps eps in the range: (x - min) / (max - min + 1e-8) * 2 - 1.
    buffers = {"normalize_inputs.buffer_observation_state.min": f32([0, 0]),
               "normalize_inputs.buffer_observation_state.max": f32([1e-7, 1]),
               "unnormalize_outputs.buffer_action.min": f32([-1, 0]),
               "unnormalize_outputs.buffer_action.max": f32([1, 4])}
    d = write_v03(tmp_path / "mm", {"STATE": "MIN_MAX", "ACTION": "MIN_MAX"}, buffers, state_dim=2, action_dim=2)
    n = Normalizer.from_checkpoint(d)
    out = n.normalized_state(f32([1e-7, 0.5]))
    assert abs(out[0] - (2 / 1.1 - 1)) < 1e-6 and out[1] == 0.0
    np.testing.assert_allclose(n.unnormalize_actions(f32([[0, 1]]), 2), [[0, 4]])


def test_lerobot_03_missing_or_unset_buffers_are_refused(tmp_path):
    d = write_v03(tmp_path / "noact", buffers={"normalize_inputs.buffer_observation_state.mean": f32([0, 0, 0]),
                                               "normalize_inputs.buffer_observation_state.std": f32([1, 1, 1])})
    with pytest.raises(CheckpointError, match=r"model\.safetensors unnormalize_outputs: feature 'action' "
                                              r"\(ACTION, MEAN_STD\): statistics mean, std missing"):
        Normalizer.from_checkpoint(d)
    inf = {"normalize_inputs.buffer_observation_state.mean": f32([np.inf] * 3),
           "normalize_inputs.buffer_observation_state.std": f32([np.inf] * 3),
           "unnormalize_outputs.buffer_action.mean": f32([0, 0]), "unnormalize_outputs.buffer_action.std": f32([1, 1])}
    with pytest.raises(CheckpointError, match="feature 'observation.state' .* statistic mean is not set"):
        Normalizer.from_checkpoint(write_v03(tmp_path / "inf", buffers=inf))


def test_min_max_inverts_what_it_normalises():
    for rules in ("lerobot<=0.3", "lerobot>=0.4"):
        s = FeatureStats("MIN_MAX", min=f32([-2.0, 0.0]), max=f32([2.0, 10.0]), rules=rules)
        x = f32([[1.0, 7.5], [-2.0, 0.0]])
        np.testing.assert_allclose(s.inverse(s.forward(x)), x, atol=1e-5)
    with pytest.raises(ValueError, match="needs statistics"):
        FeatureStats("MEAN_STD", mean=np.zeros(2, np.float32))
    with pytest.raises(ValueError, match="expected one of"):
        FeatureStats("IDENTITY")


def test_our_statistics_file_wins_and_a_missing_directory_is_an_error(tmp_path):
    d = write_v04(tmp_path / "ckpt", stats={ACTION: {"mean": f32([5, 5]), "std": f32([1, 1])}})
    (d / STATS_FILE).write_text(json.dumps({"action": {"mean": [1.0, 2.0], "std": [1.0, 1.0]}}))
    n = Normalizer.from_checkpoint(d)
    np.testing.assert_allclose(n.unnormalize_actions(np.zeros((1, 4), np.float32), 2), [[1.0, 2.0]])
    assert n.state is None  # ours: training left it un-normalised
    with pytest.raises(CheckpointError, match="does not exist"):
        Normalizer.from_checkpoint(tmp_path / "nowhere")
    assert Normalizer.from_file(None).state is None  # a preset model: nothing to normalise with


def test_the_shipped_policy_keeps_loading():
    n = Normalizer.from_checkpoint(SHIPPED)
    assert n.state.inverse_adds_eps and n.state.dim == n.action.dim == 5 and STATS_FILE in n.source


@pytest.mark.parametrize("name", ["pi0_v06", "pi05"])
def test_lerobot_061_fixture_checkpoints(name):
    """The 0.6.1 fixture's checkpoints (LeRobot's own save_pretrained, test/fixtures/lerobot_pi05):
    our normalised state and un-normalised chunk match what LeRobot's preprocessor and
    postprocessor gave on the recorded pipeline cases."""
    from safetensors.numpy import load_file

    from physai_ros.engine.checkpoint.format import detect_format

    manifest = json.loads((FIXTURE_06 / "manifest.json").read_text())
    info = manifest["checkpoints"][name]
    assert detect_format(FIXTURE_06 / info["dir"]).family == "lerobot>=0.4"
    n = Normalizer.from_checkpoint(FIXTURE_06 / info["dir"])
    assert (n.state.mode, n.action.mode) == (info["normalization_mapping"]["STATE"],
                                             info["normalization_mapping"]["ACTION"])
    cases = load_file(str(FIXTURE_06 / "cases.safetensors"))
    prefixes = sorted({k.rsplit(".expected_normalized_state", 1)[0] for k in cases
                       if k.startswith(name + ".pipe") and k.endswith(".expected_normalized_state")})
    assert prefixes, f"no {name}.pipe* cases in {FIXTURE_06 / 'cases.safetensors'}"
    for p in prefixes:
        raw, expected = cases[p + ".observation.state"], cases[p + ".expected_normalized_state"]
        got = np.stack([n.normalized_state(s) for s in raw])
        np.testing.assert_array_max_ulp(got, expected, maxulp=1)
        model, robot = cases[p + ".expected_model_actions"], cases[p + ".expected_actions"]
        got = np.stack([n.unnormalize_actions(a, info["action_dim"]) for a in model])
        np.testing.assert_array_max_ulp(got, robot, maxulp=1)


def test_a_served_lerobot_checkpoint_uses_its_stored_statistics(tmp_path):
    """A LeRobot checkpoint is served with the normalisation stored beside its weights (before
    the serving redesign only our own statistics file was read, and a LeRobot checkpoint's
    state and actions went through un-normalised)."""
    import yaml
    from tokenizers import Tokenizer

    from physai_ros.engine.checkpoint.loader import normalization_stats
    from physai_ros.config.fleet import default_fleet_path, parse_fleet
    from physai_ros.serving.startup.engine_builder import build_core
    from physai_ros.engine.processor.tokenizer import build_default_tokenizer

    # The fixture's random model embeds 1024 tokens; a LeRobot checkpoint is refused with a far
    # smaller tokenizer (factory), so ours is padded to its size with placeholder tokens.
    tok: Tokenizer = build_default_tokenizer()
    tok.add_tokens([f"<extra_{i}>" for i in range(1024 - tok.get_vocab_size())])
    tok.save(str(tmp_path / "tokenizer.json"))
    doc = yaml.safe_load(default_fleet_path().read_text())
    doc["server"]["model"] = {"checkpoint": str(FIXTURE_03), "tokenizer": str(tmp_path / "tokenizer.json"),
                              "max_token_len": 16}
    core = build_core(parse_fleet(doc, source=str(default_fleet_path())), instance_id="lerobot")
    stored = normalization_stats(FIXTURE_03, feature_names=["observation.state", "action"])
    n = core.action_runner.normalizer
    assert n.state.mode == n.action.mode == "MEAN_STD"
    np.testing.assert_array_equal(n.state.std, stored["observation.state"]["std"].numpy())
    np.testing.assert_array_equal(n.action.mean, stored["action"]["mean"].numpy())
    acts = np.zeros((2, core.model_config.max_action_dim), np.float32)
    np.testing.assert_allclose(n.unnormalize_actions(acts, 5), np.tile(stored["action"]["mean"].numpy(), (2, 1)))
