"""A robot's registration call on ROS 2 (the robot client's, and the openpi gateway's for each robot
it fronts): the service round trip of physai_ros.client.registration.RegistrationExchange, which
decides when to (re)send, when to give up on a pending call and what an answer means. Signed with
the exchange's robot identity.

  call /policy_server/register_robot (RegisterRobot), async, again after a server restart
"""
from __future__ import annotations

import time

from physai_ros_interfaces.srv import RegisterRobot

from physai_ros.client.registration import RegistrationExchange
from physai_ros.protocol.topics import REGISTER_SERVICE
from physai_ros.ros.codecs.registration import registration_to_request, result_from_response
from physai_ros.ros.message_digest import digest


class RegistrationCall:
    def __init__(self, node, exchange: RegistrationExchange):
        self.node = node
        self.exchange = exchange
        self.client = node.create_client(RegisterRobot, REGISTER_SERVICE)
        self._future = None

    def register(self) -> None:
        """The client's logic asked to register: send, keep waiting, or abandon a stale call."""
        fut = self._future
        decision = self.exchange.decide(time.monotonic(), fut is not None and not fut.done(),
                                        self.client.service_is_ready())
        if decision.abandon:
            self.client.remove_pending_request(fut)
            fut.cancel()
        if not decision.send:
            return
        request = registration_to_request(self.exchange.registration())
        auth = self.exchange.auth
        if auth is not None:
            request.auth_proof = auth.proof(digest(request, skip=("auth_proof",)))
        fut = self.client.call_async(request)
        proof = bytes(request.auth_proof)
        fut.add_done_callback(lambda f: self._on_answer(f, proof))
        self._future = fut
        self.exchange.sent(time.monotonic())

    def _on_answer(self, fut, proof: bytes) -> None:
        try:
            resp = fut.result()
        except Exception:
            resp = None
        result = result_from_response(resp) if resp is not None else None
        lines = self.exchange.on_answer(result, proof, resp.reason if resp is not None else "",
                                        resp.auth_grant if resp is not None else b"")
        log = self.node.get_logger()
        for level, text in lines:
            if level == "error":
                log.error(text, throttle_duration_sec=5.0)
            else:
                log.info(text)
