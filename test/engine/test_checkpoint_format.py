"""engine.checkpoint.format: the LeRobot family is read from a directory's files (processor files,
normalize_* buffers, config.json keys, our statistics file), contradictions are refused naming
both sides, and a variant override that contradicts the family needs force_variant."""
import json
from pathlib import Path

import numpy as np
import pytest
from lerobot_layout import CONFIG_03, write_v03, write_v04, write_weights

from physai_ros.engine.checkpoint.format import (LEROBOT_03, LEROBOT_04, PHYSAI, CheckpointError, config_overrides_for,
                                                 detect_format, resolve_overrides, weight_keys)
from physai_ros.errors import UserInputError

REPO = Path(__file__).resolve().parents[2]
FIXTURE_03 = REPO / "test" / "fixtures" / "lerobot_pi0" / "checkpoint"
SHIPPED = REPO / "physai_ros" / "assets" / "policy" / "sim_pi0"


def test_lerobot_03_fixture_accumulates_and_divides():
    fmt = detect_format(FIXTURE_03)
    assert (fmt.policy_type, fmt.family, fmt.time_schedule, fmt.rope_style) == ("pi0", LEROBOT_03, "accumulate", "divide")
    ev = "; ".join(fmt.evidence)
    assert "normalize_* buffers" in ev and "num_steps" in ev and "no processor files" in ev
    assert config_overrides_for(fmt)["time_schedule"] == "accumulate"


@pytest.mark.parametrize("policy", ["pi0", "pi05"])
def test_lerobot_04_directory_multiplies(tmp_path, policy):
    fmt = detect_format(write_v04(tmp_path / policy, policy=policy))
    assert (fmt.policy_type, fmt.family, fmt.time_schedule, fmt.rope_style) == (policy, LEROBOT_04, "multiply", "multiply")
    ev = "; ".join(fmt.evidence)
    assert "policy_preprocessor.json and policy_postprocessor.json present" in ev and "num_inference_steps" in ev
    assert "no normalize_* buffers" in ev
    overrides = config_overrides_for(fmt)
    assert overrides["time_schedule"] == overrides["rope_style"] == "multiply"
    assert fmt.as_status()["family"] == LEROBOT_04 and LEROBOT_04 in fmt.summary()


def test_our_trained_policy_keeps_the_engine_defaults():
    """Our writer uses 0.6.1-style config keys but no LeRobot normalisation files; the
    statistics file says it is ours, trained with the engine's defaults."""
    fmt = detect_format(SHIPPED)
    assert (fmt.family, fmt.time_schedule, fmt.rope_style) == (PHYSAI, "accumulate", "divide")
    assert any("normalization_stats.json" in e for e in fmt.evidence)


def test_other_policy_types_are_refused_naming_config_json(tmp_path):
    d = write_v04(tmp_path / "act")
    cfg = json.loads((d / "config.json").read_text())
    cfg["type"] = "act"
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match=r"config\.json: key 'type' is 'act'"):
        detect_format(d)


def _add_buffers(d: Path) -> None:
    write_weights(d, {"normalize_inputs.buffer_observation_state.mean": np.zeros(3, np.float32)})


@pytest.mark.parametrize("make, first, second", [
    (lambda d: (write_v04(d), _add_buffers(d)), "policy_preprocessor.json and policy_postprocessor.json present",
     "normalize_* buffers (normalize_inputs.buffer_observation_state.mean)"),
    (lambda d: write_v04(d, config_keys={**CONFIG_03}), "policy_preprocessor.json", "config.json has num_steps"),
    (lambda d: write_v03(d, config_keys={**CONFIG_03, "num_inference_steps": 10}),
     "config.json has num_inference_steps", "normalize_* buffers"),
    (lambda d: write_v03(d, buffers={}, config_keys={"num_steps": 10, "paligemma_variant": "gemma_2b"}),
     "config.json has paligemma_variant", "also has num_steps"),
])
def test_contradictory_evidence_names_both_sides(tmp_path, make, first, second):
    d = tmp_path / "ckpt"
    make(d)
    with pytest.raises(CheckpointError, match="contradictory checkpoint format") as err:
        detect_format(d)
    msg = str(err.value)
    assert first in msg and second in msg and "(LeRobot >= 0.4)" in msg and "(LeRobot <= 0.3)" in msg


def test_pi05_with_lerobot_03_facts_is_refused(tmp_path):
    d = write_v03(tmp_path / "ckpt")
    cfg = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**cfg, "type": "pi05"}))
    with pytest.raises(CheckpointError, match="type 'pi05' exists only since LeRobot 0.4, but the weights hold"):
        detect_format(d)


def test_half_a_processor_pair_and_no_evidence_are_refused(tmp_path):
    d = write_v04(tmp_path / "half")
    (d / "policy_postprocessor.json").unlink()
    with pytest.raises(CheckpointError, match="policy_preprocessor.json present but policy_postprocessor.json missing"):
        detect_format(d)
    d = write_v03(tmp_path / "bare", buffers={}, config_keys={})
    with pytest.raises(CheckpointError, match="cannot tell which LeRobot wrote this checkpoint"):
        detect_format(d)


def test_missing_directory_config_or_weights_are_named(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        detect_format(tmp_path / "nowhere")
    d = write_v04(tmp_path / "ckpt")
    (d / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="no model.safetensors"):
        detect_format(d)
    (d / "config.json").unlink()
    with pytest.raises(CheckpointError, match="no config.json"):
        detect_format(d)


def test_sharded_weights_are_read_through_their_index(tmp_path):
    d = write_v03(tmp_path / "ckpt")
    (d / "model.safetensors").rename(d / "model-00001-of-00001.safetensors")
    keys = ["normalize_inputs.buffer_observation_state.mean", "model.action_out_proj.bias"]
    (d / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {k: "model-00001-of-00001.safetensors" for k in keys}}))
    assert sorted(weight_keys(d)) == sorted(keys)
    assert detect_format(d).family == LEROBOT_03


def test_a_variant_override_contradicting_the_format_needs_force(tmp_path):
    fmt = detect_format(write_v04(tmp_path / "ckpt"))
    with pytest.raises(CheckpointError) as err:
        resolve_overrides(fmt, {"time_schedule": "accumulate"})
    msg = str(err.value)
    assert "time_schedule='accumulate' was asked for" in msg and "lerobot>=0.4" in msg
    assert "time_schedule='multiply'" in msg and "force_variant=True" in msg
    with pytest.raises(CheckpointError, match="rope_style='divide' was asked for"):
        resolve_overrides(fmt, {"rope_style": "divide"})
    forced = resolve_overrides(fmt, {"time_schedule": "accumulate", "num_steps": 5}, force_variant=True)
    assert forced["time_schedule"] == "accumulate" and forced["rope_style"] == "multiply" and forced["num_steps"] == 5
    assert resolve_overrides(fmt, {"time_schedule": "multiply"})["time_schedule"] == "multiply"
    with pytest.raises(CheckpointError, match="type 'pi0', but policy='pi05'"):
        resolve_overrides(fmt, {"policy": "pi05"}, force_variant=True)


def test_checkpoint_error_is_one_class_and_a_user_error():
    from physai_ros.engine.checkpoint import loader as weights

    assert weights.CheckpointError is CheckpointError and issubclass(CheckpointError, (ValueError, UserInputError))
