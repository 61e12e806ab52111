"""A fleet keystore: one Ed25519 identity per server, robot and engine worker, laid out the way
SROS2's keystore is (one folder per identity), with strict file permissions.

    ROOT/keystore.json                  format version, creation time, fleet id (random)
    ROOT/public/<kind>/<name>.pub       every identity's public key (PEM): the fleet's trust list
    ROOT/enclaves/<kind>/<name>/key.pem its private key (PEM, mode 0600, folder 0700)
    ROOT/revoked.json                   [{"kind", "name", "at", "fingerprint"}]: refused from then on

kinds: server, robot, worker, operator (a person's key: signs operator commands, see
operator_commands.py). A node is given ROOT and its own kind/name; it reads its private key
and the public keys of the peers it must check. Revocation marks the identity in revoked.json and
deletes its private key; checkers re-read revoked.json when it changes (`Keystore.is_revoked`), so
a revoked robot is refused at its next message without restarting the server.

Every Ed25519 signature made or checked with a keystore is bound to its fleet: the keystore's
random fleet id and the ROS domain the process runs in (`signature_domain`). Two fleets that share
a keystore (the `auto` one of a user on one host, a keystore copied to two cells) run in different
ROS domains, or their topics would mix; a chunk signed in one is refused in the other
(`bad_signature`) instead of moving the other fleet's robot of the same name.
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import secrets
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from physai_ros.errors import UserInputError

KINDS = ("server", "robot", "worker", "operator")
FORMAT = "physai-keystore/1"
# Names become file names: keep them to what a ROS robot id may hold anyway.
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")


class KeystoreError(ValueError, UserInputError):
    """A keystore that is missing, malformed, too open, or lacks the identity asked for (a user
    error: a node meeting it at start says so in one line and exits)."""


@dataclass(frozen=True)
class Identity:
    kind: str
    name: str

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise KeystoreError(f"identity kind must be one of {KINDS}, got {self.kind!r}")
        if not _NAME.match(self.name):
            raise KeystoreError(f"identity name {self.name!r}: letters, digits and _ only, starting with a letter")

    def __str__(self) -> str:
        return f"{self.kind}/{self.name}"


def fingerprint(public: Ed25519PublicKey) -> str:
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return base64.b32encode(hashlib.sha256(raw).digest()[:10]).decode().lower()


def _write_private(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def ros_domain() -> str:
    """The ROS domain this process joins (ROS_DOMAIN_ID; ROS's default 0 when unset)."""
    return os.environ.get("ROS_DOMAIN_ID", "").strip() or "0"


class Keystore:
    def __init__(self, root, domain: Optional[str] = None) -> None:
        """`domain`: the ROS domain signatures are bound to (default: this process's)."""
        self.root = Path(root)
        self.domain = ros_domain() if domain is None else str(domain)
        self._revoked_path = str(self.root / "revoked.json")
        self._revoked_mtime: Optional[float] = None
        self._revoked: Dict[str, dict] = {}
        self._fleet_id: Optional[str] = None

    # ---- creation -------------------------------------------------------------------------
    @classmethod
    def init(cls, root, server_name: str = "policy_server") -> "Keystore":
        root = Path(root)
        if (root / "keystore.json").exists():
            raise KeystoreError(f"{root}: a keystore already exists")
        root.mkdir(parents=True, exist_ok=True)
        os.chmod(root, 0o700)
        (root / "keystore.json").write_text(json.dumps({"format": FORMAT, "created": time.time(),
                                                        "fleet_id": secrets.token_hex(8)}, indent=2))
        (root / "revoked.json").write_text("[]\n")
        ks = cls(root)
        ks.add(Identity("server", server_name))
        return ks

    def add(self, ident: Identity) -> str:
        """Create the identity's key pair; returns its fingerprint. Refuses to overwrite."""
        self.check()
        if self.is_revoked(ident):
            raise KeystoreError(f"{ident} was revoked; a revoked name is not reused (pick another)")
        if self.public_path(ident).exists():
            raise KeystoreError(f"{ident} already exists in {self.root}")
        key = Ed25519PrivateKey.generate()
        _write_private(self.private_path(ident), key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
        pub = self.public_path(ident)
        pub.parent.mkdir(parents=True, exist_ok=True)
        pub.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                      serialization.PublicFormat.SubjectPublicKeyInfo))
        return fingerprint(key.public_key())

    def revoke(self, ident: Identity) -> None:
        self.check()
        public = self.public_key(ident)
        entries = self._read_revoked()
        if str(ident) not in entries:
            entries[str(ident)] = {"kind": ident.kind, "name": ident.name, "at": time.time(),
                                   "fingerprint": fingerprint(public)}
            tmp = self.root / "revoked.json.tmp"
            tmp.write_text(json.dumps(list(entries.values()), indent=2) + "\n")
            tmp.replace(self.root / "revoked.json")
        priv = self.private_path(ident)
        if priv.exists():
            priv.unlink()

    # ---- reading --------------------------------------------------------------------------
    @property
    def fleet_id(self) -> str:
        """keystore.json's fleet id ("" for a keystore made before fleet ids: then only the ROS
        domain binds its signatures)."""
        if self._fleet_id is None:
            self.check()
            self._fleet_id = str(json.loads((self.root / "keystore.json").read_text()).get("fleet_id", ""))
        return self._fleet_id

    @property
    def signature_domain(self) -> bytes:
        """What every Ed25519 signature of this fleet is made under (message_auth.Signer's domain)."""
        return b"physai/1\0fleet=" + self.fleet_id.encode() + b"\0ros_domain=" + self.domain.encode()

    def public_path(self, ident: Identity) -> Path:
        return self.root / "public" / ident.kind / f"{ident.name}.pub"

    def private_path(self, ident: Identity) -> Path:
        return self.root / "enclaves" / ident.kind / ident.name / "key.pem"

    def public_key(self, ident: Identity) -> Ed25519PublicKey:
        path = self.public_path(ident)
        if not path.is_file():
            raise KeystoreError(f"{ident}: no public key at {path} "
                                f"(add it: physai-fleet keys add-{ident.kind} {self.root} {ident.name})")
        key = serialization.load_pem_public_key(path.read_bytes())
        if not isinstance(key, Ed25519PublicKey):
            raise KeystoreError(f"{path}: not an Ed25519 public key")
        return key

    def private_key(self, ident: Identity) -> Ed25519PrivateKey:
        path = self.private_path(ident)
        if not path.is_file():
            why = " (revoked)" if self.is_revoked(ident) else ""
            raise KeystoreError(f"{ident}: no private key at {path}{why}")
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o077:
            raise KeystoreError(f"{path}: permissions {mode:o} let others read it; chmod 600 it")
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
        if not isinstance(key, Ed25519PrivateKey):
            raise KeystoreError(f"{path}: not an Ed25519 private key")
        return key

    def identities(self, kind: Optional[str] = None) -> List[Identity]:
        kinds = [kind] if kind else list(KINDS)
        out = []
        for k in kinds:
            folder = self.root / "public" / k
            if folder.is_dir():
                out += [Identity(k, p.stem) for p in sorted(folder.glob("*.pub"))]
        return out

    def is_revoked(self, ident: Identity) -> bool:
        return str(ident) in self._read_revoked()

    def _read_revoked(self) -> Dict[str, dict]:
        # Stat per call so a revocation takes effect at the next message; os.stat on a string, not
        # pathlib, because a server checks every signed message here (480 Hz per streaming robot).
        path = self._revoked_path
        try:
            mtime = os.stat(path).st_mtime_ns
        except FileNotFoundError:
            return {}
        if mtime != self._revoked_mtime:
            try:
                entries = json.loads(Path(path).read_text())
            except json.JSONDecodeError as e:
                raise KeystoreError(f"{path}: not JSON ({e})") from None
            self._revoked = {f"{e['kind']}/{e['name']}": e for e in entries}
            self._revoked_mtime = mtime
        return self._revoked

    def check(self) -> None:
        path = self.root / "keystore.json"
        if not path.is_file():
            raise KeystoreError(f"{self.root}: no keystore.json; create one with `physai-fleet keys init {self.root}`")
        fmt = json.loads(path.read_text()).get("format")
        if fmt != FORMAT:
            raise KeystoreError(f"{path}: format {fmt!r}, expected {FORMAT!r}")
