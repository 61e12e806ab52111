"""physai_ros_interfaces/Observation (with its sensor_msgs images) <-> protocol.observation.

Image payloads are never copied on the way in: ImageData keeps the message's own buffer, and
the client reuses the received Image messages in its Observation.
"""
from __future__ import annotations

import array

import numpy as np
from physai_ros_interfaces.msg import Observation
from sensor_msgs.msg import CompressedImage, Image

from physai_ros.protocol.observation import ImageData, ObservationData
from physai_ros.ros.codecs._arrays import f32_field, f32_values, safe_time
from physai_ros.ros.time_conv import time_from_sec, to_sec


def image_data(msg: Image) -> ImageData:
    """sensor_msgs/Image -> ImageData, the buffer not copied (the message rides along as source)."""
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


def image_msg(im: ImageData, stamp: float) -> Image:
    """The Image the data came from when it has one; else a new one stamped `stamp`."""
    if isinstance(im.source, Image):
        return im.source
    msg = Image()
    msg.header.stamp = time_from_sec(stamp)
    msg.height, msg.width, msg.encoding, msg.step = im.height, im.width, im.encoding, im.step
    data = im.data if isinstance(im.data, array.array) else array.array("B", bytes(im.data))
    msg.data = data
    return msg


def observation_to_msg(obs: ObservationData) -> Observation:
    msg = Observation()
    msg.header.stamp = safe_time(obs.stamp)
    msg.robot_id, msg.task_id, msg.round_id = obs.robot_id, obs.task_id, int(obs.round_id)
    msg.images = [image_msg(im, obs.stamp) for im in obs.images]
    msg.state = f32_field(obs.state)
    w = [float(x) for x in obs.wrench]
    msg.wrench.force.x, msg.wrench.force.y, msg.wrench.force.z = w[0:3]
    msg.wrench.torque.x, msg.wrench.torque.y, msg.wrench.torque.z = w[3:6]
    msg.wrench_stamp = safe_time(obs.wrench_stamp)
    msg.prompt = obs.prompt
    msg.exec_phase_start = safe_time(obs.exec_phase_start)
    msg.actions_remaining = int(obs.actions_remaining)
    msg.control_period = float(obs.control_period)
    msg.horizon_policy = obs.horizon_policy
    msg.horizon_params = f32_field(obs.horizon_params)
    msg.refresh = bool(obs.refresh)
    msg.executing_round_id = max(0, int(obs.executing_round_id))
    return msg


def observation_from_msg(msg: Observation) -> ObservationData:
    f, t = msg.wrench.force, msg.wrench.torque
    return ObservationData(
        robot_id=msg.robot_id, task_id=msg.task_id, round_id=int(msg.round_id),
        stamp=to_sec(msg.header.stamp), images=tuple(image_data(im) for im in msg.images),
        state=f32_values(msg.state),
        wrench=np.array([f.x, f.y, f.z, t.x, t.y, t.z], dtype=np.float32),
        wrench_stamp=to_sec(msg.wrench_stamp), prompt=msg.prompt,
        exec_phase_start=to_sec(msg.exec_phase_start), actions_remaining=int(msg.actions_remaining),
        control_period=float(msg.control_period), horizon_policy=msg.horizon_policy,
        horizon_params=tuple(float(x) for x in msg.horizon_params), refresh=bool(msg.refresh),
        executing_round_id=int(msg.executing_round_id))
