"""Message <-> plain data for the serving path (Observation, ActionChunk, RegisterRobot).

Only message classes are imported here (no rclpy node machinery), so both nodes and the tests
share one conversion. Image payloads are never copied on the way in: ImageData keeps the
message's own buffer, and the client reuses the received Image messages in its Observation.
"""
from __future__ import annotations

import array

import numpy as np
from physai_ros_interfaces.msg import ActionChunk, Observation
from physai_ros_interfaces.srv import RegisterRobot
from sensor_msgs.msg import CompressedImage, Image

from physai_ros.ros.time_conv import time_from_sec, to_sec

from .types import ChunkResult, ImageData, ObservationData, RegistrationResult, RobotRegistration


def _f32(a) -> array.array:
    return array.array("f", np.ascontiguousarray(a, dtype=np.float32).tobytes())


def image_data(msg: Image) -> ImageData:
    return ImageData(int(msg.height), int(msg.width), msg.encoding, int(msg.step), msg.data, msg)


def compressed_image_data(msg: CompressedImage) -> ImageData:
    """Decode a CompressedImage (JPEG/PNG/...) once, with cv2.imdecode, into a bgr8
    sensor_msgs/Image that the Observation then reuses as is. Raises ValueError on bad data."""
    import cv2

    buf = np.frombuffer(msg.data, dtype=np.uint8)
    if buf.size == 0:
        raise ValueError(f"empty CompressedImage (format {msg.format!r})")
    try:
        img = cv2.imdecode(buf, cv2.IMREAD_COLOR)
    except cv2.error as e:
        raise ValueError(f"cannot decode CompressedImage (format {msg.format!r}): {e}") from None
    if img is None:
        raise ValueError(f"cannot decode CompressedImage (format {msg.format!r}, {buf.size} bytes)")
    out = Image()
    out.header = msg.header
    out.height, out.width = int(img.shape[0]), int(img.shape[1])
    out.encoding, out.step = "bgr8", int(img.shape[1]) * 3
    data = array.array("B")
    data.frombytes(np.ascontiguousarray(img).data)
    out.data = data
    return image_data(out)


def _image_msg(im: ImageData, stamp: float) -> Image:
    if isinstance(im.source, Image):
        return im.source
    msg = Image()
    msg.header.stamp = time_from_sec(stamp)
    msg.height, msg.width, msg.encoding, msg.step = im.height, im.width, im.encoding, im.step
    data = im.data if isinstance(im.data, array.array) else array.array("B", bytes(im.data))
    msg.data = data
    return msg


def _safe_time(t: float):
    return time_from_sec(t if np.isfinite(t) and t > 0 else 0.0)


def observation_to_msg(obs: ObservationData) -> Observation:
    msg = Observation()
    msg.header.stamp = _safe_time(obs.stamp)
    msg.robot_id, msg.task_id, msg.round_id = obs.robot_id, obs.task_id, int(obs.round_id)
    msg.images = [_image_msg(im, obs.stamp) for im in obs.images]
    msg.state = _f32(obs.state)
    w = [float(x) for x in obs.wrench]
    msg.wrench.force.x, msg.wrench.force.y, msg.wrench.force.z = w[0:3]
    msg.wrench.torque.x, msg.wrench.torque.y, msg.wrench.torque.z = w[3:6]
    msg.wrench_stamp = _safe_time(obs.wrench_stamp)
    msg.prompt = obs.prompt
    msg.exec_phase_start = _safe_time(obs.exec_phase_start)
    msg.actions_remaining = int(obs.actions_remaining)
    msg.control_period = float(obs.control_period)
    msg.horizon_policy = obs.horizon_policy
    msg.horizon_params = _f32(obs.horizon_params)
    msg.refresh = bool(obs.refresh)
    return msg


