"""Authenticated registration and its session key (a signed Diffie-Hellman, SIGMA-style).

robot -> server  RegistrationProof: the registration's own bytes, a fresh 16-byte nonce, the
                 robot's ephemeral X25519 key and a stamp, signed with the robot's Ed25519 key.
server           checks the signer is the robot named, not revoked, the stamp within
                 `max_skew_s` and the nonce never seen; picks a session id and its own ephemeral
                 X25519 key, signs the robot's proof digest + both, and derives the session key.
server -> robot  SessionGrant: session id, ephemeral key, signature by the server's Ed25519 key.
robot            checks the grant answers its own proof and comes from the fleet's server,
                 then derives the same key: HKDF-SHA256(X25519 shared secret, salt = nonce +
                 session id, info = "physai session/1" + robot id).

A replayed registration is refused (its nonce is known); an altered one fails the signature; a
robot cannot speak for another (the signature is checked with the named robot's key); the
session key never travels. Engine workers use the same exchange with kind "worker".
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from physai_ros.security.keystore import Identity, Keystore, KeystoreError

PROOF_DOMAIN = b"physai-register/1\0"
GRANT_DOMAIN = b"physai-grant/1\0"
NONCE_BYTES = 16
MAX_PENDING = 8  # registration proofs a requester keeps waiting for an answer


# Every refusal counted for failed authentication is "unauthenticated_<AuthError.reason>", so the
# "security" statuses can total them whoever counted them.
AUTH_REFUSAL_PREFIX = "unauthenticated_"


class AuthError(Exception):
    """A refused authentication; `reason` is a short stable word for counters."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail = reason, detail

    @property
    def refusal_reason(self) -> str:
        """The reason a refusal for this failure is counted under."""
        return f"{AUTH_REFUSAL_PREFIX}{self.reason}"


@dataclass(frozen=True)
class RegistrationProof:
    kind: str
    name: str
    nonce: bytes
    ephemeral: bytes  # X25519 public key, 32 bytes raw
    stamp: float
    signature: bytes

    def transcript(self, content: bytes) -> bytes:
        return b"".join([PROOF_DOMAIN, self.kind.encode(), b"\0", self.name.encode(), b"\0", self.nonce,
                         self.ephemeral, repr(float(self.stamp)).encode(), b"\0",
                         hashlib.sha256(content).digest()])


@dataclass(frozen=True)
class SessionGrant:
    session_id: bytes
    ephemeral: bytes
    signature: bytes


def _raw(pub: X25519PublicKey) -> bytes:
    return pub.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def _session_key(shared: bytes, nonce: bytes, session_id: bytes, name: str) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=nonce + session_id,
                info=b"physai session/1\0" + name.encode()).derive(shared)


def _grant_transcript(proof: RegistrationProof, content: bytes, session_id: bytes, ephemeral: bytes) -> bytes:
    return GRANT_DOMAIN + hashlib.sha256(proof.transcript(content)).digest() + session_id + ephemeral


