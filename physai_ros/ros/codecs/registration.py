"""physai_ros_interfaces/RegisterRobot <-> protocol.registration (both directions, both ends)."""
from __future__ import annotations

from physai_ros_interfaces.srv import RegisterRobot

from physai_ros.protocol.registration import RegistrationResult, RobotRegistration


def registration_to_request(reg: RobotRegistration) -> RegisterRobot.Request:
    req = RegisterRobot.Request()
    req.robot_id, req.task_id, req.robot_namespace, req.prompt = (
        reg.robot_id, reg.task_id, reg.robot_namespace, reg.prompt)
    req.camera_topics = list(reg.camera_topics)
    req.num_views, req.image_height, req.image_width = reg.num_views, reg.image_height, reg.image_width
    req.joint_names = list(reg.joint_names)
    req.state_dim, req.action_dim = reg.state_dim, reg.action_dim
    req.control_period, req.streaming = float(reg.control_period), bool(reg.streaming)
    req.last_round_id = int(reg.last_round_id)
    req.client_session = reg.client_session
    req.view_heights = [h for h, _ in reg.view_sizes]
    req.view_widths = [w for _, w in reg.view_sizes]
    req.camera_features = list(reg.camera_features)
    return req


def registration_from_request(req: RegisterRobot.Request) -> RobotRegistration:
    return RobotRegistration(
        robot_id=req.robot_id, task_id=req.task_id, robot_namespace=req.robot_namespace,
        prompt=req.prompt, camera_topics=tuple(req.camera_topics), num_views=int(req.num_views),
        image_height=int(req.image_height), image_width=int(req.image_width),
        joint_names=tuple(req.joint_names), state_dim=int(req.state_dim),
        action_dim=int(req.action_dim), control_period=float(req.control_period),
        streaming=bool(req.streaming), last_round_id=int(req.last_round_id),
        client_session=req.client_session,
        view_sizes=tuple(zip((int(h) for h in req.view_heights), (int(w) for w in req.view_widths))),
        camera_features=tuple(req.camera_features))


def result_to_response(res: RegistrationResult, response: RegisterRobot.Response) -> RegisterRobot.Response:
    """Fill the service's response object (rclpy hands the callback one to fill)."""
    response.accepted, response.reason, response.server_instance = res.accepted, res.reason, res.server_instance
    response.last_round_id = int(res.last_round_id)
    response.max_request_rate_hz = float(res.max_request_rate_hz)
    response.route_components = [c for c, _ in res.routes]
    response.route_instances = [i for _, i in res.routes]
    return response


def result_from_response(resp: RegisterRobot.Response) -> RegistrationResult:
    return RegistrationResult(bool(resp.accepted), resp.reason, resp.server_instance, int(resp.last_round_id),
                              float(resp.max_request_rate_hz),
                              tuple(zip(resp.route_components, resp.route_instances)))
