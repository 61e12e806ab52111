"""A robot client's operator commands: authenticated first, for this robot, meaningful now;
every refusal has its reason and is counted."""
from physai_ros.client.operator_commands import OperatorCommands, OperatorRequest
from physai_ros.client.types import ClientState
from physai_ros.security.handshake import AuthError

from test_robot_client_core import client, register


def stopped_client(fleet):
    c = client(fleet, fallback="hold", slo_ms=100, max_miss=1, startup_grace_s=0)
    register(c)
    c.tick(10.0)
    c.tick(10.2)  # a miss -> stopped
    assert c.state == ClientState.STOPPED
    return c


def request(command="resume", robot="robot_0"):
    return OperatorRequest(robot_id=robot, command=command, note="checked the cell", operator="alice")


def refuse(reason):
    def authenticate():
        raise AuthError(reason, "as the check said")
    return authenticate


def test_only_an_authenticated_resume_for_this_robot_releases_it(fleet):
    c = stopped_client(fleet)
    cmds = OperatorCommands("robot_0", c)
    for auth, req, why in [(refuse("missing"), request(), "unauthenticated_missing"),
                           (refuse("bad_signature"), request(), "unauthenticated_bad_signature"),
                           (lambda: None, request(robot="robot_1"), "wrong_robot"),
                           (lambda: None, request("reboot"), "unknown_command"),
                           (lambda: None, request("acknowledge"), "not_escalated")]:
        a = cmds.handle(req, auth)
        assert not a.accepted and a.refusal == why, a
        assert c.state == ClientState.STOPPED
    ok = cmds.handle(request(), lambda: None)
    assert ok.accepted and "SLO" in ok.cleared and c.state == ClientState.RUNNING
    again = cmds.handle(request(), lambda: None)
    assert not again.accepted and again.refusal == "not_stopped"
    assert dict(cmds.accepted) == {"resume": 1}
    assert dict(cmds.refused) == {"unauthenticated_missing": 1, "unauthenticated_bad_signature": 1, "wrong_robot": 1,
                                  "unknown_command": 1, "not_escalated": 1, "not_stopped": 1}


def test_an_insecure_fleet_takes_the_command_unsigned(fleet):
    c = stopped_client(fleet)
    assert OperatorCommands("robot_0", c).handle(request(), None).accepted


def test_with_a_pipeline_both_commands_go_to_its_acknowledge(fleet):
    c = stopped_client(fleet)
    calls = []

    def acknowledge(note):
        calls.append(note)
        return (True, "", "task failed 2 times") if len(calls) == 1 else (False, "not_escalated", "")
    cmds = OperatorCommands("robot_0", c, acknowledge)
    assert cmds.handle(request("acknowledge"), lambda: None).cleared == "task failed 2 times"
    assert cmds.handle(request("resume"), lambda: None).refusal == "not_escalated"
    assert calls == ["checked the cell", "checked the cell"]
