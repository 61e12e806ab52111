"""physai_ros_interfaces ComponentQuery / ComponentAnswer <-> protocol.component.

Images are handled as in ros/codecs/observation.py: on the way in the message's buffer is not
copied (an rgb8 view is the buffer itself, bgr8 a reversed-channel view of it; mono8 is spread to
three channels, the one copy serving's preprocessing makes as well); on the way out the robot's
received camera Images may be reused as they are (`images=`), or numpy views are written as rgb8.
"""
from __future__ import annotations

import array
from typing import Sequence

import numpy as np
from physai_ros_interfaces.msg import ComponentAnswer, ComponentQuery
from sensor_msgs.msg import Image

from physai_ros.engine.processor.images import image_to_rgb
from physai_ros.pipeline.backend import ComponentAnswer as BackendAnswer
from physai_ros.pipeline.backend import ComponentQuery as BackendQuery
from physai_ros.protocol.component import ComponentAnswerData, ComponentRequest
from physai_ros.protocol.observation import ENCODINGS
from physai_ros.ros.codecs._arrays import f32_field, f32_values, safe_time
from physai_ros.ros.codecs.observation import image_data
from physai_ros.ros.time_conv import to_sec

# The encodings a component query's views may have (engine.processor.images.image_to_rgb's).
QUERY_ENCODINGS = tuple(sorted(ENCODINGS))


def image_rgb(msg: Image) -> np.ndarray:
    """sensor_msgs/Image -> HxWx3 uint8 RGB, a view of the message's buffer where the encoding
    allows; ValueError naming what is wrong (encoding, a buffer shorter than height x step)."""
    if msg.encoding not in ENCODINGS:
        raise ValueError(f"encoding {msg.encoding!r}; expected one of {', '.join(QUERY_ENCODINGS)}")
    im = image_data(msg)
    c = ENCODINGS[im.encoding]
    if im.height < 1 or im.width < 1 or im.step < im.width * c:
        raise ValueError(f"{im.height}x{im.width} {im.encoding} with step {im.step}")
    n = len(im.data)
    if n < im.height * im.step:
        raise ValueError(f"{n} bytes of data for {im.height} rows of {im.step} bytes")
    return image_to_rgb(im.array(), im.encoding)


def rgb_image_msg(rgb: np.ndarray, stamp: float = 0.0) -> Image:
    """An HxWx3 uint8 RGB array as an rgb8 sensor_msgs/Image (one copy into the message)."""
    a = np.ascontiguousarray(rgb, dtype=np.uint8)
    if a.ndim != 3 or a.shape[2] != 3:
        raise ValueError(f"expected an HxWx3 uint8 RGB array, got {list(a.shape)}")
    msg = Image()
    msg.header.stamp = safe_time(stamp)
    msg.height, msg.width, msg.encoding, msg.step = int(a.shape[0]), int(a.shape[1]), "rgb8", int(a.shape[1]) * 3
    data = array.array("B")
    data.frombytes(a.data)
    msg.data = data
    return msg


def query_to_msg(req: ComponentRequest, images: Sequence[Image] | None = None) -> ComponentQuery:
    """A robot's question as a message. images: the robot's received camera Images, reused as is
    (no copy); else the query's arrays are written as rgb8."""
    q = req.query
    msg = ComponentQuery()
    msg.header.stamp = safe_time(req.stamp)
    msg.robot_id, msg.task_id, msg.query_id = q.robot_id, req.task_id, int(req.query_id)
    msg.component, msg.question, msg.task_prompt = q.component, q.question, q.task_prompt
    msg.images = list(images) if images is not None else [rgb_image_msg(im, req.stamp) for im in q.images]
    msg.state = f32_field(np.zeros(0, np.float32) if q.state is None else q.state)
    msg.max_tokens = int(q.max_tokens)
    return msg


def query_from_msg(msg: ComponentQuery) -> ComponentRequest:
    """The message as the component service's request; ValueError (naming the view) when an
    image cannot be read. Whether the views fit the robot's registration is the service's check."""
    images = []
    for i, im in enumerate(msg.images):
        try:
            images.append(image_rgb(im))
        except ValueError as e:
            raise ValueError(f"images[{i}]: {e}") from None
    state = f32_values(msg.state)
    q = BackendQuery(robot_id=str(msg.robot_id), component=str(msg.component), question=str(msg.question),
                     task_prompt=str(msg.task_prompt), images=tuple(images),
                     state=state if len(state) else None, max_tokens=int(msg.max_tokens))
    return ComponentRequest(query_id=int(msg.query_id), task_id=str(msg.task_id), query=q,
                            stamp=to_sec(msg.header.stamp))


def answer_to_msg(a: ComponentAnswerData) -> ComponentAnswer:
    msg = ComponentAnswer()
    msg.header.stamp = safe_time(a.stamp)
    msg.robot_id, msg.query_id, msg.component = a.robot_id, int(a.query_id), a.component
    msg.text, msg.error, msg.tokens = a.text, a.error, max(0, int(a.tokens))
    msg.latency_ms, msg.queue_ms, msg.backend = float(a.latency_ms), float(a.queue_ms), a.backend
    return msg


def answer_from_msg(msg: ComponentAnswer) -> ComponentAnswerData:
    return ComponentAnswerData(robot_id=str(msg.robot_id), query_id=int(msg.query_id), component=str(msg.component),
                               text=str(msg.text), error=str(msg.error), tokens=int(msg.tokens),
                               latency_ms=float(msg.latency_ms), queue_ms=float(msg.queue_ms),
                               backend=str(msg.backend), stamp=to_sec(msg.header.stamp))


def backend_answer(a: ComponentAnswerData) -> BackendAnswer:
    """What the robot's pipeline controller reads (PipelineController.on_answer)."""
    return BackendAnswer(text=a.text, error=a.error, tokens=a.tokens, latency_ms=a.latency_ms,
                         meta={"backend": a.backend, "queue_ms": a.queue_ms})
