"""fleet.yaml's gateway.openpi section (config.gateway): what it takes, the errors naming the key,
and that the gateway's robots get no ROS nodes of their own."""
import copy

import pytest
import yaml

from physai_ros.config.fleet import parse_fleet
from physai_ros.config_fields import FleetConfigError
from physai_ros.fleet.plan import fleet_plan
from physai_ros.install_paths import default_fleet_file


@pytest.fixture(scope="module")
def doc():
    return yaml.safe_load(default_fleet_file().read_text())


def _with(doc, gateway):
    d = copy.deepcopy(doc)
    d["gateway"] = gateway
    return parse_fleet(d, source=str(default_fleet_file()))


def test_a_gateway_robot_is_launched_as_the_gateway_not_as_ros_nodes(doc):
    cfg = _with(doc, {"openpi": {"port": 8123, "robots": {"robot_1": {"layout": "libero", "fallback": "hold"}}}})
    gw = cfg.gateway
    assert gw.max_rate_hz == 50.0 and gw.max_burst == 5
    assert gw.port == 8123 and gw.robots["robot_1"].layout == "libero" and gw.robots["robot_1"].fallback == "hold"
    assert "robot_1" not in {r.id for r in cfg.ros_robots()} and len(cfg.ros_robots()) == len(cfg.robots) - 1
    names = [s.name for s in fleet_plan(cfg)]
    assert "openpi_gateway" in names and not any(n.startswith("robot_1/") for n in names)
    assert cfg.with_num_robots(len(cfg.robots)).gateway == gw
    assert _with(doc, None).gateway is None and parse_fleet(copy.deepcopy(doc)).gateway is None


@pytest.mark.parametrize("gateway, message", [
    ({"openpi": {"robots": {"robot_9": {"layout": "libero"}}}}, r"gateway.openpi.robots.robot_9: not a robot"),
    ({"openpi": {"robots": {"robot_0": {"layout": "franka"}}}}, r"robots.robot_0.layout: expected one of"),
    ({"openpi": {"robots": {"robot_0": {"layout": "libero", "fallback": "stop"}}}}, r"fallback: expected one of"),
    ({"openpi": {"robots": {}}}, r"gateway.openpi.robots: expected at least one"),
    ({"openpi": {"port": 70000, "robots": {"robot_0": {"layout": "libero"}}}}, r"gateway.openpi.port"),
    ({"openpi": {"tls_cert": "c.pem", "robots": {"robot_0": {"layout": "libero"}}}}, r"tls_cert and tls_key"),
    ({"openpi": {"robots": {"robot_0": {"layout": "libero"}}, "prot": 1}}, r"prot"),
    ({"openpi": {"max_burst": 0, "robots": {"robot_0": {"layout": "libero"}}}}, r"gateway.openpi.max_burst"),
    ({"openpi": {"max_rate_hz": 0, "robots": {"robot_0": {"layout": "libero"}}}}, r"gateway.openpi.max_rate_hz"),
    ({"grpc": {}}, r"grpc"),
])
def test_a_wrong_gateway_section_names_the_key(doc, gateway, message):
    with pytest.raises(FleetConfigError, match=message):
        _with(doc, gateway)
