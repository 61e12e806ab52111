"""Each process's side of fleet authentication, as plain logic over content digests and the
auth fields of physai_ros.security.wire (the ROS glue computes the digests: ros/message_digest).

  ServerAuth      policy server: grants sessions at registration (and signs its refusals),
                  checks observations and component queries (HMAC with the robot's session key),
                  signs chunks, segments, texts, component answers and batch requests (Ed25519)
  RobotAuth       robot client: proves its identity, tags observations and component queries,
                  signs its hold chunks, checks the server's chunks, component answers and
                  registration refusals
  ControllerAuth  trajectory controller: executes only what the server (chunks, segments) or its
                  own robot client (hold chunks) signed; needs public keys only
  WorkerAuth      engine worker: checks the server's batch requests, signs results and status
Every check raises AuthError(reason); callers count it and drop the message. A counter inside
the signed content only grows per stream (MonotonicCounter for signers that restart: wall-clock
nanoseconds, forced to increase), so a replayed or reordered-old message is refused.
"""
from __future__ import annotations

import hashlib
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, Hashable, Optional

from physai_ros.security.handshake import AuthError, Granter, Requester
from physai_ros.security.keystore import Identity, Keystore, KeystoreError
from physai_ros.security.message_auth import ReplayGuard, SessionMac, Signer, Verifier
from physai_ros.security.wire import pack_auth, pack_grant, pack_proof, unpack_auth, unpack_grant, unpack_proof

# Domains: a tag made for one kind of message is never valid for another.
OBSERVATION, WRENCH, CHUNK, SEGMENT, HOLD = b"observation", b"wrench", b"chunk", b"segment", b"hold"
TEXT = b"text"  # RobotText: what a robot's policy says, signed by the server like its chunks
# Pipeline components: a robot's ComponentQuery carries its session tag like an
# observation; the server signs its ComponentAnswer like a chunk.
COMPONENT_QUERY, COMPONENT_ANSWER = b"component_query", b"component_answer"
BATCH_REQUEST, BATCH_RESULT, WORKER_STATUS = b"batch_request", b"batch_result", b"worker_status"
# A factory plan's VLM components on an engine worker: the server signs the questions it
# forwards, the worker signs its answers (domains of their own: never valid as the robot's).
WORKER_COMPONENT_QUERY, WORKER_COMPONENT_ANSWER = b"worker_component_query", b"worker_component_answer"
# A registration refusal: the server signs it bound to the proof it answers, so that a refusal
# from anyone else (a second register_robot service answering first) changes nothing at the robot.
REGISTRATION_REFUSAL = b"registration_refusal"
MAX_SESSIONS = 8  # sessions of one robot valid at once (granted, not yet superseded by use)
# How long a session stays valid after a newer one of the robot's was first used. A client's
# topics are not ordered with each other: at a key rollover its observation under the new key can
# arrive before a wrench sample or observation it tagged under the old one just before, which
# was refused `unauthenticated_bad_mac`. The old key stays the client's own secret, and each
# session keeps its own replay guard.
SUPERSEDED_GRACE_S = 10.0
SESSION_MAC_DOMAIN = b"session"  # SessionMac's own domain, under the per-message ones above


def signed_content(domain: bytes, counter: int, digest: bytes) -> bytes:
    """What a tag or signature covers: the message kind, its stream counter, its digest."""
    return domain + b"\0" + counter.to_bytes(8, "big") + digest


class MonotonicCounter:
    """Wall-clock nanoseconds, forced to grow: a restarted signer continues above its last run."""

    def __init__(self) -> None:
        self._last = 0
        self._lock = threading.Lock()

    def next(self) -> int:
        with self._lock:
            self._last = max(self._last + 1, time.time_ns())
            return self._last


class PeerSigner:
    def __init__(self, keystore: Keystore, ident: Identity):
        self._signer = Signer(keystore.private_key(ident), keystore.signature_domain)
        self._counter = MonotonicCounter()

    def sign(self, domain: bytes, digest: bytes) -> bytes:
        c = self._counter.next()
        return pack_auth(c, self._signer.sign(signed_content(domain, c, digest)))


