"""The `auto` keystore's folder: this user's runtime folder, else its state folder; never a name
under the shared /tmp that another local user can create first."""
from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

from physai_ros.security.config import ENV_AUTO_DIR, SecurityConfig, auto_keystore_dir, open_keystore
from physai_ros.security.keystore import Identity, KeystoreError


@pytest.fixture
def no_override(monkeypatch):
    monkeypatch.delenv(ENV_AUTO_DIR, raising=False)
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    return monkeypatch


def test_runtime_folder_first(no_override, tmp_path):
    no_override.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert auto_keystore_dir() == tmp_path / "physai_ros" / "keystore"


def test_without_a_runtime_folder_the_home_state_folder_not_tmp(no_override, tmp_path):
    no_override.delenv("XDG_RUNTIME_DIR", raising=False)
    no_override.setenv("HOME", str(tmp_path))
    assert auto_keystore_dir() == tmp_path / ".local" / "state" / "physai_ros" / "keystore"
    no_override.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert auto_keystore_dir() == tmp_path / "state" / "physai_ros" / "keystore"


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to make a folder owned by another user")
def test_a_folder_another_user_made_in_tmp_stops_nothing(no_override, tmp_path):
    """Another local user creating /tmp/physai_ros-<uid> first (the old fallback) is ignored; the
    nodes open the keystore in our state folder."""
    no_override.delenv("XDG_RUNTIME_DIR", raising=False)
    no_override.setenv("HOME", str(tmp_path / "home"))
    squatted = Path(f"/tmp/physai_ros-{os.getuid()}")
    if squatted.exists():
        pytest.skip(f"{squatted} exists on this machine; not touching it")
    squatted.mkdir(mode=0o777)
    try:
        os.chown(squatted, 54321, 54321)
        ks = open_keystore(SecurityConfig(), None, need=[Identity("robot", "robot_0")])
        assert ks.root == tmp_path / "home" / ".local" / "state" / "physai_ros" / "keystore"
        assert stat.S_IMODE(ks.root.parent.stat().st_mode) == 0o700
        assert not any(squatted.iterdir())
    finally:
        shutil.rmtree(squatted)


def test_a_folder_we_cannot_create_is_a_clear_error(no_override, tmp_path):
    no_override.delenv("XDG_RUNTIME_DIR", raising=False)
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    no_override.setenv("XDG_STATE_HOME", str(blocker))
    with pytest.raises(KeystoreError, match=f"cannot create the auto keystore's folder.*{ENV_AUTO_DIR}"):
        open_keystore(SecurityConfig(), None)
