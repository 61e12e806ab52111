"""launch/fleet.launch.py against recording stand-ins for `launch` and `launch_ros` (the real
packages are not installable from PyPI): assert on the nodes, namespaces and parameters."""
import importlib.util
import sys
import types
from pathlib import Path

import pytest
import yaml

from physai_ros.serving.config import FleetConfigError, default_fleet_path

LAUNCH_FILE = Path(__file__).resolve().parents[2] / "launch" / "fleet.launch.py"


class _Action:
    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs


def _stand_ins():
    launch = types.ModuleType("launch")
    actions = types.ModuleType("launch.actions")
    subs = types.ModuleType("launch.substitutions")
    launch_ros = types.ModuleType("launch_ros")
    ros_actions = types.ModuleType("launch_ros.actions")

    class LaunchDescription(_Action):
        pass

    class LaunchConfiguration:
        def __init__(self, name):
            self.name = name

        def perform(self, context):
            return context.launch_configurations[self.name]

    for mod, names in ((actions, ["DeclareLaunchArgument", "GroupAction", "OpaqueFunction", "Shutdown",
                                  "TimerAction"]), (ros_actions, ["Node", "PushROSNamespace"])):
        for n in names:
            setattr(mod, n, type(n, (_Action,), {}))
    launch.LaunchDescription = LaunchDescription
    subs.LaunchConfiguration = LaunchConfiguration
    launch.actions, launch.substitutions, launch_ros.actions = actions, subs, ros_actions
    return {"launch": launch, "launch.actions": actions, "launch.substitutions": subs,
            "launch_ros": launch_ros, "launch_ros.actions": ros_actions}


@pytest.fixture
def launch_module(monkeypatch):
    for name, mod in _stand_ins().items():
        monkeypatch.setitem(sys.modules, name, mod)
    spec = importlib.util.spec_from_file_location("fleet_launch_under_test", LAUNCH_FILE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _build(mod, **args):
    ld = mod.generate_launch_description()
    entities = ld.args[0]
    declared = {e.args[0]: e.kwargs["default_value"] for e in entities if type(e).__name__ == "DeclareLaunchArgument"}
    [opaque] = [e for e in entities if type(e).__name__ == "OpaqueFunction"]
    ctx = types.SimpleNamespace(launch_configurations={**declared, **args})
    return declared, opaque.kwargs["function"](ctx)


def _groups(actions):
    out = {}
    for a in actions:
        if type(a).__name__ == "GroupAction":
            ns = [x for x in a.kwargs["actions"] if type(x).__name__ == "PushROSNamespace"]
            nodes = [x for x in a.kwargs["actions"] if type(x).__name__ == "Node"]
            assert len(ns) == 1 and a.kwargs["actions"][0] is ns[0], "namespace pushed first"
            out[ns[0].args[0]] = {n.kwargs["executable"]: n.kwargs for n in nodes}
    return out


def test_declares_the_three_launch_arguments(launch_module):
    declared, _ = _build(launch_module)
    assert declared == {"fleet_file": str(default_fleet_path()), "num_robots": "0", "duration": "0"}


def test_default_fleet_server_and_one_namespaced_group_per_robot(launch_module):
    _, actions = _build(launch_module)
    servers = [a for a in actions if type(a).__name__ == "Node"]
    assert len(servers) == 1
    srv = servers[0].kwargs
    assert (srv["package"], srv["executable"], srv["name"]) == ("physai_ros", "policy_server", "policy_server")
    assert srv["parameters"] == [{"fleet_file": str(default_fleet_path().resolve())}]
    groups = _groups(actions)
    assert sorted(groups) == ["robot_0", "robot_1", "robot_2", "robot_3"]
    for ns, nodes in groups.items():
        assert sorted(nodes) == ["robot_client", "sim_robot", "trajectory_controller"]
        assert nodes["robot_client"]["parameters"] == [{"fleet_file": str(default_fleet_path().resolve()), "robot_id": ns}]
        ctrl = nodes["trajectory_controller"]["parameters"][0]
        assert ctrl["robot_id"] == ns and ctrl["joint_names"] == ["joint_0", "joint_1", "joint_2", "joint_3", "gripper"]
        assert ctrl["control_rate_hz"] == 480.0
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
    _, actions = _build(launch_module, num_robots="2")
    assert sorted(_groups(actions)) == ["robot_0", "robot_1"]


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
