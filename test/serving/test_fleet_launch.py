"""launch/fleet.launch.py evaluated by the real `launch` and `launch_ros` (test/launch_description.py;
nothing is started): the nodes, namespaces and parameters each argument gives. The launch running
for real, with `ros2 launch`: test/ros/test_ros2_launch.py."""
from pathlib import Path

import pytest
import yaml

from physai_ros.config.fleet import FleetConfigError, default_fleet_path

from launch_description import LaunchToolsMissing, evaluate, load_launch_file
from ros2_tools import tools_missing

LAUNCH_FILE = Path(__file__).resolve().parents[2] / "launch" / "fleet.launch.py"
FLEET = str(default_fleet_path().resolve())


@pytest.fixture(scope="module")
def launch_module():
    try:
        return load_launch_file(LAUNCH_FILE)
    except LaunchToolsMissing as e:
        tools_missing(str(e))


def _fleet_file(tmp_path, edit) -> str:
    doc = yaml.safe_load(default_fleet_path().read_text())
    edit(doc)
    p = tmp_path / "fleet.yaml"
    p.write_text(yaml.safe_dump(doc))
    return str(p)


def test_declares_the_launch_arguments(launch_module):
    assert evaluate(launch_module).declared == {"fleet_file": str(default_fleet_path()), "num_robots": "0",
                                                "duration": "0", "diagnostics_aggregator": "true"}


def test_default_fleet_server_aggregator_and_one_namespaced_group_per_robot(launch_module):
    ev = evaluate(launch_module)
    top = {n.name: n for n in ev.nodes if not n.namespace}
    assert sorted(top) == ["diagnostics_aggregator", "policy_server"]
    srv = top["policy_server"]
    assert (srv.package, srv.executable) == ("physai_ros", "policy_server")
    assert srv.parameters == {"fleet_file": FLEET, "num_robots": 4}
    assert (top["diagnostics_aggregator"].package, top["diagnostics_aggregator"].executable) == \
        ("physai_ros", "diagnostics_aggregator")
    assert not srv.after_serving and not top["diagnostics_aggregator"].after_serving
    # Each node in a session of its own, as physai-fleet starts them: the autogroup scheduler
    # shares the CPU per node (in the launch's one session the server got 0.45 of 2 cores).
    assert all(n.prefix == "setsid" for n in ev.nodes)
    groups = ev.groups()
    assert sorted(groups) == ["robot_0", "robot_1", "robot_2", "robot_3"]
    # The robots start on the server's serving line (a server starved by them took 35-40 s).
    assert all(n.after_serving for nodes in groups.values() for n in nodes.values())
    for ns, nodes in groups.items():
        assert sorted(nodes) == ["robot_client", "sim_robot", "trajectory_controller"]
        assert nodes["robot_client"].parameters == {"fleet_file": FLEET, "robot_id": ns}
        ctrl = nodes["trajectory_controller"].parameters
        assert ctrl["robot_id"] == ns  # (launch hands list parameters over as tuples)
        assert list(ctrl["joint_names"]) == ["joint_0", "joint_1", "joint_2", "joint_3", "gripper"]
        assert ctrl["control_rate_hz"] == 100.0
        sim = nodes["sim_robot"].parameters
        assert sim["robot_id"] == ns and sim["num_joints"] == 4 and sim["image_width"] == 224
    assert groups["robot_2"]["sim_robot"].parameters["num_views"] == 1
    assert groups["robot_0"]["sim_robot"].parameters["task"] == "pick_and_place"
    assert ev.shutdown_after_s == []


def test_num_robots_duration_and_aggregator_arguments(launch_module):
    ev = evaluate(launch_module, num_robots="6", duration="12.5")
    assert sorted(ev.groups()) == [f"robot_{i}" for i in range(6)]
    assert ev.shutdown_after_s == [12.5]
    # The server is told which robots were started: it expects robot_4 and robot_5 (clones of
    # the last entry) and reports no robot that was never launched.
    assert ev.node("", "policy_server").parameters["num_robots"] == 6
    ev = evaluate(launch_module, num_robots="2", diagnostics_aggregator="false")
    assert sorted(ev.groups()) == ["robot_0", "robot_1"]
    assert ev.node("", "policy_server").parameters["num_robots"] == 2
    assert [n.name for n in ev.nodes if not n.namespace] == ["policy_server"]


def test_real_robot_entry_has_no_sim_node(launch_module, tmp_path):
    def real_arm(doc):
        doc["robots"] = [dict(doc["robots"][0], id="arm", simulated=False, joints=["a", "b"], sim={})]
    ev = evaluate(launch_module, fleet_file=_fleet_file(tmp_path, real_arm))
    assert sorted(ev.groups()["arm"]) == ["robot_client", "trajectory_controller"]


def test_invalid_fleet_file_fails_before_starting_anything(launch_module, tmp_path):
    path = _fleet_file(tmp_path, lambda doc: doc["server"].update(scheduler="lottery"))
    with pytest.raises(FleetConfigError, match=r"server\.scheduler"):
        evaluate(launch_module, fleet_file=path)


def test_sros2_enclaves_are_passed_only_when_asked(launch_module, tmp_path):
    assert all(not n.ros_arguments for n in evaluate(launch_module).nodes)
    path = _fleet_file(tmp_path, lambda doc: doc["security"].update(sros2_enclaves=True))
    ev = evaluate(launch_module, fleet_file=path)
    assert ev.node("", "policy_server").ros_arguments == ["--enclave", "/physai_ros/policy_server"]
    assert ev.groups()["robot_1"]["trajectory_controller"].ros_arguments == \
        ["--enclave", "/physai_ros/robot_1/trajectory_controller"]


def test_a_gateway_fleet_launches_the_gateway_in_place_of_its_robots_nodes(launch_module, tmp_path):
    def gateway(doc):
        doc["gateway"] = {"openpi": {"robots": {"robot_1": {"layout": "libero"}, "robot_3": {"layout": "droid"}}}}
    fleet = _fleet_file(tmp_path, gateway)
    ev = evaluate(launch_module, fleet_file=fleet)
    assert sorted(ev.groups()) == ["robot_0", "robot_2"]
    [gw] = [n for n in ev.nodes if n.name == "openpi_gateway"]
    assert (gw.package, gw.executable, gw.namespace) == ("physai_ros", "openpi_gateway", "")
    assert gw.parameters == {"fleet_file": str(Path(fleet).resolve())} and gw.after_serving
