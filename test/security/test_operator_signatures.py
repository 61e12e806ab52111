"""Operator commands are signed by an operator of the fleet's keystore, for one robot and one
command, fresh and once; everything else is refused with its reason."""
import pytest

from physai_ros.security.handshake import AuthError
from physai_ros.security.keystore import Identity, Keystore
from physai_ros.security.operator_commands import OperatorCheck, OperatorSigner

DIGEST = bytes(range(32))


@pytest.fixture
def keys(tmp_path):
    ks = Keystore.init(tmp_path / "keys")
    ks.add(Identity("operator", "alice"))
    ks.add(Identity("operator", "bob"))
    return ks


class Clock:
    def __init__(self, t):
        self.t = t

    def __call__(self):
        return self.t


def reason(check, *args) -> str:
    with pytest.raises(AuthError) as e:
        check.check(*args)
    return e.value.reason


def test_a_signed_command_is_accepted_once(keys):
    check = OperatorCheck(keys)
    blob = OperatorSigner(keys, "alice").sign("resume", DIGEST)
    assert check.check("alice", "resume", "robot_0", DIGEST, blob) == Identity("operator", "alice")
    assert reason(check, "alice", "resume", "robot_0", DIGEST, blob) == "replayed"
    # Streams are per operator, command and robot: bob's and alice's next ones are each accepted.
    check.check("bob", "resume", "robot_0", DIGEST, OperatorSigner(keys, "bob").sign("resume", DIGEST))
    check.check("alice", "resume", "robot_1", DIGEST, OperatorSigner(keys, "alice").sign("resume", DIGEST))


def test_what_an_operator_did_not_sign_is_refused(keys, tmp_path):
    check = OperatorCheck(keys)
    alice = OperatorSigner(keys, "alice")
    assert reason(check, "alice", "resume", "robot_0", DIGEST, b"") == "missing"
    assert reason(check, "alice", "resume", "robot_0", DIGEST, b"\x01" * 10) == "malformed"
    other = bytes(32)  # another request (another robot, note or question)
    assert reason(check, "alice", "resume", "robot_0", other, alice.sign("resume", DIGEST)) == "bad_signature"
    # A signature for one command is worth nothing for another.
    assert reason(check, "alice", "resume", "robot_0", DIGEST, alice.sign("ask", DIGEST)) == "bad_signature"
    # Bob's signature under alice's name.
    assert reason(check, "alice", "resume", "robot_0", DIGEST,
                  OperatorSigner(keys, "bob").sign("resume", DIGEST)) == "bad_signature"
    # A key the fleet does not know, a name that is no identity, a command that does not exist.
    stranger = Keystore.init(tmp_path / "stranger")
    stranger.add(Identity("operator", "mallory"))
    assert reason(check, "mallory", "resume", "robot_0", DIGEST,
                  OperatorSigner(stranger, "mallory").sign("resume", DIGEST)) == "unknown_identity"
    assert reason(check, "../robot/x", "resume", "robot_0", DIGEST, alice.sign("resume", DIGEST)) == "bad_identity"
    assert reason(check, "alice", "reboot", "robot_0", DIGEST, alice.sign("resume", DIGEST)) == "malformed"


def test_a_stale_command_is_refused_even_by_a_fresh_checker(keys):
    """The replay guard lives in memory; the time window holds across a restart of the checker."""
    blob = OperatorSigner(keys, "alice").sign("resume", DIGEST)
    import time

    now = time.time()
    assert reason(OperatorCheck(keys, max_skew_s=30, clock=Clock(now + 31)), "alice", "resume", "robot_0",
                  DIGEST, blob) == "stale"
    assert reason(OperatorCheck(keys, max_skew_s=30, clock=Clock(now - 31)), "alice", "resume", "robot_0",
                  DIGEST, blob) == "stale"
    OperatorCheck(keys, max_skew_s=30, clock=Clock(now + 20)).check("alice", "resume", "robot_0", DIGEST, blob)


def test_a_revoked_operator_is_refused_at_its_next_command(keys):
    check = OperatorCheck(keys)
    alice = OperatorSigner(keys, "alice")
    check.check("alice", "ask", "robot_0", DIGEST, alice.sign("ask", DIGEST))
    keys.revoke(Identity("operator", "alice"))
    assert reason(check, "alice", "ask", "robot_0", DIGEST, alice.sign("ask", DIGEST)) == "revoked"