class PeerVerifier:
    """Checks what one identity signed: not revoked (re-read at every message), a valid Ed25519
    signature, and a counter newer than the last accepted on its stream (the domain, unless the
    caller names a finer one). The public key is read when first needed, so a peer whose key is
    added after this process started is still known."""

    def __init__(self, keystore: Keystore, ident: Identity):
        self.keystore, self.ident = keystore, ident
        self._verifier: Optional[Verifier] = None
        self._replay = ReplayGuard()  # per stream
        self._lock = threading.Lock()

    def check(self, domain: bytes, digest: bytes, blob, stream: Hashable = None,
              fresh: Optional[Callable[[int], None]] = None) -> None:
        """`fresh(counter)`: a further check of the signed counter (raises AuthError), run after
        the signature and before the replay guard."""
        auth = unpack_auth(blob, "sig")
        if self.keystore.is_revoked(self.ident):
            raise AuthError("revoked", f"{self.ident} is revoked")
        if self._verifier is None:
            try:
                self._verifier = Verifier(self.keystore.public_key(self.ident), self.keystore.signature_domain)
            except KeystoreError as e:
                raise AuthError("unknown_identity", str(e)) from None
        self._verifier.check(signed_content(domain, auth.counter, digest), auth.tag)
        # After the signature: a forged counter must neither be judged nor advance the guard.
        if fresh is not None:
            fresh(auth.counter)
        stream = domain if stream is None else stream
        with self._lock:
            self._replay.check(stream, auth.counter)
            self._replay.accept(stream, auth.counter)


@dataclass
class _Session:
    mac: SessionMac
    replay: ReplayGuard = field(default_factory=ReplayGuard)  # per domain
    used: bool = False  # a message of the client's passed under it
    superseded_at: Optional[float] = None  # when a newer session was first used

    def check(self, domain: bytes, digest: bytes, auth) -> None:
        self.mac.check(signed_content(domain, auth.counter, digest), auth.tag)
        self.replay.check(domain, auth.counter)
        self.replay.accept(domain, auth.counter)


def refusal_digest(proof_blob, reason: str) -> bytes:
    """What a signed registration refusal covers: the proof it answers (as sent, whatever it
    holds: a malformed one is refused too) and the reason given."""
    proof = bytes(proof_blob)
    return hashlib.sha256(len(proof).to_bytes(4, "big") + proof + reason.encode("utf-8", "replace")).digest()


def named_identity(kind: str, name: str) -> Identity:
    """The identity a message names, or AuthError("bad_identity") for a name that cannot be one."""
    try:
        return Identity(kind, name)
    except KeystoreError as e:
        raise AuthError("bad_identity", str(e)) from None


class ServerAuth:
    def __init__(self, keystore: Keystore, server: Identity, max_skew_s: float = 30.0,
                 clock=time.monotonic):
        self.keystore = keystore
        self.clock = clock
        self.granter = Granter(keystore, server, max_skew_s)
        self.signer = PeerSigner(keystore, server)
        # robot id -> its valid sessions, newest first. Clients re-register every few seconds (a
        # keep-alive); a grant may reach the client late or not at all (its request timed out on a
        # loaded host), so every session granted since the last one the client was seen using
        # stays valid, and the older ones end SUPERSEDED_GRACE_S after a message under a newer
        # one arrived.
        self._sessions: Dict[str, list[_Session]] = {}
        self._lock = threading.Lock()

    def register(self, robot_id: str, digest: bytes, proof_blob) -> tuple[bytes, bytes]:
        """(grant to answer with, session key); the session starts when `start_session` is
        called (only once the serving core accepted the registration)."""
        grant, key = self.granter.grant(unpack_proof(proof_blob), digest, named_identity("robot", robot_id))
        return pack_grant(grant), key

    def sign_refusal(self, proof_blob, reason: str) -> bytes:
        return self.signer.sign(REGISTRATION_REFUSAL, refusal_digest(proof_blob, reason))

    def start_session(self, robot_id: str, key: bytes) -> None:
        with self._lock:
            live = [_Session(SessionMac(key, SESSION_MAC_DOMAIN))] + self._sessions.get(robot_id, [])
            if len(live) > MAX_SESSIONS:
                # Grants the client never got (a rogue registration service answered first, a
                # request timed out) must not push out the key it still uses.
                in_use = [x for x in live[MAX_SESSIONS - 1:] if x.used and x.superseded_at is None][:1]
                live = live[:MAX_SESSIONS - len(in_use)] + in_use
            self._sessions[robot_id] = live

    def end_session(self, robot_id: str) -> None:
        with self._lock:
            self._sessions.pop(robot_id, None)

    def check_observation(self, robot_id: str, digest: bytes, blob) -> None:
        self.check_session(robot_id, OBSERVATION, digest, blob)

    def check_component_query(self, robot_id: str, digest: bytes, blob) -> None:
        self.check_session(robot_id, COMPONENT_QUERY, digest, blob)

    def check_session(self, robot_id: str, domain: bytes, digest: bytes, blob) -> None:
        """A message `robot_id` tagged with its session key (an observation, a wrench sample)."""
        if self.keystore.is_revoked(named_identity("robot", robot_id)):
            self.end_session(robot_id)
            raise AuthError("revoked", f"robot/{robot_id} is revoked")
        with self._lock:
            live = self._sessions.get(robot_id)
            if not live:  # first: the server answers an unregistered robot "unknown_robot"
                raise AuthError("no_session", f"{robot_id} has no authenticated session (register first)")
            auth = unpack_auth(blob, "mac")
            for i, sess in enumerate(live):
                try:
                    sess.check(domain, digest, auth)
                except AuthError as e:
                    if e.reason == "bad_mac" and i + 1 < len(live):
                        continue  # another session's key, perhaps
                    raise
                # The client uses this key: the older ones end after the grace.
                now = self.clock()
                sess.used = True
                for old in live[i + 1:]:
                    if old.superseded_at is None:
                        old.superseded_at = now
                live[i + 1:] = [x for x in live[i + 1:] if now - x.superseded_at < SUPERSEDED_GRACE_S]
                return

    def sign(self, domain: bytes, digest: bytes) -> bytes:
        return self.signer.sign(domain, digest)

    def worker(self, instance_id: str) -> PeerVerifier:
        return PeerVerifier(self.keystore, Identity("worker", instance_id))


