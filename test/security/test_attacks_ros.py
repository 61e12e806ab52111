"""Attacks on an authenticated fleet, with real processes over DDS.

A policy server and the robot `victim` (sim_robot, robot_client, trajectory_controller) run as
separate processes with a keystore made for the test; this process plays the attacker (and,
for the revocation case, the legitimate robot `other`, with its real key). Every attack must be
refused, counted with its reason where an operator looks (/diagnostics, ExecutionInfo, the
client's status), and change nothing: the victim's joint commands never carry the rogue targets,
no forged or replayed round is answered, the victim keeps being served.
A fake engine worker answering batches is in test/workers/test_remote_worker.py.
"""
from __future__ import annotations

import array
import copy
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "faults"))

from fault_fleet import fleet_doc  # noqa: E402
from process_rig import STARTUP_S, ProcessRig, server_spec  # noqa: E402

from physai_ros.config.fleet import load_fleet  # noqa: E402
from physai_ros.fleet.plan import robot_specs  # noqa: E402
from physai_ros.fleet.processes import stop_processes  # noqa: E402
from physai_ros.security.keystore import Identity, Keystore  # noqa: E402

pytestmark = [pytest.mark.ros, pytest.mark.slow]
HERE = Path(__file__).resolve().parent
ROGUE_TARGET = 2.5  # rad: a position no real chunk of this fleet commands


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    from physai_ros_interfaces.msg import ActionChunk, ExecutionInfo, Observation
    from std_msgs.msg import String
    from trajectory_msgs.msg import JointTrajectory

    d = tmp_path_factory.mktemp("attacks")
    ks = Keystore.init(d / "keys")
    for rid in ("victim", "other"):
        ks.add(Identity("robot", rid))
    doc = fleet_doc(robots=("victim", "other"))
    doc["security"] = {"keystore": str(d / "keys")}
    (d / "fleet.yaml").write_text(yaml.safe_dump(doc))
    cfg = load_fleet(d / "fleet.yaml")
    rig = ProcessRig(d / "logs", "attacker")
    rig.fleet, rig.keystore, rig.dir = cfg, ks, d
    try:
        rig.start(server_spec("policy_server", cfg.source))
        for spec in robot_specs(cfg, cfg.robot("victim")):
            rig.start(spec)
        rig.obs = rig.record(Observation, "/victim/observation")
        rig.chunks = rig.record(ActionChunk, "/victim/action_chunk")
        rig.other_chunks = rig.record(ActionChunk, "/other/action_chunk")
        rig.commands = rig.record(JointTrajectory, "/victim/joint_trajectory")
        rig.info = rig.record(ExecutionInfo, "/victim/execution_info")
        rig.status = rig.record(String, "/victim/client_status")
        rig.wait(lambda: len(served(rig)) >= 3, STARTUP_S, "the victim served with authentication on")
        rig.wait(lambda: (i := latest(rig.info)) is not None and i.chunks_accepted >= 3, 60,
                 "the victim's controller executing chunks")
        yield rig
    finally:
        rig.close()


def served(rig) -> list:
    return [c for _, c in rig.chunks if c.status == 0 and c.engine_instance and not c.engine_instance.startswith("hold")]


def latest(records):
    return records[-1][1] if records else None


def client_status(rig) -> dict:
    m = latest(rig.status)
    return json.loads(m.data) if m is not None else {}


def diag_named(rig, suffix: str, node: str) -> dict:
    with rig.lock:
        return next((v for k, v in rig.diag.items() if k.endswith(suffix) and node in k), {})


