"""The editable install (`make setup`) has the layout ROS tools look for: the ament index marker,
share/physai_ros linked to this checkout, lib/physai_ros executables (scripts/install_ament_layout.py),
and the launch file's defaults resolve and load from it."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ament_index_python.packages import get_package_share_directory

from launch_description import LaunchToolsMissing, evaluate, load_launch_file
from ros2_tools import tools_missing

REPO = Path(__file__).resolve().parents[2]
PREFIX = Path(sys.prefix)
EXECUTABLES = ["diagnostics_aggregator", "engine_worker", "openpi_gateway", "physai-fleet", "policy_server",
               "robot_client", "sim_robot", "trajectory_controller"]


def test_venv_has_the_ament_layout(monkeypatch):
    assert (PREFIX / "share" / "ament_index" / "resource_index" / "packages" / "physai_ros").is_file()
    monkeypatch.setenv("AMENT_PREFIX_PATH", str(PREFIX))
    share = Path(get_package_share_directory("physai_ros"))
    assert share == PREFIX / "share" / "physai_ros"
    for name in ("package.xml", "launch/fleet.launch.py", "config/fleet.yaml", "config/fastdds_shm.xml"):
        assert (share / name).resolve() == (REPO / name).resolve(), name  # live links into the checkout
    for exe in EXECUTABLES:
        path = PREFIX / "lib" / "physai_ros" / exe
        assert path.is_file() and os.access(path, os.X_OK), exe


def test_launch_defaults_from_the_venv_share_resolve_and_load(monkeypatch):
    monkeypatch.setenv("AMENT_PREFIX_PATH", str(PREFIX))
    launch_file = Path(get_package_share_directory("physai_ros")) / "launch" / "fleet.launch.py"
    try:
        mod = load_launch_file(launch_file)
    except LaunchToolsMissing as e:
        tools_missing(str(e))
    ev = evaluate(mod)
    assert Path(ev.declared["fleet_file"]) == REPO / "config" / "fleet.yaml"
    assert ev.node("", "policy_server").parameters == {"fleet_file": str(REPO / "config" / "fleet.yaml"),
                                                       "num_robots": 4}


def test_installed_executable_resolves_defaults_from_another_directory(tmp_path):
    """What a user gets running the venv's physai-fleet away from the checkout."""
    out = subprocess.run([str(PREFIX / "lib" / "physai_ros" / "physai-fleet"), "--dry-run"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert f"install editable: package {REPO / 'physai_ros'}, share {REPO}" in out.stdout
    assert f"fleet file {REPO / 'config' / 'fleet.yaml'} (4 robot(s))" in out.stdout
    checks = subprocess.run([sys.executable, str(Path(__file__).with_name("install_checks.py"))],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert checks.returncode == 0, checks.stderr
    doc = json.loads(checks.stdout)
    assert doc["kind"] == "editable" and doc["fleet_file"] == str(REPO / "config" / "fleet.yaml")
    assert doc["checkpoint"] == str(REPO / "physai_ros" / "assets" / "policy" / "sim_pi0")
