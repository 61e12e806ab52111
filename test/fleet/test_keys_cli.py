"""physai-fleet keys, as a user runs it (through physai_ros.fleet.cli.main, the console script's
target): create, add, revoke, list; mistakes get one clear line and exit status 2."""
from __future__ import annotations

from physai_ros.fleet.cli import main
from physai_ros.security.keystore import Identity, Keystore


def test_keys_commands_build_and_revoke_a_keystore(tmp_path, capsys):
    ks_dir = str(tmp_path / "keys")
    assert main(["keys", "init", ks_dir]) == 0
    assert main(["keys", "add-robot", ks_dir, "robot_1", "robot_2"]) == 0
    assert main(["keys", "add-worker", ks_dir, "engine_worker_0"]) == 0
    assert main(["keys", "revoke", ks_dir, "robot/robot_2"]) == 0
    capsys.readouterr()
    assert main(["keys", "list", ks_dir]) == 0
    listing = capsys.readouterr().out.splitlines()
    assert listing[0] == f"fleet id {Keystore(ks_dir).fleet_id}" and len(Keystore(ks_dir).fleet_id) == 16
    assert len(listing) == 5 and "REVOKED" in next(x for x in listing if "robot/robot_2" in x)
    assert Keystore(ks_dir).is_revoked(Identity("robot", "robot_2"))


def test_keys_mistakes_exit_2_with_the_reason(tmp_path, capsys):
    assert main(["keys", "list", str(tmp_path / "missing")]) == 2
    assert "keys init" in capsys.readouterr().err
    assert main(["keys", "init", str(tmp_path / "k")]) == 0
    assert main(["keys", "revoke", str(tmp_path / "k"), "robot_1"]) == 2
    assert "KIND/NAME" in capsys.readouterr().err
    assert main(["keys", "add-robot", str(tmp_path / "k"), "robot 1"]) == 2
    assert "letters" in capsys.readouterr().err


def test_physai_fleet_checks_a_named_keystore_before_starting_anything(tmp_path, capsys):
    """A fleet.yaml naming a keystore that lacks a key the launched fleet needs stops
    physai-fleet at once (exit 2) with the command that makes the key; nothing is started."""
    import pytest
    import yaml

    from physai_ros.fleet.arguments import parse_args
    from physai_ros.config.fleet import default_fleet_path

    doc = yaml.safe_load(default_fleet_path().read_text())
    doc["security"] = {"keystore": "keys"}  # relative to the yaml
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(yaml.safe_dump(doc))
    with pytest.raises(SystemExit) as e:
        parse_args(["--fleet", str(fleet), "--robots", "2"])
    assert e.value.code == 2 and f"keys init {tmp_path / 'keys'}" in capsys.readouterr().err
    assert main(["keys", "init", str(tmp_path / "keys")]) == 0
    assert main(["keys", "add-robot", str(tmp_path / "keys"), "robot_0"]) == 0
    with pytest.raises(SystemExit) as e:
        parse_args(["--fleet", str(fleet), "--robots", "2"])
    assert e.value.code == 2 and f"keys add-robot {tmp_path / 'keys'} robot_1" in capsys.readouterr().err
    assert main(["keys", "add-robot", str(tmp_path / "keys"), "robot_1"]) == 0
    assert parse_args(["--fleet", str(fleet), "--robots", "2"]).robots == 2
