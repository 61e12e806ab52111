"""A node given a bad fleet file or a missing checkpoint says so in one line and exits 1 (no
traceback, nothing half-started): what a user sees from `ros2 launch` or `ros2 run`."""
import os
import subprocess
import sys

import pytest
import yaml

from physai_ros.config.fleet import default_fleet_path

pytestmark = pytest.mark.ros


def _node(module: str, fleet, *extra, cwd):
    cmd = [sys.executable, "-m", f"physai_ros.nodes.{module}", "--ros-args", "-p", f"fleet_file:={fleet}", *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=cwd, env=dict(os.environ))


def _fleet(tmp_path, name, edit):
    doc = yaml.safe_load(default_fleet_path().read_text())
    edit(doc)
    p = tmp_path / name
    p.write_text(yaml.safe_dump(doc))
    return p


def test_policy_server_with_a_missing_checkpoint(tmp_path):
    fleet = _fleet(tmp_path, "missing.yaml",
                   lambda d: d["server"]["model"].update(checkpoint=str(tmp_path / "nowhere")))
    out = _node("policy_server", fleet, cwd=tmp_path)
    text = out.stdout + out.stderr
    assert out.returncode == 1, text[-3000:]
    assert (f"cannot start: server.model.checkpoint '{tmp_path / 'nowhere'}' (in {fleet}): "
            f"the checkpoint directory {tmp_path / 'nowhere'} does not exist") in text
    assert "Traceback" not in text


def test_robot_client_with_a_typo_in_the_fleet_file(tmp_path):
    fleet = _fleet(tmp_path, "typo.yaml", lambda d: d["tasks"]["reach_goal"].update(fallback="hodl"))
    out = _node("robot_client", fleet, "-p", "robot_id:=robot_1", cwd=tmp_path)
    text = out.stdout + out.stderr
    assert out.returncode == 1, text[-3000:]
    assert "cannot start: tasks.reach_goal.fallback: expected one of" in text and "'hodl'" in text
    assert "Traceback" not in text


def test_policy_server_with_cut_weights(tmp_path):
    """A model.safetensors cut short (an interrupted download) stops the node at its start, in one
    line, before the model loads."""
    import shutil

    from physai_ros.config.fleet import load_fleet
    from physai_ros.serving.startup.preflight import checkpoint_dir

    ckpt = tmp_path / "ckpt"
    shutil.copytree(checkpoint_dir(load_fleet(None)), ckpt)
    weights = ckpt / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    fleet = _fleet(tmp_path, "cut.yaml", lambda d: d["server"]["model"].update(checkpoint=str(ckpt)))
    out = _node("policy_server", fleet, cwd=tmp_path)
    text = out.stdout + out.stderr
    assert out.returncode == 1, text[-3000:]
    assert f"cannot start: server.model.checkpoint '{ckpt}' (in {fleet}): {weights}: " in text
    assert "the file is cut short (an interrupted download?)" in text and "Traceback" not in text
