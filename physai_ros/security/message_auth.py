"""Per-message authentication, replay refusal and the bookkeeping of refusals.

Two kinds of tag, chosen by measured cost (bench/auth_cost.py) and by who must check them:
- `SessionMac`: HMAC-SHA256 with the session key of handshake.py, for what a robot or worker
  sends the server and the server answers a worker (observations: 0.17 ms for 2 x 224x224 views,
  about a quarter of an Ed25519 signature over the same bytes);
- `Signer` / `Verifier`: Ed25519 by the server's identity key, for action chunks and trajectory
  segments: the trajectory controller checks them with the server's public key alone, so no
  secret has to reach the process that moves the arm, and a chunk is small (31 us to sign).
Tags cover the message's content bytes, which include robot id, round id and stamp; `ReplayGuard`
then refuses a counter (round id, stamp) that is not newer than the last accepted one of its
stream, so a replayed or reordered-old message is refused even with a valid tag.
"""
from __future__ import annotations

import hashlib
import hmac
import time
from collections import Counter
from typing import Callable, Dict, Hashable, Optional

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from physai_ros.security.handshake import AuthError

MAC_BYTES = 32
SIGNATURE_BYTES = 64


class SessionMac:
    def __init__(self, key: bytes, domain: bytes):
        if len(key) != 32:
            raise ValueError("session keys are 32 bytes")
        self._key = key
        self._domain = domain + b"\0"

    def tag(self, content: bytes) -> bytes:
        return hmac.new(self._key, self._domain + content, hashlib.sha256).digest()

    def check(self, content: bytes, tag: bytes) -> None:
        if len(tag) != MAC_BYTES:
            raise AuthError("malformed", f"MAC of {len(tag)} bytes, expected {MAC_BYTES}")
        if not hmac.compare_digest(self.tag(content), tag):
            raise AuthError("bad_mac", "content does not match its MAC (altered, or another session's)")


class Signer:
    def __init__(self, key: Ed25519PrivateKey, domain: bytes):
        self._key, self._domain = key, domain + b"\0"

    def sign(self, content: bytes) -> bytes:
        return self._key.sign(self._domain + content)


class Verifier:
    def __init__(self, public: Ed25519PublicKey, domain: bytes):
        self._public, self._domain = public, domain + b"\0"

    def check(self, content: bytes, signature: bytes) -> None:
        if len(signature) != SIGNATURE_BYTES:
            raise AuthError("malformed", f"signature of {len(signature)} bytes, expected {SIGNATURE_BYTES}")
        try:
            self._public.verify(signature, self._domain + content)
        except InvalidSignature:
            raise AuthError("bad_signature", "not signed by the server this robot registered with") from None


class ReplayGuard:
    """Accept a stream's counter only if it is greater than the last one accepted (round ids and
    stamps only grow). `forget(stream)` starts a stream afresh (a new session)."""

    def __init__(self) -> None:
        self._last: Dict[Hashable, object] = {}

    def check(self, stream: Hashable, counter) -> None:
        last = self._last.get(stream)
        if last is not None and not counter > last:
            raise AuthError("replayed", f"{counter} is not newer than {last} on {stream}")

    def accept(self, stream: Hashable, counter) -> None:
        """Record a counter once the message it came with was accepted (check first)."""
        self._last[stream] = counter

    def forget(self, stream: Hashable) -> None:
        self._last.pop(stream, None)


class RefusalLog:
    """Counts refusals by reason and says so once per burst: the first refusal is logged, the
    rest within `quiet_s` are only counted and summed up by the next line after the quiet time."""

    def __init__(self, log: Callable[[str], None], quiet_s: float = 5.0, clock: Callable[[], float] = time.monotonic):
        self.counts: Counter = Counter()
        self._log, self._quiet_s, self._clock = log, quiet_s, clock
        self._last_log: Optional[float] = None
        self._suppressed = 0

    def refused(self, what: str, err: AuthError) -> None:
        self.counts[err.reason] += 1
        now = self._clock()
        if self._last_log is not None and now - self._last_log < self._quiet_s:
            self._suppressed += 1
            return
        more = f" ({self._suppressed} more refused since the last report)" if self._suppressed else ""
        self._log(f"refused {what}: {err}{more}")
        self._last_log, self._suppressed = now, 0