def observation_from_msg(msg: Observation) -> ObservationData:
    f, t = msg.wrench.force, msg.wrench.torque
    return ObservationData(
        robot_id=msg.robot_id, task_id=msg.task_id, round_id=int(msg.round_id),
        stamp=to_sec(msg.header.stamp), images=tuple(image_data(im) for im in msg.images),
        state=np.frombuffer(msg.state, dtype=np.float32) if isinstance(msg.state, array.array)
        else np.asarray(msg.state, np.float32),
        wrench=np.array([f.x, f.y, f.z, t.x, t.y, t.z], dtype=np.float32),
        wrench_stamp=to_sec(msg.wrench_stamp), prompt=msg.prompt,
        exec_phase_start=to_sec(msg.exec_phase_start), actions_remaining=int(msg.actions_remaining),
        control_period=float(msg.control_period), horizon_policy=msg.horizon_policy,
        horizon_params=tuple(float(x) for x in msg.horizon_params), refresh=bool(msg.refresh))


def chunk_to_msg(c: ChunkResult) -> ActionChunk:
    msg = ActionChunk()
    msg.header.stamp = _safe_time(c.stamp)
    msg.robot_id, msg.task_id, msg.round_id = c.robot_id, c.task_id, int(c.round_id)
    msg.status = int(c.status)
    msg.error = c.error
    msg.joint_names = list(c.joint_names)
    msg.dt = float(c.dt)
    a = np.ascontiguousarray(c.actions, dtype=np.float32)
    if a.ndim == 2 and a.size:
        msg.num_actions, msg.action_dim = int(a.shape[0]), int(a.shape[1])
        msg.actions = _f32(a)
    msg.horizon = int(c.horizon)
    if c.confidence.size:
        msg.confidence = _f32(c.confidence)
    msg.queue_ms, msg.inference_ms = float(c.queue_ms), float(c.inference_ms)
    msg.engine_instance = c.engine_instance
    return msg


def chunk_from_msg(msg: ActionChunk) -> ChunkResult:
    n, d = int(msg.num_actions), int(msg.action_dim)
    flat = np.frombuffer(msg.actions, np.float32) if isinstance(msg.actions, array.array) \
        else np.asarray(msg.actions, np.float32)
    actions = flat.reshape(n, d) if n * d == flat.size else np.zeros((0, 0), np.float32)
    return ChunkResult(
        robot_id=msg.robot_id, task_id=msg.task_id, round_id=int(msg.round_id),
        stamp=to_sec(msg.header.stamp), status=int(msg.status), error=msg.error,
        joint_names=tuple(msg.joint_names), dt=float(msg.dt), actions=actions,
        horizon=int(msg.horizon), confidence=np.asarray(msg.confidence, np.float32),
        queue_ms=float(msg.queue_ms), inference_ms=float(msg.inference_ms),
        engine_instance=msg.engine_instance)


def hold_chunk_msg(robot_id: str, task_id: str, hold, joint_names) -> ActionChunk:
    """A client_core.HoldCommand as a chunk: the trajectory controller holds `positions`."""
    n = int(hold.num_actions)
    return chunk_to_msg(ChunkResult(
        robot_id=robot_id, task_id=task_id, round_id=int(hold.round_id), stamp=hold.capture_time,
        status=0, error="hold", joint_names=tuple(joint_names), dt=float(hold.dt),
        actions=np.tile(np.asarray(hold.positions, np.float32).reshape(1, -1), (n, 1)), horizon=n,
        confidence=np.ones(n, np.float32), engine_instance="robot_client"))


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
    return req


def registration_from_request(req: RegisterRobot.Request) -> RobotRegistration:
    return RobotRegistration(
        robot_id=req.robot_id, task_id=req.task_id, robot_namespace=req.robot_namespace,
        prompt=req.prompt, camera_topics=tuple(req.camera_topics), num_views=int(req.num_views),
        image_height=int(req.image_height), image_width=int(req.image_width),
        joint_names=tuple(req.joint_names), state_dim=int(req.state_dim),
        action_dim=int(req.action_dim), control_period=float(req.control_period),
        streaming=bool(req.streaming), last_round_id=int(req.last_round_id),
        client_session=req.client_session)


def result_from_response(resp: RegisterRobot.Response) -> RegistrationResult:
    return RegistrationResult(bool(resp.accepted), resp.reason, resp.server_instance, int(resp.last_round_id))
