"""Each process's side of fleet authentication, end to end in one process: the robot's session
with the server, chunks only the server (or, for holds, the robot) signed, worker batches, key
rollover at re-registration, revocation at the next message; and the parsers of the signed
fields under truncated, oversized and garbled input (one counted refusal, never a crash)."""
from __future__ import annotations

import hashlib
import json
import random

import pytest

from physai_ros.security.endpoints import (BATCH_REQUEST, BATCH_RESULT, CHUNK, HOLD, MAX_SESSIONS, OBSERVATION,
                                           SEGMENT, SUPERSEDED_GRACE_S, WRENCH, ControllerAuth, RobotAuth,
                                           ServerAuth, WorkerAuth)
from physai_ros.security.handshake import AuthError
from physai_ros.security.keystore import Identity, Keystore
from physai_ros.security.wire import unpack_auth, unpack_grant, unpack_proof

SERVER = Identity("server", "policy_server")


def d(text: str) -> bytes:
    return hashlib.sha256(text.encode()).digest()


@pytest.fixture
def ks(tmp_path):
    ks = Keystore.init(tmp_path / "ks")
    for r in ("robot_0", "robot_1"):
        ks.add(Identity("robot", r))
    ks.add(Identity("worker", "worker_0"))
    return ks


def refused(fn, reason):
    with pytest.raises(AuthError) as e:
        fn()
    assert e.value.reason == reason, str(e.value)


def registered(ks, server, robot_id="robot_0"):
    robot = RobotAuth(ks, robot_id, SERVER)
    grant, key = server.register(robot_id, d("reg"), robot.proof(d("reg")))
    server.start_session(robot_id, key)
    robot.on_grant(grant)
    return robot


def test_observations_need_the_session_and_are_refused_when_altered_replayed_or_foreign(ks):
    server = ServerAuth(ks, SERVER)
    refused(lambda: server.check_observation("robot_0", d("obs"), b""), "no_session")
    robot = registered(ks, server)
    tag1 = robot.tag_observation(d("obs 1"))
    server.check_observation("robot_0", d("obs 1"), tag1)
    refused(lambda: server.check_observation("robot_0", d("obs 1"), tag1), "replayed")
    tag2 = robot.tag_observation(d("obs 2"))
    refused(lambda: server.check_observation("robot_0", d("obs 2 altered"), tag2), "bad_mac")
    refused(lambda: server.check_observation("robot_1", d("obs 2"), tag2), "no_session")  # in another's name
    other = registered(ks, server, "robot_1")
    refused(lambda: server.check_observation("robot_1", d("obs 2"), tag2), "bad_mac")
    server.check_observation("robot_1", d("x"), other.tag_observation(d("x")))
    server.check_observation("robot_0", d("obs 2"), tag2)


def test_wrench_samples_have_their_own_counter_and_domain(ks):
    server = ServerAuth(ks, SERVER)
    robot = registered(ks, server)
    w1 = robot.tag_session(WRENCH, d("w1"))
    o1 = robot.tag_observation(d("o1"))  # counters per domain: both are 1, both accepted
    server.check_session("robot_0", WRENCH, d("w1"), w1)
    server.check_observation("robot_0", d("o1"), o1)
    refused(lambda: server.check_session("robot_0", OBSERVATION, d("w2"), robot.tag_session(WRENCH, d("w2"))),
            "bad_mac")  # a wrench tag is no observation tag
    refused(lambda: server.check_session("robot_0", WRENCH, d("w1"), w1), "replayed")


