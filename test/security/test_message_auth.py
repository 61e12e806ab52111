"""Per-message tags: a flipped byte, a foreign session, a truncated or oversized tag and a replay
are refused by reason; refusals are counted and logged once per burst."""
from __future__ import annotations

import os

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from physai_ros.security.handshake import AuthError
from physai_ros.security.message_auth import RefusalLog, ReplayGuard, SessionMac, Signer, Verifier

IMAGE = os.urandom(224 * 224 * 3)


def _reason(fn):
    with pytest.raises(AuthError) as e:
        fn()
    return e.value.reason


def test_mac_refuses_a_flipped_byte_and_another_sessions_key():
    key = os.urandom(32)
    mac = SessionMac(key, b"observation")
    tag = mac.tag(IMAGE)
    mac.check(IMAGE, tag)
    flipped = bytearray(IMAGE)
    flipped[12345] ^= 0x01
    assert _reason(lambda: mac.check(bytes(flipped), tag)) == "bad_mac"
    assert _reason(lambda: SessionMac(os.urandom(32), b"observation").check(IMAGE, tag)) == "bad_mac"
    # The domain separates message kinds: an observation's tag is no chunk's.
    assert _reason(lambda: SessionMac(key, b"chunk").check(IMAGE, tag)) == "bad_mac"


def test_server_signatures_verify_with_the_public_key_only():
    key = Ed25519PrivateKey.generate()
    sig = Signer(key, b"chunk").sign(b"robot_1 round 4")
    Verifier(key.public_key(), b"chunk").check(b"robot_1 round 4", sig)
    assert _reason(lambda: Verifier(key.public_key(), b"chunk").check(b"robot_1 round 5", sig)) == "bad_signature"
    rogue = Ed25519PrivateKey.generate()
    assert _reason(lambda: Verifier(key.public_key(), b"chunk").check(
        b"robot_1 round 4", Signer(rogue, b"chunk").sign(b"robot_1 round 4"))) == "bad_signature"


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=200))
def test_malformed_tags_and_signatures_are_refused_never_raised_otherwise(junk):
    mac = SessionMac(os.urandom(32), b"observation")
    verifier = Verifier(Ed25519PrivateKey.generate().public_key(), b"chunk")
    assert _reason(lambda: mac.check(b"content", junk)) in ("malformed", "bad_mac")
    assert _reason(lambda: verifier.check(b"content", junk)) in ("malformed", "bad_signature")


def test_replay_guard_accepts_only_newer_counters_per_stream():
    g = ReplayGuard()
    g.check("robot_1", (4, 1.0))
    g.accept("robot_1", (4, 1.0))
    assert _reason(lambda: g.check("robot_1", (4, 1.0))) == "replayed"
    assert _reason(lambda: g.check("robot_1", (2, 5.0))) == "replayed"
    g.check("robot_1", (6, 1.2))
    g.check("robot_2", (1, 0.0))  # streams are independent
    g.forget("robot_1")
    g.check("robot_1", (1, 0.0))  # a new session starts afresh


def test_refusals_are_counted_every_time_and_logged_once_per_burst():
    lines, clock = [], [0.0]
    log = RefusalLog(lines.append, quiet_s=5.0, clock=lambda: clock[0])
    for _ in range(100):
        log.refused("chunk", AuthError("bad_signature", "x"))
        clock[0] += 0.01
    assert log.counts["bad_signature"] == 100 and len(lines) == 1
    clock[0] += 5.0
    log.refused("chunk", AuthError("replayed", "y"))
    assert len(lines) == 2 and "99 more refused" in lines[1]
