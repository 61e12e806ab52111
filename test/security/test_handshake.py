"""Signed registration: both sides derive one session key; forged, replayed, stale, revoked and
impersonating registrations are refused with their reason."""
from __future__ import annotations

import dataclasses

import pytest

from physai_ros.security.handshake import AuthError, Granter, Requester
from physai_ros.security.keystore import Identity, Keystore

SERVER, R1, R2 = Identity("server", "policy_server"), Identity("robot", "robot_1"), Identity("robot", "robot_2")


@pytest.fixture
def fleet(tmp_path):
    ks = Keystore.init(tmp_path / "ks")
    ks.add(R1)
    ks.add(R2)
    clock = [1000.0]
    granter = Granter(ks, SERVER, max_skew_s=30.0, clock=lambda: clock[0])
    server_pub = ks.public_key(SERVER)
    robots = {r: Requester(r, ks.private_key(r), server_pub, clock=lambda: clock[0]) for r in (R1, R2)}
    return ks, granter, robots, clock


def test_both_sides_derive_the_same_fresh_session_key(fleet):
    _, granter, robots, _ = fleet
    proof = robots[R1].proof(b"registration of robot_1")
    grant, server_key = granter.grant(proof, b"registration of robot_1", R1)
    assert robots[R1].accept(grant) == server_key and len(server_key) == 32
    proof2 = robots[R1].proof(b"registration of robot_1")
    grant2, key2 = granter.grant(proof2, b"registration of robot_1", R1)
    assert key2 != server_key  # every registration its own session


def _refused(fn, reason):
    with pytest.raises(AuthError) as e:
        fn()
    assert e.value.reason == reason, str(e.value)


def test_forged_replayed_stale_and_impersonating_registrations_are_refused(fleet):
    ks, granter, robots, clock = fleet
    content = b"robot_1 registers"
    proof = robots[R1].proof(content)
    _refused(lambda: granter.grant(proof, b"robot_1 registers!", R1), "bad_signature")  # altered content
    _refused(lambda: granter.grant(proof, content, R2), "wrong_identity")  # robot_1 speaking for robot_2
    forged = dataclasses.replace(robots[R2].proof(content), name="robot_1")  # robot_2's key, robot_1's name
    _refused(lambda: granter.grant(forged, content, R1), "bad_signature")
    granter.grant(proof, content, R1)
    _refused(lambda: granter.grant(proof, content, R1), "replayed")
    old = robots[R1].proof(content)
    clock[0] += 31.0
    _refused(lambda: granter.grant(old, content, R1), "stale")
    stranger = dataclasses.replace(robots[R1].proof(content), name="robot_9")
    _refused(lambda: granter.grant(stranger, content, Identity("robot", "robot_9")), "unknown_identity")
    ks.revoke(R2)
    _refused(lambda: granter.grant(robots[R2].proof(content), content, R2), "revoked")


def test_a_grant_not_from_the_server_or_not_for_this_proof_is_refused(fleet, tmp_path):
    _, granter, robots, _ = fleet
    other = Keystore.init(tmp_path / "other")  # an impostor server with its own keystore
    impostor = Granter(other, SERVER)
    proof = robots[R1].proof(b"c")
    other.add(R1)  # it does not know robot_1's real key, so it can only pretend
    with pytest.raises(AuthError):
        impostor.grant(proof, b"c", R1)
    grant, key = granter.grant(proof, b"c", R1)
    robots[R1].proof(b"c")  # a newer proof outstanding too: the grant still answers the older one
    assert robots[R1].accept(grant) == key
    _refused(lambda: robots[R1].accept(grant), "bad_signature")  # answered already