def test_rogue_and_replayed_chunks_never_reach_the_arm(fleet):
    from physai_ros_interfaces.msg import ActionChunk

    from physai_ros.ros.message_digest import digest
    from physai_ros.ros.qos import reliable_qos
    from physai_ros.security.endpoints import CHUNK, ServerAuth

    rig = fleet
    pub = rig.node.create_publisher(ActionChunk, "/victim/action_chunk", reliable_qos())
    rig.wait(lambda: pub.get_subscription_count() >= 2, 20, "the controller and client matching the rogue")
    rig.wait(lambda: latest(rig.info), 20, "the controller's execution_info")
    with rig.lock:
        real = copy.deepcopy(served(rig)[-1])
        rejected0 = latest(rig.info).chunks_rejected
        accepted0 = latest(rig.info).chunks_accepted

    def rogue():
        m = copy.deepcopy(real)
        m.round_id = real.round_id + 10_000
        now = time.time()
        m.header.stamp.sec, m.header.stamp.nanosec = int(now), int(now % 1 * 1e9)
        m.actions = array.array("f", [ROGUE_TARGET] * len(real.actions))
        return m

    unsigned = rogue()
    unsigned.auth = b""
    foreign = rogue()  # signed by a server key that is not the fleet's
    foreign.auth = ServerAuth(Keystore.init(rig.dir / "rogue_keys"), rig.fleet.security.server).sign(
        CHUNK, digest(foreign))
    # Another fleet on these very keys (the auto keystore of one user on one host, a keystore
    # copied to a second cell) signs chunks for its own robot of this name in its own ROS domain:
    # relayed here, they must not move the victim.
    other_fleet = rogue()
    other_domain = str(int(os.environ.get("ROS_DOMAIN_ID", "0")) + 1)
    other_fleet.auth = ServerAuth(Keystore(rig.keystore.root, domain=other_domain),
                                  rig.fleet.security.server).sign(CHUNK, digest(other_fleet))
    borrowed = rogue()  # the real chunk's valid signature on the rogue content
    borrowed.auth = real.auth
    replayed = copy.deepcopy(real)  # the real chunk, again
    # The publisher matching both readers does not mean both readers have matched it: a
    # volatile reader drops what a writer sent before its own side of discovery completed (one
    # CI run lost the client's copies that way). An unsigned probe, repeated until both count
    # it, proves both sides matched; the attacks are then counted by reasons the probe never has.
    def client_refused() -> dict:
        return client_status(rig).get("auth_refused", {})

    probe = rogue()
    probe.auth = b""
    client0 = sum(client_refused().values())
    rig.wait(lambda: (pub.publish(probe) or True) and latest(rig.info).chunks_rejected > rejected0
             and sum(client_refused().values()) > client0, 20, "the controller and client refusing a probe")
    with rig.lock:
        rejected0 = latest(rig.info).chunks_rejected
    client0 = dict(client_refused())
    for m in (unsigned, foreign, other_fleet, borrowed, replayed):
        pub.publish(m)
    rig.wait(lambda: latest(rig.info).chunks_rejected >= rejected0 + 5, 20,
             f"the controller refusing 5 chunks (info {latest(rig.info)})")
    ctl = rig.wait(lambda: (s := diag_named(rig, ": security", "trajectory_controller"))
                   and {"refused.missing", "refused.bad_signature", "refused.replayed"} <= set(s) and s, 20,
                   "the controller's security status counting the refusals")
    assert sum(int(v) for k, v in ctl.items() if k.startswith("refused.")) >= 5, ctl
    # The client refuses them too (its ledger would otherwise take a forged answer for a round):
    # the foreign, other fleet's and borrowed signatures and the replay, by reasons an unsigned
    # probe never has.
    def client_new() -> int:
        now = client_refused()
        return sum(n - client0.get(k, 0) for k, n in now.items() if k != "missing")

    rig.wait(lambda: client_new() >= 4, 20, f"the client refusing them ({client0} -> {client_refused()})")
    # The victim keeps being served, and no command ever carried the rogue target.
    rig.wait(lambda: latest(rig.info).chunks_accepted >= accepted0 + 3, 60, "the victim still executing chunks")
    with rig.lock:
        # The rogue chunks command every joint to ROGUE_TARGET (one joint may pass it by itself).
        hits = [p.positions for _, t in rig.commands for p in t.points
                if all(abs(x - ROGUE_TARGET) < 1e-3 for x in p.positions)]
    assert not hits, f"{len(hits)} commanded points carry the rogue target"
    st = client_status(rig)
    assert st["round_ledger"]["duplicated"] == 0 and st["round_ledger"]["lost"] == 0, st["round_ledger"]