class Requester:
    """The robot's (or worker's) side: make a proof, then accept the grant for a session key."""

    def __init__(self, ident: Identity, key: Ed25519PrivateKey, server_public, clock: Callable[[], float] = time.time):
        self.ident, self.key, self.server_public, self.clock = ident, key, server_public, clock
        # Outstanding proofs, oldest first: a node may send a new registration before the answer
        # to the previous one was handled (rclpy runs a future's callback later, on the
        # executor), so a grant is matched against each, not only the newest.
        self._pending: list[tuple] = []

    def proof(self, content: bytes) -> RegistrationProof:
        eph = X25519PrivateKey.generate()
        nonce = os.urandom(NONCE_BYTES)
        unsigned = RegistrationProof(self.ident.kind, self.ident.name, nonce, _raw(eph.public_key()),
                                     self.clock(), b"")
        proof = dataclasses.replace(unsigned, signature=self.key.sign(unsigned.transcript(content)))
        self._pending = (self._pending + [(proof, content, eph)])[-MAX_PENDING:]
        return proof

    def accept(self, grant: SessionGrant) -> bytes:
        """The session key, if the grant answers one of the outstanding proofs (newest first)."""
        if not self._pending:
            raise AuthError("unexpected_grant", "no registration proof outstanding")
        for i in range(len(self._pending) - 1, -1, -1):
            proof, content, eph = self._pending[i]
            try:
                self.server_public.verify(grant.signature, _grant_transcript(proof, content, grant.session_id,
                                                                             grant.ephemeral))
            except InvalidSignature:
                continue
            shared = eph.exchange(X25519PublicKey.from_public_bytes(grant.ephemeral))
            del self._pending[:i + 1]  # this one is answered; older ones are superseded
            break
        else:
            raise AuthError("bad_signature", "the grant is not signed by the fleet's server "
                                             "(or answers no registration of ours)")
        return _session_key(shared, proof.nonce, grant.session_id, proof.name)


class Granter:
    """The server's side: check proofs against the keystore, grant sessions."""

    def __init__(self, keystore: Keystore, server: Identity, max_skew_s: float = 30.0,
                 clock: Callable[[], float] = time.time, nonce_memory: int = 65536):
        self.keystore = keystore
        self.key = keystore.private_key(server)
        self.max_skew_s = max_skew_s
        self.clock = clock
        self._nonces: "OrderedDict[bytes, float]" = OrderedDict()
        self._nonce_memory = nonce_memory

    def grant(self, proof: RegistrationProof, content: bytes, expected: Identity) -> tuple[SessionGrant, bytes]:
        """(grant to send, session key) or AuthError. `expected` is who the content says it is."""
        try:
            claimed = Identity(proof.kind, proof.name)
        except KeystoreError as e:
            raise AuthError("bad_identity", str(e)) from None
        if claimed != expected:
            raise AuthError("wrong_identity", f"signed by {claimed}, registering as {expected}")
        if self.keystore.is_revoked(claimed):
            raise AuthError("revoked", f"{claimed} is revoked")
        try:
            public = self.keystore.public_key(claimed)
        except KeystoreError:
            raise AuthError("unknown_identity", f"{claimed} is not in the keystore") from None
        if len(proof.nonce) != NONCE_BYTES or len(proof.ephemeral) != 32:
            raise AuthError("malformed", "nonce or ephemeral key of the wrong length")
        try:
            public.verify(proof.signature, proof.transcript(content))
        except InvalidSignature:
            raise AuthError("bad_signature", f"registration not signed by {claimed}'s key") from None
        now = self.clock()
        if not abs(now - proof.stamp) <= self.max_skew_s:
            raise AuthError("stale", f"stamp {proof.stamp:.3f} is {now - proof.stamp:+.1f} s from now")
        self._forget_before(now - 2 * self.max_skew_s)
        if proof.nonce in self._nonces:
            raise AuthError("replayed", "this registration was seen before")
        self._nonces[proof.nonce] = proof.stamp
        while len(self._nonces) > self._nonce_memory:
            self._nonces.popitem(last=False)
        eph = X25519PrivateKey.generate()
        session_id = os.urandom(16)
        ephemeral = _raw(eph.public_key())
        sig = self.key.sign(_grant_transcript(proof, content, session_id, ephemeral))
        shared = eph.exchange(X25519PublicKey.from_public_bytes(proof.ephemeral))
        return SessionGrant(session_id, ephemeral, sig), _session_key(shared, proof.nonce, session_id, proof.name)

    def _forget_before(self, t: float) -> None:
        # Nonces older than the skew window cannot be replayed anyway (the stamp check refuses).
        while self._nonces:
            nonce, stamp = next(iter(self._nonces.items()))
            if stamp >= t:
                break
            self._nonces.popitem(last=False)
