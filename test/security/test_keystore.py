"""The fleet keystore: layout, permissions, refusals, revocation seen without a restart."""
from __future__ import annotations

import os
import stat

import pytest

from physai_ros.security.keystore import Identity, Keystore, KeystoreError


def test_init_lays_out_one_folder_per_identity_with_private_keys_closed(tmp_path):
    ks = Keystore.init(tmp_path / "ks")
    ks.add(Identity("robot", "robot_1"))
    ks.add(Identity("worker", "engine_worker_0"))
    assert [str(i) for i in ks.identities()] == ["server/policy_server", "robot/robot_1", "worker/engine_worker_0"]
    key = ks.private_path(Identity("robot", "robot_1"))
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and stat.S_IMODE(key.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "ks").stat().st_mode) == 0o700
    pub = ks.public_key(Identity("robot", "robot_1"))
    sig = ks.private_key(Identity("robot", "robot_1")).sign(b"x")
    pub.verify(sig, b"x")  # the pair belongs together


def test_refusals_name_the_problem(tmp_path):
    with pytest.raises(KeystoreError, match="no keystore.json"):
        Keystore(tmp_path).add(Identity("robot", "r"))
    ks = Keystore.init(tmp_path / "ks")
    with pytest.raises(KeystoreError, match="already exists"):
        Keystore.init(tmp_path / "ks")
    ks.add(Identity("robot", "r1"))
    with pytest.raises(KeystoreError, match="already exists"):
        ks.add(Identity("robot", "r1"))
    with pytest.raises(KeystoreError, match="kind"):
        Identity("admin", "x")
    with pytest.raises(KeystoreError, match="letters"):
        Identity("robot", "../etc")
    with pytest.raises(KeystoreError, match="add-robot"):
        ks.public_key(Identity("robot", "nobody"))
    os.chmod(ks.private_path(Identity("robot", "r1")), 0o644)
    with pytest.raises(KeystoreError, match="chmod 600"):
        ks.private_key(Identity("robot", "r1"))


def test_revocation_is_seen_by_a_running_reader_and_the_name_is_not_reused(tmp_path):
    ks = Keystore.init(tmp_path / "ks")
    r = Identity("robot", "robot_2")
    ks.add(r)
    reader = Keystore(tmp_path / "ks")  # e.g. the server, opened before the revocation
    assert not reader.is_revoked(r)
    Keystore(tmp_path / "ks").revoke(r)
    assert reader.is_revoked(r)
    assert not ks.private_path(r).exists()
    with pytest.raises(KeystoreError, match="revoked"):
        ks.private_key(r)
    with pytest.raises(KeystoreError, match="revoked"):
        ks.add(r)
