"""A robot's openpi gateway token (security.gateway_token): derived from its keystore key, bound to
the fleet and ROS domain, checked in constant time, dead once the robot is revoked."""
from physai_ros.fleet.keys_cli import main as keys_main
from physai_ros.security.gateway_token import TokenCheck, robot_token
from physai_ros.security.keystore import Identity, Keystore


def test_tokens_name_their_robot_and_nothing_else(tmp_path, capsys):
    ks = Keystore.init(tmp_path / "ks")
    for r in ("robot_0", "robot_1"):
        ks.add(Identity("robot", r))
    t0, t1 = robot_token(ks, "robot_0"), robot_token(ks, "robot_1")
    assert t0 != t1 and t0 == robot_token(Keystore(tmp_path / "ks"), "robot_0")
    check = TokenCheck(ks, ["robot_0", "robot_1"])
    assert check.robot_for(f"Api-Key {t1}") == ("robot_1", "")
    assert check.robot_for(None) == (None, "missing_token")
    assert check.robot_for(f"Bearer {t1}") == (None, "malformed_token")
    assert check.robot_for("Api-Key physai_" + "A" * 43) == (None, "wrong_token")
    # another ROS domain is another fleet: its tokens differ
    assert robot_token(Keystore(tmp_path / "ks", domain="77"), "robot_0") != t0
    assert keys_main(["token", str(tmp_path / "ks"), "robot_0"]) == 0
    assert capsys.readouterr().out.strip() == t0


def test_a_revoked_robots_token_is_refused(tmp_path):
    ks = Keystore.init(tmp_path / "ks")
    ks.add(Identity("robot", "robot_0"))
    token = robot_token(ks, "robot_0")
    check = TokenCheck(ks, ["robot_0"])
    ks.revoke(Identity("robot", "robot_0"))
    assert check.robot_for(f"Api-Key {token}") == (None, "revoked")
    assert TokenCheck(ks, ["robot_0"]).robot_for(f"Api-Key {token}") == (None, "wrong_token")
