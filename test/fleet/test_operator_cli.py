"""physai-fleet operator, as a user runs it: mistakes and a missing key get one clear line and
exit status 2 (before any ROS traffic); no robot client answering is exit 2 after --timeout. The
commands doing their work against real robot clients: test/serving/test_ros_serving.py (resume),
test/serving/test_ros_language.py (signed questions), test/ros/test_ros_pipeline.py (acknowledge)."""
from __future__ import annotations

import yaml

from physai_ros.config.fleet import default_fleet_path
from physai_ros.fleet.cli import main
from physai_ros.security.keystore import Keystore


def _fleet(tmp_path, keystore: str) -> str:
    doc = yaml.safe_load(default_fleet_path().read_text())
    doc["security"] = {"keystore": keystore}
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def test_a_named_keystore_without_the_operator_names_the_command_that_adds_it(tmp_path, capsys):
    Keystore.init(tmp_path / "keys")
    fleet = _fleet(tmp_path, str(tmp_path / "keys"))
    assert main(["operator", "resume", "robot_0", "--fleet", fleet, "--as", "alice"]) == 2
    assert "keys add-operator" in capsys.readouterr().err


def test_a_robot_not_in_the_fleet_is_one_line(tmp_path, capsys):
    assert main(["operator", "resume", "robot 7", "--fleet", _fleet(tmp_path, "auto")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("physai-fleet operator:") and len(err.strip().splitlines()) == 1


def test_no_robot_client_answering_is_exit_2_after_the_timeout(tmp_path, capsys):
    fleet = _fleet(tmp_path, "auto")
    assert main(["operator", "resume", "robot_0", "--fleet", fleet, "--timeout", "1.5"]) == 2
    assert "no answer from /robot_0/operator_command" in capsys.readouterr().err
