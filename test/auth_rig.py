"""Test processes that speak in the fleet as a robot or as the server would: the same keys and
endpoints as the nodes (physai_ros.security), taken from the fleet's keystore (the auto one in
tests). A rig that pretends to be robot X registers and tags its observations as X's client
does; one that feeds a controller directly signs its chunks with the server's key."""
from __future__ import annotations

from physai_ros.config.fleet import fleet_dir
from physai_ros.ros.message_digest import digest
from physai_ros.security.config import SecurityConfig, open_keystore
from physai_ros.security.endpoints import CHUNK, HOLD, SEGMENT, PeerSigner, RobotAuth, ServerAuth
from physai_ros.security.keystore import Identity


def _keystore(fleet, need):
    sec = fleet.security if fleet is not None else SecurityConfig()
    return sec, open_keystore(sec, fleet_dir(fleet) if fleet is not None else None, need)


class RobotKeys:
    """Speak for `robot_id`: sign registrations, take the grant, tag observations, sign holds."""

    def __init__(self, robot_id: str, fleet=None):
        sec, ks = _keystore(fleet, [SecurityConfig().server if fleet is None else fleet.security.server,
                                    Identity("robot", robot_id)])
        self.auth = RobotAuth(ks, robot_id, sec.server)

    def request(self, req):
        req.auth_proof = self.auth.proof(digest(req, skip=("auth_proof",)))
        return req

    def response(self, resp):
        if resp.accepted:
            self.auth.on_grant(resp.auth_grant)
        return resp

    def observation(self, msg):
        msg.auth = self.auth.tag_observation(digest(msg))
        return msg

    def hold(self, msg):
        msg.auth = self.auth.signer.sign(HOLD, digest(msg))
        return msg


class ServerKeys:
    """Sign chunks and segments as the fleet's server does (for tests that drive a controller)."""

    def __init__(self, fleet=None):
        sec, ks = _keystore(fleet, [])
        self.signer = PeerSigner(ks, sec.server)

    def chunk(self, msg):
        msg.auth = self.signer.sign(CHUNK, digest(msg))
        return msg

    def segment(self, msg):
        msg.auth = self.signer.sign(SEGMENT, digest(msg))
        return msg


def server_auth(fleet=None, workers=()) -> ServerAuth:
    """The server's endpoint, for a test that plays the policy server (e.g. to a RemoteEngine)."""
    sec, ks = _keystore(fleet, [Identity("worker", w) for w in workers])
    return ServerAuth(ks, sec.server, sec.max_skew_s)


def sign_as_operator(fleet, request, command: str, name: str = "operator"):
    """`request` (an OperatorCommand or AskRobot request) named and signed by operator `name` of
    the fleet's keystore, as `physai-fleet operator` does (the identity is made if missing)."""
    from physai_ros.security.operator_commands import OperatorSigner

    _, ks = _keystore(fleet, [Identity("operator", name)])
    request.operator_name = name
    request.auth = OperatorSigner(ks, name).sign(command, digest(request))
    return request
