"""launch/fleet.launch.py against recording stand-ins for `launch` and `launch_ros` (the real
packages are not installable from PyPI or Debian: test/launch_stand_ins.py): assert on the nodes,
namespaces and parameters."""
from pathlib import Path

import pytest
import yaml

from physai_ros.serving.config import FleetConfigError, default_fleet_path

from launch_stand_ins import build as _build, groups as _groups, load_launch_file

LAUNCH_FILE = Path(__file__).resolve().parents[2] / "launch" / "fleet.launch.py"


@pytest.fixture
def launch_module():
    return load_launch_file(LAUNCH_FILE)


def test_declares_the_launch_arguments(launch_module):
    declared, _ = _build(launch_module)
    assert declared == {"fleet_file": str(default_fleet_path()), "num_robots": "0", "duration": "0",
                        "diagnostics_aggregator": "true"}


def _top_nodes(actions) -> dict:
    return {a.kwargs["name"]: a for a in actions if type(a).__name__ == "Node"}


def test_the_diagnostics_aggregator_starts_unless_told_not_to(launch_module):
    _, actions = _build(launch_module)
    agg = _top_nodes(actions)["diagnostics_aggregator"].kwargs
    assert (agg["package"], agg["executable"]) == ("physai_ros", "diagnostics_aggregator")
    _, actions = _build(launch_module, diagnostics_aggregator="false")
    assert sorted(_top_nodes(actions)) == ["policy_server"]


def test_default_fleet_server_and_one_namespaced_group_per_robot(launch_module):
    _, actions = _build(launch_module)
    assert sorted(_top_nodes(actions)) == ["diagnostics_aggregator", "policy_server"]
    srv = _top_nodes(actions)["policy_server"].kwargs
    assert (srv["package"], srv["executable"], srv["name"]) == ("physai_ros", "policy_server", "policy_server")
    assert srv["parameters"] == [{"fleet_file": str(default_fleet_path().resolve()), "num_robots": 4}]
    groups = _groups(actions)
    assert sorted(groups) == ["robot_0", "robot_1", "robot_2", "robot_3"]
    for ns, nodes in groups.items():
        assert sorted(nodes) == ["robot_client", "sim_robot", "trajectory_controller"]
        assert nodes["robot_client"]["parameters"] == [{"fleet_file": str(default_fleet_path().resolve()), "robot_id": ns}]
        ctrl = nodes["trajectory_controller"]["parameters"][0]
        assert ctrl["robot_id"] == ns and ctrl["joint_names"] == ["joint_0", "joint_1", "joint_2", "joint_3", "gripper"]
        assert ctrl["control_rate_hz"] == 100.0
        sim = nodes["sim_robot"]["parameters"][0]
        assert sim["robot_id"] == ns and sim["num_joints"] == 4 and sim["image_width"] == 224
    assert _groups(actions)["robot_2"]["sim_robot"]["parameters"][0]["num_views"] == 1
    assert _groups(actions)["robot_0"]["sim_robot"]["parameters"][0]["task"] == "pick_and_place"
    assert not [a for a in actions if type(a).__name__ == "TimerAction"]


def test_num_robots_and_duration_arguments(launch_module):
    _, actions = _build(launch_module, num_robots="6", duration="12.5")
    assert sorted(_groups(actions)) == [f"robot_{i}" for i in range(6)]
    [timer] = [a for a in actions if type(a).__name__ == "TimerAction"]
    assert timer.kwargs["period"] == 12.5
    assert type(timer.kwargs["actions"][0]).__name__ == "Shutdown"
    server = _top_nodes(actions)["policy_server"]
    # The server is told which robots were started: it expects robot_4 and robot_5 (clones of
    # the last entry) and reports no robot that was never launched.
    assert server.kwargs["parameters"][0]["num_robots"] == 6
    _, actions = _build(launch_module, num_robots="2")
    assert sorted(_groups(actions)) == ["robot_0", "robot_1"]
    server = _top_nodes(actions)["policy_server"]
    assert server.kwargs["parameters"][0]["num_robots"] == 2


def test_real_robot_entry_has_no_sim_node(launch_module, tmp_path):
    doc = yaml.safe_load(default_fleet_path().read_text())
    doc["robots"] = [dict(doc["robots"][0], id="arm", simulated=False, joints=["a", "b"], sim={})]
    p = tmp_path / "fleet.yaml"
    p.write_text(yaml.safe_dump(doc))
    _, actions = _build(launch_module, fleet_file=str(p))
    assert sorted(_groups(actions)["arm"]) == ["robot_client", "trajectory_controller"]


def test_invalid_fleet_file_fails_before_starting_anything(launch_module, tmp_path):
    doc = yaml.safe_load(default_fleet_path().read_text())
    doc["server"]["scheduler"] = "lottery"
    p = tmp_path / "fleet.yaml"
    p.write_text(yaml.safe_dump(doc))
    with pytest.raises(FleetConfigError, match=r"server\.scheduler"):
        _build(launch_module, fleet_file=str(p))


def test_sros2_enclaves_are_passed_only_when_asked(launch_module, tmp_path):
    _, actions = _build(launch_module)
    assert all(a.kwargs.get("ros_arguments") is None for a in actions if type(a).__name__ == "Node")
    doc = yaml.safe_load(default_fleet_path().read_text())
    doc["security"] = dict(doc["security"], sros2_enclaves=True)
    p = tmp_path / "fleet.yaml"
    p.write_text(yaml.safe_dump(doc))
    _, actions = _build(launch_module, fleet_file=str(p))
    server = _top_nodes(actions)["policy_server"]
    assert server.kwargs["ros_arguments"] == ["--enclave", "/physai_ros/policy_server"]
    nodes = _groups(actions)["robot_1"]
    assert nodes["trajectory_controller"]["ros_arguments"] == ["--enclave", "/physai_ros/robot_1/trajectory_controller"]