def test_replayed_tampered_and_foreign_observations_are_refused_unanswered(fleet):
    from physai_ros_interfaces.msg import Observation

    from physai_ros.ros.qos import reliable_qos

    rig = fleet
    pub = rig.node.create_publisher(Observation, "/victim/observation", reliable_qos())
    rig.wait(lambda: pub.get_subscription_count() >= 1, 20, "the server matching the attacker")
    with rig.lock:
        captured = copy.deepcopy(latest(rig.obs))
    srv0 = diag_named(rig, "policy_server: victim", "")
    before = int(srv0.get("refused_total", 0))
    replayed = copy.deepcopy(captured)
    tampered = copy.deepcopy(captured)
    tampered.images[0].data[7] ^= 1  # one flipped bit in the image
    tampered.round_id += 50_000  # never a real round: an answer would show
    foreign = copy.deepcopy(captured)  # tagged by another robot's session
    foreign.round_id += 60_000
    assert rig.register(_registration(rig, "other")).accepted
    rig.keys("other").observation(foreign)
    for m in (replayed, tampered, foreign):
        pub.publish(m)
    counts = rig.wait(lambda: (s := diag_named(rig, "policy_server: victim", ""))
                      and int(s.get("refused_total", 0)) >= before + 3 and s, 30,
                      "the server counting 3 refused observations of the victim")
    assert {"refused.unauthenticated_replayed", "refused.unauthenticated_bad_mac"} <= set(counts), counts
    n = len(served(rig))
    rig.wait(lambda: len(served(rig)) >= n + 3, 60, "the victim still served")
    with rig.lock:
        answers = [c.round_id for _, c in rig.chunks]
    assert answers.count(captured.round_id) <= 1, "the replayed round was answered twice"
    assert tampered.round_id not in answers and foreign.round_id not in answers
    st = client_status(rig)
    assert st["round_ledger"]["duplicated"] == 0 and st["round_ledger"]["unknown_answers"] == 0, st


def _registration(rig, rid):
    from physai_ros.ros.codecs.registration import registration_to_request
    from physai_ros.client.robot_client import RobotClientCore

    return registration_to_request(RobotClientCore(rig.fleet.robot(rid)).registration())


