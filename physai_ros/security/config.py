"""Where a node finds its keys: fleet.yaml's `security:` block as plain data, and opening the
keystore it names.

  security:
    keystore: auto          # or a directory made by `physai-fleet keys init` (relative to the yaml)
    server_identity: policy_server
    max_skew_s: 30          # registration stamps further from the server's clock are refused
    sros2_enclaves: false   # the launchers pass --enclave to every node (DDS Security, see docs)
    insecure: false         # true: no authentication at all, reported loudly by every node

`auto` is the throwaway keystore of a one-host fleet (the demo, the tests): a private directory
of this user (XDG_RUNTIME_DIR, else XDG_STATE_HOME or ~/.local/state; mode 0700 and owned by us,
checked; never a fixed name under the shared /tmp, which another local user could create first),
created on first use by whichever node starts first, with identities added as nodes ask for
them. It cannot span hosts: a robot on another machine would have its own, and be refused.
"""
from __future__ import annotations

import fcntl
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional

from physai_ros.security.keystore import Identity, Keystore, KeystoreError

AUTO = "auto"
ENV_AUTO_DIR = "PHYSAI_ROS_AUTO_KEYSTORE"  # tests point the auto keystore elsewhere


@dataclass(frozen=True)
class SecurityConfig:
    keystore: str = AUTO
    server_identity: str = "policy_server"
    max_skew_s: float = 30.0
    sros2_enclaves: bool = False
    insecure: bool = False

    @property
    def server(self) -> Identity:
        return Identity("server", self.server_identity)

    def describe(self) -> str:
        return "INSECURE (no authentication)" if self.insecure else f"keystore {self.keystore}"


INSECURE_WARNING = ("security.insecure is true: messages are NOT authenticated; any process in this ROS "
                    "domain can move the robots. Use it only on an isolated network.")


def auto_keystore_dir() -> Path:
    env = os.environ.get(ENV_AUTO_DIR)
    if env:
        return Path(env)
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and Path(runtime).is_dir():
        return Path(runtime) / "physai_ros" / "keystore"
    # No runtime folder (a service, cron, an ssh session without a login manager): the user's
    # state folder. The earlier /tmp/physai_ros-<uid> could be created first by any local user,
    # and this user's nodes then refused it and could not start at all.
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "physai_ros" / "keystore"


def _private_dir(path: Path) -> None:
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise KeystoreError(f"{path}: cannot create the auto keystore's folder ({exc.strerror}); set "
                            f"XDG_RUNTIME_DIR or {ENV_AUTO_DIR} to a folder of this user's, or name a keystore "
                            "made with `physai-fleet keys init` in fleet.yaml's security.keystore") from exc
    st = path.stat()
    if st.st_uid != os.getuid() or stat.S_IMODE(st.st_mode) & 0o077:
        raise KeystoreError(f"{path}: the auto keystore's folder must be ours and private (mode 700); "
                            f"it is owned by uid {st.st_uid} with mode {stat.S_IMODE(st.st_mode):o}")


def keystore_path(sec: SecurityConfig, base_dir: Optional[Path]) -> Path:
    if sec.keystore == AUTO:
        return auto_keystore_dir()
    p = Path(sec.keystore).expanduser()
    return p if p.is_absolute() or base_dir is None else base_dir / p


def open_keystore(sec: SecurityConfig, base_dir: Optional[Path], need: Iterable[Identity] = ()) -> Keystore:
    """The keystore `sec` names. In auto mode it and the identities in `need` are created when
    missing (under a lock: fleet nodes start together); otherwise a missing keystore or identity
    is a KeystoreError naming the file and the command that makes it."""
    root = keystore_path(sec, base_dir)
    if sec.keystore != AUTO:
        ks = Keystore(root)
        ks.check()
        for ident in need:
            ks.public_key(ident)  # raises with the add-<kind> command
        return ks
    _private_dir(root.parent)
    with open(root.parent / ".keystore.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        ks = Keystore(root) if (root / "keystore.json").exists() else Keystore.init(root, sec.server_identity)
        for ident in need:
            if not ks.public_path(ident).exists() and not ks.is_revoked(ident):
                ks.add(ident)
    return ks