def test_registration_signed_by_another_robot_or_revoked_is_refused(ks):
    server = ServerAuth(ks, SERVER)
    robot1 = RobotAuth(ks, "robot_1", SERVER)
    refused(lambda: server.register("robot_0", d("reg"), robot1.proof(d("reg"))), "wrong_identity")
    refused(lambda: server.register("robot_1", d("reg altered"), robot1.proof(d("reg"))), "bad_signature")
    ks.revoke(Identity("robot", "robot_1"))
    with pytest.raises(Exception):
        RobotAuth(ks, "robot_1", SERVER)  # its private key is gone
    robot0 = registered(ks, server)
    ks.revoke(Identity("robot", "robot_0"))
    refused(lambda: server.check_observation("robot_0", d("o"), robot0.tag_observation(d("o"))), "revoked")
    refused(lambda: server.register("robot_0", d("reg"), robot0.proof(d("reg"))), "revoked")


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_rollover_accepts_in_flight_messages_under_the_previous_key(ks):
    """A client's topics are not ordered with each other: a wrench sample (or observation) tagged
    under the old key may arrive after an observation under the new one. It is accepted for
    SUPERSEDED_GRACE_S after the new key was first used, refused after."""
    clock = Clock()
    server = ServerAuth(ks, SERVER, clock=clock)
    robot = registered(ks, server)
    in_flight = robot.tag_observation(d("a"))
    late_wrench = robot.tag_session(WRENCH, d("late wrench"))
    late = robot.tag_observation(d("late"))
    grant, key = server.register("robot_0", d("reg"), robot.proof(d("reg")))
    server.start_session("robot_0", key)  # the server switched, the client has not seen the grant
    server.check_observation("robot_0", d("a"), in_flight)
    robot.on_grant(grant)
    server.check_observation("robot_0", d("b"), robot.tag_observation(d("b")))
    clock.t += SUPERSEDED_GRACE_S / 2
    server.check_session("robot_0", WRENCH, d("late wrench"), late_wrench)
    refused(lambda: server.check_session("robot_0", WRENCH, d("late wrench"), late_wrench), "replayed")
    server.check_observation("robot_0", d("c"), robot.tag_observation(d("c")))
    # Past the grace after the new key's first use, the old one is done.
    clock.t += SUPERSEDED_GRACE_S
    server.check_observation("robot_0", d("d"), robot.tag_observation(d("d")))
    refused(lambda: server.check_observation("robot_0", d("late"), late), "bad_mac")


def test_unanswered_grants_never_push_out_the_key_in_use(ks):
    """A rogue registration service answering first (or requests timing out) means the server
    grants sessions the client never sees; however many, the one it uses stays valid."""
    server = ServerAuth(ks, SERVER)
    robot = registered(ks, server)
    server.check_observation("robot_0", d("o0"), robot.tag_observation(d("o0")))
    for k in range(3 * MAX_SESSIONS):
        _, key = server.register("robot_0", d(f"reg{k}"), robot.proof(d(f"reg{k}")))
        server.start_session("robot_0", key)
        server.check_observation("robot_0", d(f"o{k + 1}"), robot.tag_observation(d(f"o{k + 1}")))


def test_grants_the_client_handles_late_or_never_do_not_cost_it_a_message(ks):
    """Seen in the 16-robot soak: on a loaded host a registration answer is handled after the
    next registration was sent (or never, when the request timed out). The client keeps its key
    until it accepts a grant; every grant since stays valid at the server; the client matches a
    late grant against each proof it has outstanding."""
    server = ServerAuth(ks, SERVER)
    robot = registered(ks, server)
    grants = []
    for k in range(3):  # three registrations in a row, no answer handled yet
        g, key = server.register("robot_0", d(f"reg{k}"), robot.proof(d(f"reg{k}")))
        server.start_session("robot_0", key)
        grants.append(g)
    server.check_observation("robot_0", d("old key"), robot.tag_observation(d("old key")))
    robot.on_grant(grants[0])  # the oldest answer arrives last-but-not-least
    server.check_observation("robot_0", d("k0"), robot.tag_observation(d("k0")))
    refused(lambda: robot.on_grant(grants[0]), "bad_signature")  # answered already
    robot.on_grant(grants[2])
    server.check_observation("robot_0", d("k2"), robot.tag_observation(d("k2")))
    refused(lambda: robot.on_grant(grants[1]), "unexpected_grant")  # superseded: nothing outstanding


