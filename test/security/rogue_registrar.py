"""Test helper process: a second /policy_server/register_robot service that answers every
registration at once with "refused", alternately unsigned and signed by a key that is not the
fleet server's (keys:=<keystore made for the rogue>). Its own process, idle otherwise, so it wins
most races against the real server's answer.

Run: python -m rogue_registrar --ros-args -p keys:=DIR  (test/security on PYTHONPATH).
"""
import sys

from physai_ros_interfaces.srv import RegisterRobot
from rclpy.node import Node

from physai_ros.ros.spin import run_node
from physai_ros.security.endpoints import ServerAuth
from physai_ros.security.keystore import Identity, Keystore


class RogueRegistrar(Node):
    def __init__(self):
        super().__init__("rogue_registrar")
        keys = Keystore(self.declare_parameter("keys", "").value)
        self.auth = ServerAuth(keys, Identity("server", "policy_server"))
        self.answered = 0
        self.create_service(RegisterRobot, "/policy_server/register_robot", self._refuse)
        print("ready", flush=True)

    def _refuse(self, request, response):
        response.accepted, response.reason, response.server_instance = False, "fleet_full: go away", "rogue"
        if self.answered % 2:
            response.auth_grant = list(self.auth.sign_refusal(request.auth_proof, response.reason))
        self.answered += 1
        print(f"answered {self.answered} ({request.robot_id})", flush=True)
        return response


def main() -> int:
    return run_node(RogueRegistrar, None)


if __name__ == "__main__":
    sys.exit(main())