def test_registrations_with_a_wrong_missing_or_revoked_key_are_refused(fleet):
    from physai_ros_interfaces.msg import Observation

    from physai_ros.ros.codecs.observation import observation_to_msg
    from physai_ros.ros.qos import reliable_qos
    from physai_ros.security.config import SecurityConfig
    from physai_ros.security.endpoints import RobotAuth
    from physai_ros.ros.message_digest import digest
    from fault_fleet import obs

    rig = fleet
    n = len(served(rig))
    # As the victim, signed with another robot's key / unsigned / with a look-alike key.
    as_victim = _registration(rig, "victim")
    rig.keys("other").request(as_victim)
    refused = {"wrong": rig.register(as_victim, sign=False)}
    refused["unsigned"] = rig.register(_registration(rig, "victim"), sign=False)
    lookalike = Keystore.init(rig.dir / "lookalike")
    lookalike.add(Identity("robot", "victim"))
    req = _registration(rig, "victim")
    req.auth_proof = RobotAuth(lookalike, "victim", SecurityConfig().server).proof(digest(req, skip=("auth_proof",)))
    refused["lookalike"] = rig.register(req, sign=False)
    assert not any(r.accepted for r in refused.values()), refused
    assert refused["wrong"].reason.startswith("unauthenticated_wrong_identity"), refused["wrong"].reason
    assert refused["unsigned"].reason.startswith("unauthenticated_missing"), refused["unsigned"].reason
    assert refused["lookalike"].reason.startswith("unauthenticated_bad_signature"), refused["lookalike"].reason
    # The victim's own session was not disturbed by any of them.
    rig.wait(lambda: len(served(rig)) >= n + 3, 60, "the victim still served")

    # `other` is a fleet member: served, until revoked; then refused at its next message.
    pub = rig.node.create_publisher(Observation, "/other/observation", reliable_qos())
    assert rig.register(_registration(rig, "other")).accepted
    rig.wait(lambda: pub.get_subscription_count() >= 1, 20, "the server matching other's observations")
    pub.publish(rig.signed_observation(observation_to_msg(obs("other", 10))))
    rig.wait(lambda: any(c.round_id == 10 and c.status == 0 for _, c in rig.other_chunks), 60, "other served")
    out = subprocess.run([sys.executable, "-m", "physai_ros.fleet", "keys", "revoke", str(rig.keystore.root),
                          "robot/other"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    before = int(diag_named(rig, "policy_server: other", "").get("refused_total", 0))
    pub.publish(rig.signed_observation(observation_to_msg(obs("other", 12))))
    counts = rig.wait(lambda: (s := diag_named(rig, "policy_server: other", ""))
                      and int(s.get("refused_total", 0)) > before and s, 30, "other's next observation refused")
    assert "refused.unauthenticated_revoked" in counts, counts
    assert not any(c.round_id == 12 for _, c in rig.other_chunks)
    again = rig.register(_registration(rig, "other"))
    assert not again.accepted and again.reason.startswith("unauthenticated_revoked"), again.reason


def test_a_rogue_registration_service_answering_first_changes_nothing(fleet):
    """A second /policy_server/register_robot receives every robot's registration too and answers
    "refused" at once: unsigned, or signed by a key that is not the fleet server's. The victim's
    client counts those answers and acts on none: it stays running, keeps its session (the grants
    it never saw do not push out the key it uses) and none of its observations is refused."""
    from physai_ros.fleet.processes import ProcessSpec
    from physai_ros.security.endpoints import MAX_SESSIONS

    rig = fleet
    rogue_keys = Keystore.init(rig.dir / "rogue_registrar_keys")

    def refused_answers() -> dict:
        got = client_status(rig).get("auth_refused", {})
        return {k: int(got.get(k, 0)) for k in ("missing", "bad_signature")}

    def bad_macs() -> int:
        return int(diag_named(rig, "policy_server: victim", "").get("refused.unauthenticated_bad_mac", 0))

    rig.wait(lambda: client_status(rig).get("state") == "running", 60, "the victim running")
    with rig.lock:
        first_status = len(rig.status)
    refused0, macs0, served0 = refused_answers(), bad_macs(), len(served(rig))
    rogue = rig.start(ProcessSpec("rogue_registrar", "rogue_registrar", "", {"keys": str(rogue_keys.root)},
                                  env={"PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}))
    rig.killed.add("rogue_registrar")  # its end, below, is on purpose

    def rogue_answers() -> int:
        path = rig.procs.log_path("rogue_registrar")
        return path.read_text().count("(victim)") if path.exists() else 0

    try:
        # Keep-alives go every 2 s: more of them than the server keeps unanswered grants.
        rig.wait(lambda: rogue_answers() >= MAX_SESSIONS + 4, 90, "the rogue answering the victim's keep-alives")
    finally:
        stop_processes([rogue.popen])  # SIGTERM: a SIGKILLed DDS participant can leave a shared-memory lock
    rig.wait(lambda: len(served(rig)) >= served0 + 5, 60, "the victim still served")
    with rig.lock:
        states = [json.loads(m.data)["state"] for _, m in rig.status[first_status:]]
    assert states and set(states) == {"running"}, sorted(set(states))
    assert bad_macs() == macs0, "an observation of the victim was refused: its session was dropped"
    # The rogue won some races (both kinds of answer) and each such answer was counted, not obeyed.
    got = refused_answers()
    assert got["missing"] > refused0["missing"] and got["bad_signature"] > refused0["bad_signature"], (refused0, got)


def test_insecure_is_said_loudly(fleet, tmp_path):
    """A node told `insecure` says so at start (an ERROR line) and on /diagnostics (WARN)."""
    from physai_ros.fleet.processes import ProcessSpec

    rig = fleet
    rig.start(ProcessSpec("open_controller", "physai_ros.nodes.trajectory_controller", "open_bot",
                          {"robot_id": "open_bot", "insecure": True, "fleet_file": rig.fleet.source}))
    status = rig.wait(lambda: next((v for k, v in rig.diag_status.items()
                                    if "security" in k and "INSECURE" in v[1]), None), 60,
                      "the insecure controller's security status")
    assert status[0] == 1  # WARN
    assert "NOT authenticated" in rig.procs.log_tail("open_controller", 200)
