"""A robot's token for the openpi gateway: what an openpi client presents to be served as that
robot (openpi's `WebsocketClientPolicy(api_key=...)` sends it as `Authorization: Api-Key <token>`).

Derived, not stored: HMAC-SHA256 under the robot's private key of the fleet keystore over the
fleet's signature domain (its fleet id and ROS domain). So it needs no file of its own, differs
between fleets and ROS domains, and dies with the robot's key: a revoked robot's token is
refused at its next connection. `physai-fleet keys token DIR ROBOT` prints it (in the fleet's ROS
domain). The gateway compares in constant time and learns nothing else from the header.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Iterable, Optional

from cryptography.hazmat.primitives import serialization

from physai_ros.security.keystore import Identity, Keystore, KeystoreError

_LABEL = b"physai-openpi-gateway-token/1\0"
PREFIX = "physai_"
HEADER_SCHEME = "Api-Key"


def robot_token(keystore: Keystore, robot_id: str) -> str:
    key = keystore.private_key(Identity("robot", robot_id))
    raw = key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                            serialization.NoEncryption())
    mac = hmac.new(raw, _LABEL + keystore.signature_domain, hashlib.sha256).digest()
    return PREFIX + base64.urlsafe_b64encode(mac).decode().rstrip("=")


class TokenCheck:
    """Which robot an Authorization header names, for the robots the gateway serves."""

    def __init__(self, keystore: Keystore, robot_ids: Iterable[str]):
        self.keystore = keystore
        self._tokens: dict[str, str] = {}
        for rid in robot_ids:
            try:
                self._tokens[rid] = robot_token(keystore, rid)
            except KeystoreError:  # revoked or never added: no token can match it
                pass

    def robot_for(self, authorization: Optional[str]) -> tuple[Optional[str], str]:
        """(robot_id, "") for a valid token, else (None, why): missing, malformed, unknown, revoked."""
        if not authorization:
            return None, "missing_token"
        scheme, _, token = authorization.strip().partition(" ")
        if scheme != HEADER_SCHEME or not token.startswith(PREFIX) or len(token) > 100:
            return None, "malformed_token"
        found = None
        for rid, want in self._tokens.items():  # every comparison runs: the time says nothing
            if hmac.compare_digest(want.encode(), token.strip().encode()):
                found = rid
        if found is None:
            return None, "wrong_token"
        if self.keystore.is_revoked(Identity("robot", found)):
            return None, "revoked"
        return found, ""