def test_controller_executes_only_what_the_server_or_its_robot_signed(ks):
    server = ServerAuth(ks, SERVER)
    robot = registered(ks, server)
    ctl = ControllerAuth(ks, "robot_0", SERVER)
    sig = server.sign(CHUNK, d("chunk 1"))
    ctl.check_chunk(d("chunk 1"), sig)
    refused(lambda: ctl.check_chunk(d("chunk 1"), sig), "replayed")
    refused(lambda: ctl.check_chunk(d("chunk 2"), server.sign(CHUNK, d("chunk 1"))), "bad_signature")
    refused(lambda: ctl.check_segment(d("s"), server.sign(CHUNK, d("s"))), "bad_signature")  # domains differ
    ctl.check_segment(d("s"), server.sign(SEGMENT, d("s")))
    refused(lambda: ctl.check_chunk(d("h"), robot.signer.sign(HOLD, d("h"))), "bad_signature")
    ctl.check_hold(d("h"), robot.signer.sign(HOLD, d("h")))
    refused(lambda: ctl.check_hold(d("h2"), server.sign(HOLD, d("h2"))), "bad_signature")
    # A restarted server (new counter base) is still newer than the old one's last chunk.
    ctl.check_chunk(d("after restart"), ServerAuth(ks, SERVER).sign(CHUNK, d("after restart")))
    # A rogue key that is not the fleet's server's:
    rogue = Keystore.init(ks.root.parent / "rogue")
    refused(lambda: ctl.check_chunk(d("x"), ServerAuth(rogue, SERVER).sign(CHUNK, d("x"))), "bad_signature")


def test_a_chunk_signed_for_another_fleet_on_the_same_keys_is_refused(ks, tmp_path):
    """Two fleets sharing one keystore (the auto one of a user on one host, a keystore copied to
    two cells) run in different ROS domains: each one's chunks, segments and holds are refused by
    the other's controller. A keystore copied as is keeps its fleet id; the domain tells them
    apart. A copy made with `keys init` per cell has its own id as well."""
    import shutil

    here = ControllerAuth(Keystore(ks.root, domain="7"), "robot_0", SERVER)
    elsewhere = Keystore(ks.root, domain="8")
    refused(lambda: here.check_chunk(d("c"), ServerAuth(elsewhere, SERVER).sign(CHUNK, d("c"))), "bad_signature")
    refused(lambda: here.check_segment(d("s"), ServerAuth(elsewhere, SERVER).sign(SEGMENT, d("s"))), "bad_signature")
    refused(lambda: here.check_hold(d("h"), RobotAuth(elsewhere, "robot_0", SERVER).signer.sign(HOLD, d("h"))),
            "bad_signature")
    here.check_chunk(d("c"), ServerAuth(Keystore(ks.root, domain="7"), SERVER).sign(CHUNK, d("c")))
    # Same keys, same domain, another fleet id (keystore.json edited as a second cell's would be).
    other = tmp_path / "copy"
    shutil.copytree(ks.root, other)
    meta = json.loads((other / "keystore.json").read_text())
    (other / "keystore.json").write_text(json.dumps(dict(meta, fleet_id="another_cell")))
    refused(lambda: here.check_chunk(d("c2"), ServerAuth(Keystore(other, domain="7"), SERVER).sign(CHUNK, d("c2"))),
            "bad_signature")


def test_worker_batches_both_ways(ks):
    server = ServerAuth(ks, SERVER)
    worker = WorkerAuth(ks, "worker_0", SERVER)
    worker.check_request(d("batch"), server.sign(BATCH_REQUEST, d("batch")))
    from_worker = server.worker("worker_0")
    from_worker.check(BATCH_RESULT, d("res"), worker.signer.sign(BATCH_RESULT, d("res")))
    refused(lambda: server.worker("worker_1").check(BATCH_RESULT, d("r"), worker.signer.sign(BATCH_RESULT, d("r"))),
            "unknown_identity")
    ks.revoke(Identity("worker", "worker_0"))
    refused(lambda: from_worker.check(BATCH_RESULT, d("r2"), worker.signer.sign(BATCH_RESULT, d("r2"))), "revoked")


