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
    assert len(listing) == 4 and "REVOKED" in next(x for x in listing if "robot/robot_2" in x)
    assert Keystore(ks_dir).is_revoked(Identity("robot", "robot_2"))


def test_keys_mistakes_exit_2_with_the_reason(tmp_path, capsys):
    assert main(["keys", "list", str(tmp_path / "missing")]) == 2
    assert "keys init" in capsys.readouterr().err
    assert main(["keys", "init", str(tmp_path / "k")]) == 0
    assert main(["keys", "revoke", str(tmp_path / "k"), "robot_1"]) == 2
    assert "KIND/NAME" in capsys.readouterr().err
    assert main(["keys", "add-robot", str(tmp_path / "k"), "robot 1"]) == 2
    assert "letters" in capsys.readouterr().err
