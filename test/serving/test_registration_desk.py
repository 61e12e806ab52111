"""The server side of registering (serving.registration_desk), without ROS, with the real tiny
serving core and the fleet's real authentication: a proven robot gets a session, a forged or
malformed request a counted refusal naming the robot, and session-tagged messages go on only with
a valid tag or from a robot not registered here at all."""
from __future__ import annotations

import dataclasses
import hashlib

import pytest

from physai_ros.client.robot_client import RobotClientCore
from physai_ros.monitoring.refusals import RefusalLog
from physai_ros.security.endpoints import OBSERVATION, RobotAuth, ServerAuth
from physai_ros.security.keystore import Identity, Keystore
from physai_ros.serving.registration_desk import RegistrationDesk
from physai_ros.serving.startup.engine_builder import build_core

SERVER = Identity("server", "policy_server")
DIGEST = hashlib.sha256(b"the request, without its proof").digest()


@pytest.fixture(scope="module")
def core(fleet):
    return build_core(fleet, instance_id="desk_test")


@pytest.fixture
def keys(tmp_path):
    ks = Keystore.init(tmp_path / "ks")
    ks.add(Identity("robot", "robot_0"))
    return ks


def desk_for(core, auth=None):
    return RegistrationDesk(core, auth, RefusalLog(max_ids=8))


def test_a_proven_robot_is_admitted_with_a_session_grant(core, fleet, keys):
    desk = desk_for(core, ServerAuth(keys, SERVER))
    robot = RobotAuth(keys, "robot_0", SERVER)
    reg = RobotClientCore(fleet.robots[0]).registration()
    out = desk.register(reg, None, "robot_0", lambda: DIGEST, robot.proof(DIGEST))
    assert out.result.accepted and out.grant is not None and out.warning is None
    robot.on_grant(out.grant)  # the robot takes it: the session is the server's
    tag = robot.tag_observation(DIGEST)
    assert desk.session_problem(lambda: desk.auth.check_observation("robot_0", DIGEST, tag), "robot_0") is None
    problem = desk.session_problem(lambda: desk.auth.check_observation("robot_0", DIGEST, b"\0" * len(tag)),
                                   "robot_0")
    assert problem is not None and problem[0].startswith("unauthenticated_")


def test_a_forged_proof_is_refused_counted_and_the_refusal_signed(core, fleet, keys, tmp_path):
    desk = desk_for(core, ServerAuth(keys, SERVER))
    other = Keystore.init(tmp_path / "other")
    other.add(Identity("robot", "robot_0"))  # same name, another key: a forger
    forged = RobotAuth(other, "robot_0", SERVER).proof(DIGEST)
    reg = RobotClientCore(fleet.robots[0]).registration()
    out = desk.register(reg, None, "robot_0", lambda: DIGEST, forged)
    assert not out.result.accepted and out.result.reason.startswith("unauthenticated_")
    assert out.grant is None and "robot_0" in out.warning
    assert desk.refusals.total == 1 and "robot_0" in desk.refusals.snapshot()
    assert desk.refusal_signature(forged, out.result.reason)


def test_an_unreadable_request_is_refused_and_counted_quietly(core):
    desk = desk_for(core)
    out = desk.register(None, "view_heights: 3 values for 2 cameras", "robot_9", lambda: DIGEST, b"")
    assert not out.result.accepted and out.result.reason.startswith("bad_registration: view_heights")
    assert out.warning is None and desk.refusals.total == 1 and "robot_9" in desk.refusals.snapshot()
    assert desk.refusal_signature(b"", out.result.reason) is None  # insecure fleet: nothing to sign


def test_the_cores_refusal_is_counted_with_its_reason(core, fleet):
    desk = desk_for(core)
    robot = fleet.robots[0]
    reg = dataclasses.replace(RobotClientCore(robot).registration(), prompt="  ")
    out = desk.register(reg, None, robot.id, lambda: DIGEST, b"")
    assert not out.result.accepted and out.result.reason == "bad_registration: prompt is empty"
    assert desk.refusals.snapshot()[robot.id].by_reason["bad_registration"] == 1
    assert out.warning == f"refused registration of {robot.id!r}: {out.result.reason}"


def test_an_unregistered_robots_message_goes_on_to_be_told_to_register(core, keys):
    """A restarted server has no session for anyone: the message is let through, and the core
    answers "not registered", which makes the client register again."""
    desk = desk_for(core, ServerAuth(keys, SERVER))
    assert core.registration("robot_unknown") is None
    assert desk.session_problem(lambda: desk.auth.check_session("robot_unknown", OBSERVATION, DIGEST, b""),
                                "robot_unknown") is None