class RobotAuth:
    def __init__(self, keystore: Keystore, robot_id: str, server: Identity):
        ident = Identity("robot", robot_id)
        self.keystore = keystore
        self._requester = Requester(ident, keystore.private_key(ident), keystore.public_key(server))
        self.signer = PeerSigner(keystore, ident)
        self.server = PeerVerifier(keystore, server)
        self._mac: Optional[SessionMac] = None
        self._seq: Dict[bytes, int] = {}
        self._lock = threading.Lock()

    def proof(self, digest: bytes) -> bytes:
        return pack_proof(self._requester.proof(digest))

    def on_grant(self, blob) -> None:
        key = self._requester.accept(unpack_grant(blob))
        with self._lock:
            self._mac, self._seq = SessionMac(key, SESSION_MAC_DOMAIN), {}

    def tag_observation(self, digest: bytes) -> bytes:
        return self.tag_session(OBSERVATION, digest)

    def tag_session(self, domain: bytes, digest: bytes) -> bytes:
        with self._lock:
            if self._mac is None:
                raise AuthError("no_session", "not registered yet")
            seq = self._seq[domain] = self._seq.get(domain, 0) + 1
            return pack_auth(seq, self._mac.tag(signed_content(domain, seq, digest)))

    def check_chunk(self, digest: bytes, blob) -> None:
        self.server.check(CHUNK, digest, blob)

    def check_refusal(self, proof_blob, reason: str, blob) -> None:
        """A registration refusal is the server's answer to the proof we sent, or it is nobody's."""
        self.server.check(REGISTRATION_REFUSAL, refusal_digest(proof_blob, reason), blob)

    def tag_component_query(self, digest: bytes) -> bytes:
        return self.tag_session(COMPONENT_QUERY, digest)

    def check_component_answer(self, digest: bytes, blob) -> None:
        self.server.check(COMPONENT_ANSWER, digest, blob)


class ControllerAuth:
    def __init__(self, keystore: Keystore, robot_id: str, server: Identity):
        self.server = PeerVerifier(keystore, server)
        self.robot = PeerVerifier(keystore, Identity("robot", robot_id))

    def check_chunk(self, digest: bytes, blob) -> None:
        self.server.check(CHUNK, digest, blob)

    def check_segment(self, digest: bytes, blob) -> None:
        self.server.check(SEGMENT, digest, blob)

    def check_hold(self, digest: bytes, blob) -> None:
        self.robot.check(HOLD, digest, blob)


class WorkerAuth:
    def __init__(self, keystore: Keystore, instance_id: str, server: Identity):
        self.signer = PeerSigner(keystore, Identity("worker", instance_id))
        self.server = PeerVerifier(keystore, server)

    def check_request(self, digest: bytes, blob) -> None:
        self.server.check(BATCH_REQUEST, digest, blob)

    def check_component_request(self, digest: bytes, blob) -> None:
        self.server.check(WORKER_COMPONENT_QUERY, digest, blob)
