"""The robot side of registering (client.registration.RegistrationExchange), without ROS: when a
request goes out, when one in flight is given up, and what a server's answer changes, with
authentication's checks on refusals and grants."""
from physai_ros.client.registration import RegistrationExchange
from physai_ros.client.robot_client import RobotClientCore
from physai_ros.client.types import ClientState
from physai_ros.protocol.registration import RegistrationResult
from physai_ros.security.handshake import AuthError
from physai_ros.security.message_auth import RefusalLog


class ServerSignatures:
    """RobotAuth's two checks on a server's answer: each passes, or raises as a forger's would."""

    def __init__(self, refusal_ok=True, grant_ok=True):
        self.refusal_ok, self.grant_ok = refusal_ok, grant_ok
        self.checked: list[tuple] = []

    def check_refusal(self, proof, reason, grant):
        self.checked.append(("refusal", proof, reason, grant))
        if not self.refusal_ok:
            raise AuthError("bad_signature", "not signed by the fleet's server")

    def on_grant(self, grant):
        self.checked.append(("grant", grant))
        if not self.grant_ok:
            raise AuthError("bad_grant", "not issued by the fleet's server")


def exchange(fleet, auth=None, timeout_s=5.0):
    core = RobotClientCore(fleet.robots[0])
    refusals = RefusalLog(lambda *_: None)
    return RegistrationExchange(core, auth, refusals, timeout_s=timeout_s), core, refusals


def test_a_request_goes_out_when_the_service_is_ready_and_none_is_in_flight(fleet):
    ex, core, _ = exchange(fleet)
    d = ex.decide(now=10.0, in_flight=False, service_ready=True)
    assert d.send and not d.abandon
    assert ex.registration().robot_id == fleet.robots[0].id


def test_a_request_in_flight_is_waited_for_then_given_up_and_sent_again(fleet):
    ex, core, _ = exchange(fleet, timeout_s=5.0)
    ex.sent(100.0)
    wait = ex.decide(now=104.0, in_flight=True, service_ready=True)
    assert not wait.send and not wait.abandon
    again = ex.decide(now=105.5, in_flight=True, service_ready=True)
    assert again.abandon and again.send


def test_no_service_no_request_and_the_core_asks_again_later(fleet):
    ex, core, _ = exchange(fleet)
    d = ex.decide(now=1.0, in_flight=False, service_ready=False)
    assert not d.send
    assert core._want_register


def test_an_accepted_answer_registers_the_robot_and_says_with_whom(fleet):
    ex, core, _ = exchange(fleet)
    lines = ex.on_answer(RegistrationResult(True, "", "server_A"), b"", "", b"")
    assert core.state == ClientState.RUNNING and core.server_instance == "server_A"
    assert ("info", "registered with policy server server_A") in lines
    assert ex.on_answer(RegistrationResult(True, "", "server_A"), b"", "", b"") == []  # same server: quiet


def test_no_answer_leaves_the_robot_unregistered_and_asking(fleet):
    ex, core, _ = exchange(fleet)
    assert ex.on_answer(None, b"", "", b"") == []
    assert core.state == ClientState.UNREGISTERED and core._want_register


def test_a_refusal_the_server_did_not_sign_changes_nothing_and_is_counted(fleet):
    auth = ServerSignatures(refusal_ok=False)
    ex, core, refusals = exchange(fleet, auth)
    ex.on_answer(RegistrationResult(True, "", "server_A"), b"", "", b"")  # registered first (grant ok)
    lines = ex.on_answer(RegistrationResult(False, "capacity: full", "rogue"), b"proof", "capacity: full", b"sig")
    assert lines == [] and core.state == ClientState.RUNNING and core.server_instance == "server_A"
    assert core.counters.refused == 0 and refusals.counts
    assert ("refusal", b"proof", "capacity: full", b"sig") in auth.checked


def test_a_signed_refusal_is_taken(fleet):
    ex, core, _ = exchange(fleet, ServerSignatures())
    ex.on_answer(RegistrationResult(False, "capacity: full", "server_A"), b"p", "capacity: full", b"s")
    assert core.state == ClientState.UNREGISTERED and core.counters.refused == 1


def test_an_acceptance_without_a_valid_grant_does_not_register(fleet):
    ex, core, refusals = exchange(fleet, ServerSignatures(grant_ok=False))
    lines = ex.on_answer(RegistrationResult(True, "", "server_A"), b"", "", b"forged")
    assert [level for level, _ in lines] == ["error"]
    assert core.state == ClientState.UNREGISTERED and core.server_instance != "server_A" and core._want_register
    assert refusals.counts
