"""robot_client's operator commands on ROS 2: a thin adapter over
physai_ros.client.operator_commands, mounted by robot_client.

  srv  operator_command (OperatorCommand), in the robot's namespace: resume / acknowledge, signed
       by an operator identity of the fleet's keystore (physai_ros.security.operator_commands);
       `physai-fleet operator resume ROBOT` sends one
Accepted commands are logged with the operator's name and note; refusals are counted by reason
in the client's status (`operator_refused`) and logged at most once a second.
"""
from __future__ import annotations

from physai_ros_interfaces.srv import OperatorCommand

from physai_ros.client.operator_commands import OperatorCommands, OperatorRequest
from physai_ros.protocol.topics import OPERATOR_COMMAND_SERVICE
from physai_ros.ros.message_digest import digest
from physai_ros.security.operator_commands import OperatorCheck


class OperatorIO:
    def __init__(self, node):
        self.node = node
        pipeline = node.pipeline
        self.commands = OperatorCommands(node.robot.id, node.core,
                                         pipeline.acknowledge if pipeline is not None else None)
        self.check = (OperatorCheck(node.auth.keystore, node.security.max_skew_s)
                      if node.auth is not None else None)
        node.create_service(OperatorCommand, OPERATOR_COMMAND_SERVICE, self._on_command)

    def _on_command(self, request, response):
        req = OperatorRequest(robot_id=str(request.robot_id), command=str(request.command),
                              note=str(request.note)[:200], operator=str(request.operator_name)[:64])
        check = self.check

        def authenticate():
            return check.check(req.operator, req.command, req.robot_id, digest(request), request.auth)
        try:
            answer = self.commands.handle(req, authenticate if check is not None else None)
        except Exception as e:  # a malformed request is refused, never raised into the executor
            self.commands.refused["invalid"] += 1
            response.accepted, response.reason, response.cleared = False, f"invalid: {type(e).__name__}: {e}", ""
            return response
        log = self.node.get_logger()
        if answer.accepted:
            log.warning(f"operator {req.operator or '(insecure)'}: {req.command} accepted"
                        + (f", cleared {answer.cleared!r}" if answer.cleared else "")
                        + (f" ({req.note})" if req.note else ""))
        else:
            log.warning(f"operator command {req.command[:32]!r} from {req.operator!r} refused: {answer.reason}",
                        throttle_duration_sec=1.0)  # each one is counted in the status
        response.accepted, response.reason, response.cleared = answer.accepted, answer.reason, answer.cleared
        return response

    def status(self) -> dict:
        return {"operator_accepted": dict(self.commands.accepted), "operator_refused": dict(self.commands.refused)}
