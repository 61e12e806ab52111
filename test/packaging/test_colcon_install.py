"""A colcon build of the repository (both packages: physai_ros_interfaces, ament_cmake, and
physai_ros, ament_python) with Debian's colcon, as a ROS 2 user runs it, into a temporary folder:
the installed layout, and the launch file's defaults and the nodes' files resolved from the
install with its setup.bash sourced, from another directory.

The ROS runtime here is the PyPI wheels in the venv (no ROS distribution on this machine), so the
ament_cmake build finds rosidl through AMENT_PREFIX_PATH=<venv>, and the installed executables
(whose #! is the python colcon ran under) are started with the venv's python."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ros2_tools import tools_missing

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
VENV_PYTHON = sys.executable
COLCON_TIMEOUT_S = 900  # a clean build of the interfaces takes ~40 s idle, minutes on a busy 2-core box

pytestmark = pytest.mark.slow


def _colcon() -> str:
    path = shutil.which("colcon")
    assert path, ("Debian's colcon is missing: `make test` installs it (make colcon-tools), or "
                  "`apt-get install colcon python3-colcon-ros`")
    return path


@pytest.fixture(scope="module")
def install(tmp_path_factory) -> Path:
    ws = tmp_path_factory.mktemp("colcon_ws")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "AMENT_PREFIX_PATH", "CMAKE_PREFIX_PATH")}
    env.update(AMENT_PREFIX_PATH=sys.prefix, CMAKE_PREFIX_PATH=sys.prefix,
               PATH=str(Path(VENV_PYTHON).parent) + os.pathsep + env.get("PATH", ""))
    # --paths names the two packages: a crawl of the checkout would also find the package.xml
    # files the ROS wheels put in .venv/share.
    cmd = [_colcon(), "build", "--paths", str(REPO), str(REPO / "interfaces"),
           "--build-base", str(ws / "build"), "--install-base", str(ws / "install"),
           "--cmake-args", f"-DPython3_EXECUTABLE={VENV_PYTHON}", "-DBUILD_TESTING=OFF"]
    out = subprocess.run(cmd, cwd=ws, env=env, capture_output=True, text=True, timeout=COLCON_TIMEOUT_S)
    assert out.returncode == 0, f"colcon build failed:\n{out.stdout[-4000:]}\n{out.stderr[-4000:]}"
    assert "Summary: 2 packages finished" in out.stdout, out.stdout[-2000:]
    return ws / "install"


def _sourced(install: Path, argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """argv with the install's setup.bash sourced (as a user's shell has it), from cwd."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "AMENT_PREFIX_PATH")}
    script = f'source "{install}/setup.bash" && exec "$@"'
    return subprocess.run(["bash", "-c", script, "bash", *argv], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=180)


def test_installed_layout(install):
    pkg = install / "physai_ros"
    share = pkg / "share" / "physai_ros"
    assert (pkg / "share" / "ament_index" / "resource_index" / "packages" / "physai_ros").is_file()
    for name in ("package.xml", "launch/fleet.launch.py", "config/fleet.yaml", "config/fastdds_shm.xml"):
        assert (share / name).read_bytes() == (REPO / name).read_bytes(), name
    for exe in ("diagnostics_aggregator", "engine_worker", "openpi_gateway", "physai-fleet", "policy_server",
                "robot_client", "sim_robot", "trajectory_controller"):
        assert os.access(pkg / "lib" / "physai_ros" / exe, os.X_OK), exe
    site = pkg / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    assert (site / "physai_ros" / "assets" / "policy" / "sim_pi0" / "model.safetensors").is_file()
    assert (site / "physai_ros" / "kernels" / "__init__.py").is_file()
    assert not (site / "kernels").exists(), "kernels/ is installed as physai_ros.kernels only"
    iface = install / "physai_ros_interfaces"
    assert (iface / "share" / "ament_index" / "resource_index" / "packages" / "physai_ros_interfaces").is_file()
    assert (iface / "share" / "physai_ros_interfaces" / "msg" / "ActionChunk.msg").is_file()


def test_defaults_resolve_through_the_ament_index(install, tmp_path):
    out = _sourced(install, [VENV_PYTHON, str(HERE / "install_checks.py")], tmp_path)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    pkg = install / "physai_ros"
    share = pkg / "share" / "physai_ros"
    assert doc["package"].startswith(str(pkg)), "physai_ros imported from the install, not the checkout"
    assert doc["interfaces"].startswith(str(install / "physai_ros_interfaces"))
    assert (doc["kind"], doc["share"]) == ("ament", str(share))
    assert doc["fleet_file"] == str(share / "config" / "fleet.yaml") and doc["robots"] == 4
    assert doc["fastdds_profile"] == str(share / "config" / "fastdds_shm.xml")
    assert doc["checkpoint"].startswith(str(pkg / "lib")) and doc["tokenizer"].startswith(str(pkg / "lib"))


def test_installed_launch_file_defaults(install, tmp_path):
    share = install / "physai_ros" / "share" / "physai_ros"
    out = _sourced(install, [VENV_PYTHON, str(REPO / "test" / "launch_description.py"),
                             str(share / "launch" / "fleet.launch.py")], tmp_path)
    if out.returncode == 77:  # no real launch/launch_ros on this machine (launch_description.py)
        tools_missing(out.stderr.strip())
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["declared"]["fleet_file"] == str(share / "config" / "fleet.yaml")
    assert doc["server"] == {"fleet_file": str(share / "config" / "fleet.yaml"), "num_robots": 4}
    assert doc["groups"] == ["robot_0", "robot_1", "robot_2", "robot_3"]


def test_installed_physai_fleet_runs_from_another_directory(install, tmp_path):
    exe = install / "physai_ros" / "lib" / "physai_ros" / "physai-fleet"
    out = _sourced(install, [VENV_PYTHON, str(exe), "--dry-run"], tmp_path)
    assert out.returncode == 0, out.stderr
    share = install / "physai_ros" / "share" / "physai_ros"
    assert f"install ament: package {install / 'physai_ros'}" in out.stdout
    assert f"fleet file {share / 'config' / 'fleet.yaml'} (4 robot(s))" in out.stdout


def test_colcon_built_interfaces_carry_messages(install, tmp_path):
    """The interface types colcon built load their type support and publish through rclpy."""
    code = ("import rclpy; from physai_ros_interfaces.msg import ActionChunk; rclpy.init(); "
            "n = rclpy.create_node('colcon_iface_check'); p = n.create_publisher(ActionChunk, 'x', 1); "
            "m = ActionChunk(); m.robot_id = 'robot_0'; p.publish(m); print(type(m).__module__); "
            "n.destroy_node(); rclpy.shutdown()")
    out = _sourced(install, [VENV_PYTHON, "-c", code], tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "physai_ros_interfaces.msg._action_chunk"
