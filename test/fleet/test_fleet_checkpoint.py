"""A user's checkpoint directory through physai-fleet --checkpoint and fleet.yaml: LeRobot >= 0.4
directories are accepted, a missing directory or missing statistics stop physai-fleet at once
(exit 2, the exact reason), the server receives the replacement, and the engines are built with
the float32 variant of the checkpoint's LeRobot family."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml
from lerobot_layout import dataset_stats, write_v03, write_v04

from physai_ros.config.fleet import default_fleet_path, load_fleet
from physai_ros.fleet.arguments import parse_args
from physai_ros.fleet.cli import build_fleet
from physai_ros.serving.startup.preflight import ServerFilesError, check_server_files

REPO = Path(__file__).resolve().parents[2]
FIXTURE_03 = REPO / "test" / "fixtures" / "lerobot_pi0" / "checkpoint"
FIXTURE_06 = REPO / "test" / "fixtures" / "lerobot_pi05"


def _exit_2(argv, capsys) -> str:
    with pytest.raises(SystemExit) as e:
        parse_args(argv)
    assert e.value.code == 2
    return capsys.readouterr().err


def test_checkpoint_flag_accepts_a_lerobot_04_directory_and_reaches_the_server(tmp_path):
    d = write_v04(tmp_path / "my_policy")
    args = parse_args(["--checkpoint", str(d), "--robots", "1"])
    server = next(s for s in build_fleet(args) if s.name == "policy_server")
    assert server.params["checkpoint"] == str(d.resolve())
    assert f"checkpoint:={d.resolve()}" in " ".join(server.argv())
    # Without the flag the server keeps the fleet file's model (no extra parameter).
    plain = next(s for s in build_fleet(parse_args(["--robots", "1"])) if s.name == "policy_server")
    assert "checkpoint" not in plain.params


def test_checkpoint_flag_refusals_exit_2_with_the_reason(tmp_path, capsys):
    err = _exit_2(["--checkpoint", str(tmp_path / "nowhere")], capsys)
    assert f"the checkpoint directory {tmp_path / 'nowhere'} does not exist" in err
    stats = dataset_stats()
    del stats["observation.state"]
    d = write_v04(tmp_path / "no_state_stats", stats=stats)
    err = _exit_2(["--checkpoint", str(d)], capsys)
    assert "physai-fleet: error: server.model.checkpoint" in err
    assert "policy_preprocessor_step_6_normalizer_processor.safetensors: feature 'observation.state'" in err
    assert "statistics mean, std missing" in err
    d = write_v04(tmp_path / "long_stats", state_dim=6, decl_state_dim=3)
    assert "statistics cover 6 values but the feature declares 3" in _exit_2(["--checkpoint", str(d)], capsys)
    d = write_v04(tmp_path / "unknown_step")
    pre = d / "policy_preprocessor.json"
    pre.write_text(pre.read_text().replace('"pi0_new_line_processor"', '"my_crop_processor"'))
    assert "step 2 'my_crop_processor' is not one this server reproduces" in _exit_2(["--checkpoint", str(d)], capsys)
    d = write_v04(tmp_path / "cut")
    weights = d / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-4])
    assert "the file is cut short" in _exit_2(["--checkpoint", str(d)], capsys)
    d = write_v04(tmp_path / "mixed")
    write_v03(tmp_path / "mixed")  # 0.3 buffers into the same directory
    assert "contradictory checkpoint format" in _exit_2(["--checkpoint", str(d)], capsys)
    assert "cannot be used with --scripted" in _exit_2(["--checkpoint", str(d), "--scripted"], capsys)


def test_fleet_yaml_accepts_a_lerobot_04_directory_and_names_missing_statistics(tmp_path):
    doc = yaml.safe_load(default_fleet_path().read_text())
    doc["server"]["model"]["checkpoint"] = "ckpt"  # relative to the fleet file
    for task in doc["tasks"].values():  # the streaming expert is pi0-only
        task.pop("mode", None)
    doc["robots"] = doc["robots"][:2]  # two cameras each, as the checkpoint has (robot_2 has one)
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(yaml.safe_dump(doc))
    write_v04(tmp_path / "ckpt", policy="pi05")
    check_server_files(load_fleet(fleet))
    (tmp_path / "ckpt" / "policy_postprocessor_step_0_unnormalizer_processor.safetensors").unlink()
    with pytest.raises(ServerFilesError) as err:
        check_server_files(load_fleet(fleet))
    msg = str(err.value)
    assert msg.startswith("server.model.checkpoint 'ckpt'") and str(fleet) in msg
    assert "policy_postprocessor_step_0_unnormalizer_processor.safetensors (the normalisation statistics) is missing" in msg


def test_with_checkpoint_resolves_from_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = load_fleet(None).with_checkpoint("rel/policy").with_num_robots(2)
    assert cfg.server.model.checkpoint == str(tmp_path / "rel" / "policy") and cfg.server.model.preset is None


@pytest.mark.parametrize("ckpt, variant", [
    (FIXTURE_03, ("accumulate", "divide")),
    (FIXTURE_06 / "pi0_v06", ("multiply", "multiply")),
])
def test_engines_run_the_checkpoint_familys_variant(ckpt, variant):
    from physai_ros.serving.startup.engine_builder import build_engine_slots, model_format

    cfg = load_fleet(None).with_checkpoint(ckpt)
    assert (model_format(cfg).time_schedule, model_format(cfg).rope_style) == variant
    config = build_engine_slots(cfg)[0].engine.config
    assert (config.time_schedule, config.rope_style) == variant


@pytest.mark.ros
def test_policy_server_node_takes_the_checkpoint_parameter(tmp_path):
    """physai-fleet hands --checkpoint to the server as a parameter; the node applies it before
    its own preflight, so missing statistics end it in one line (exit 1, no traceback)."""
    import os
    import subprocess

    stats = dataset_stats()
    del stats["action"]
    d = write_v04(tmp_path / "no_action_stats", stats=stats)
    cmd = [sys.executable, "-m", "physai_ros.nodes.policy_server", "--ros-args", "-p", f"checkpoint:={d}"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path, env=dict(os.environ))
    text = out.stdout + out.stderr
    assert out.returncode == 1, text[-3000:]
    assert f"cannot start: server.model.checkpoint '{d}'" in text and "feature 'action' (ACTION, MEAN_STD)" in text
    assert "Traceback" not in text


def test_a_lerobot_checkpoint_with_another_tokenizer_is_refused(tmp_path):
    """The default fleet's tokenizer (512 tokens) against a model that embeds another vocabulary:
    every id would be valid and the policy would read nonsense, so the core refuses to start."""
    from physai_ros.config.fleet import FleetConfigError
    from physai_ros.serving.startup.engine_builder import build_core
    from physai_ros.engine.processor.tokenizer import build_default_tokenizer

    tok = tmp_path / "other_tokenizer.json"
    build_default_tokenizer(300).save(str(tok))
    cfg = load_fleet(None).with_checkpoint(FIXTURE_06 / "pi05")
    cfg = cfg.__class__(**{**cfg.__dict__, "server": cfg.server.__class__(**{
        **cfg.server.__dict__, "model": cfg.server.model.__class__(**{**cfg.server.model.__dict__,
                                                                        "tokenizer": str(tok)})})})
    with pytest.raises(FleetConfigError, match=r"has 300 tokens but the checkpoint's model embeds 512"):
        build_core(cfg)


def test_the_core_serves_a_pi05_checkpoint_with_the_state_in_its_prompt():
    """The default fleet with the pi0.5 fixture: the prompt style follows the checkpoint."""
    from physai_ros.serving.startup.engine_builder import build_core

    cfg = load_fleet(None).with_checkpoint(FIXTURE_06 / "pi05")
    core = build_core(cfg)
    runner = core.action_runner
    assert core.model_config.policy == "pi05" and runner.prompt_style.name == "lerobot_pi05"
    assert runner.tokenizer.verbatim


def test_a_pi05_checkpoint_with_a_streaming_task_stops_before_anything_starts():
    """The default fleet has a streaming task; the streaming expert is pi0-only, so physai-fleet
    --checkpoint <pi0.5> names the task and the fix instead of a traceback from the server."""
    cfg = load_fleet(None).with_checkpoint(FIXTURE_06 / "pi05")
    with pytest.raises(ServerFilesError, match=r"tasks\.reach_streaming\.mode: streaming needs a pi0 checkpoint.*"
                                               r"is pi05: set `mode: chunked`"):
        check_server_files(cfg)