@pytest.mark.parametrize("kind", ["mac", "sig"])
def test_fuzzed_auth_fields_are_one_refusal_each(ks, kind):
    rng = random.Random(7)
    server = ServerAuth(ks, SERVER)
    robot = registered(ks, server)
    ctl = ControllerAuth(ks, "robot_0", SERVER)
    good = robot.tag_observation(d("o")) if kind == "mac" else server.sign(CHUNK, d("c"))
    check = ((lambda b: server.check_observation("robot_0", d("o"), b)) if kind == "mac"
             else (lambda b: ctl.check_chunk(d("c"), b)))
    cases = [good[:n] for n in range(len(good))]  # every truncation
    cases += [good + b"\0", good + bytes(1000), bytes(100_000), b"\x02" + good[1:]]
    for _ in range(200):  # random byte flips and garbage
        b = bytearray(good)
        b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        cases.append(bytes(b))
        cases.append(bytes(rng.randrange(256) for _ in range(rng.randrange(0, 120))))
    reasons = set()
    for blob in cases:
        with pytest.raises(AuthError) as e:
            check(blob)
        reasons.add(e.value.reason)
    assert reasons <= {"missing", "malformed", "bad_mac", "bad_signature", "replayed"}, reasons
    check(good)  # the real one still passes after all that


def test_fuzzed_proofs_and_grants_do_not_parse_into_anything(ks):
    rng = random.Random(3)
    robot = RobotAuth(ks, "robot_0", SERVER)
    proof = robot.proof(d("reg"))
    server = ServerAuth(ks, SERVER)
    for n in range(len(proof)):
        with pytest.raises(AuthError):
            server.register("robot_0", d("reg"), proof[:n])
    for _ in range(300):
        blob = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 300)))
        for parse in (unpack_proof, unpack_grant, lambda b: unpack_auth(b, "sig")):
            try:
                parse(blob)
            except AuthError:
                pass
    b = bytearray(proof)
    b[-1] ^= 1
    refused(lambda: server.register("robot_0", d("reg"), bytes(b)), "bad_signature")
    grant, _ = server.register("robot_0", d("reg"), proof)
    refused(lambda: robot.on_grant(grant[:-1]), "malformed")
    bad = bytearray(grant)
    bad[20] ^= 1
    refused(lambda: robot.on_grant(bytes(bad)), "bad_signature")


def test_only_the_fleet_servers_refusal_of_our_own_proof_counts(ks):
    """A second register_robot service answering "refused" first (it receives every robot's
    request too) must not change the robot's state: refusals are signed over the proof they answer."""
    server = ServerAuth(ks, SERVER)
    robot = RobotAuth(ks, "robot_0", SERVER)
    proof = robot.proof(d("reg"))
    reason = "fleet_full: 4 robots served"
    signed = server.sign_refusal(proof, reason)
    robot.check_refusal(proof, reason, signed)
    refused(lambda: robot.check_refusal(proof, reason, signed), "replayed")
    refused(lambda: robot.check_refusal(proof, reason, b""), "missing")  # unsigned, as a rogue sends it
    again = server.sign_refusal(proof, reason)
    refused(lambda: robot.check_refusal(proof, "another reason", again), "bad_signature")
    other_proof = robot.proof(d("reg 2"))
    refused(lambda: robot.check_refusal(other_proof, reason, server.sign_refusal(proof, reason)), "bad_signature")
    worker = WorkerAuth(ks, "worker_0", SERVER)  # signed, but not by the server
    refused(lambda: robot.check_refusal(proof, reason, worker.signer.sign(b"registration_refusal", d("x"))),
            "bad_signature")
