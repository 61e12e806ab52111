"""Byte layouts of what the security layer puts into messages (uint8[] fields).

auth field of a message:  version (1) | counter (8, big-endian) | tag (32: HMAC) or signature (64)
registration proof:       version | kind \\0 name \\0 | nonce (16) | X25519 key (32) | stamp (f64)
                          | Ed25519 signature (64)
session grant:            version | session id (16) | X25519 key (32) | Ed25519 signature (64)
Every parser checks lengths and raises AuthError("malformed", ...) on anything else, so a
truncated, oversized or garbled field is one counted refusal, never an exception elsewhere.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

from physai_ros.security.handshake import NONCE_BYTES, AuthError, RegistrationProof, SessionGrant

VERSION = 1
_COUNTER = struct.Struct(">Q")
_STAMP = struct.Struct(">d")
TAG_BYTES = {"mac": 32, "sig": 64}
MAX_NAME = 64


@dataclass(frozen=True)
class AuthField:
    counter: int
    tag: bytes


def pack_auth(counter: int, tag: bytes) -> bytes:
    return bytes([VERSION]) + _COUNTER.pack(counter) + tag


def unpack_auth(blob, kind: str) -> AuthField:
    """`kind`: "mac" or "sig", the tag this stream must carry."""
    data = bytes(blob)
    want = 1 + _COUNTER.size + TAG_BYTES[kind]
    if not data:
        raise AuthError("missing", "no auth field (a sender running insecure, or not one of the fleet's)")
    if len(data) != want or data[0] != VERSION:
        raise AuthError("malformed", f"auth field of {len(data)} bytes (version {data[0]}), expected {want} "
                                     f"(version {VERSION})")
    return AuthField(_COUNTER.unpack_from(data, 1)[0], data[1 + _COUNTER.size:])


def pack_proof(p: RegistrationProof) -> bytes:
    return b"".join([bytes([VERSION]), p.kind.encode(), b"\0", p.name.encode(), b"\0", p.nonce, p.ephemeral,
                     _STAMP.pack(p.stamp), p.signature])


def unpack_proof(blob) -> RegistrationProof:
    data = bytes(blob)
    if not data:
        raise AuthError("missing", "registration without a proof (the robot runs insecure, or has no key)")
    if data[0] != VERSION:
        raise AuthError("malformed", f"registration proof version {data[0]}, expected {VERSION}")
    parts = data[1:].split(b"\0", 2)
    fixed = NONCE_BYTES + 32 + _STAMP.size + 64
    if len(parts) != 3 or len(parts[0]) > MAX_NAME or len(parts[1]) > MAX_NAME or len(parts[2]) != fixed:
        raise AuthError("malformed", f"registration proof of {len(data)} bytes does not parse")
    try:
        kind, name = parts[0].decode("ascii"), parts[1].decode("ascii")
    except UnicodeDecodeError:
        raise AuthError("malformed", "registration proof names are not ASCII") from None
    rest = parts[2]
    nonce, eph = rest[:NONCE_BYTES], rest[NONCE_BYTES:NONCE_BYTES + 32]
    (stamp,) = _STAMP.unpack_from(rest, NONCE_BYTES + 32)
    return RegistrationProof(kind, name, nonce, eph, stamp, rest[-64:])


def pack_grant(g: SessionGrant) -> bytes:
    return bytes([VERSION]) + g.session_id + g.ephemeral + g.signature


def unpack_grant(blob) -> SessionGrant:
    data = bytes(blob)
    if len(data) != 1 + 16 + 32 + 64 or data[0] != VERSION:
        raise AuthError("malformed", f"session grant of {len(data)} bytes, expected {1 + 16 + 32 + 64}")
    return SessionGrant(data[1:17], data[17:49], data[49:])
