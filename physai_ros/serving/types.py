"""Plain data crossing the boundary between the serving logic and the ROS nodes.

Times are float seconds (ROS time as seconds). The nodes convert messages to these and back;
everything in physai_ros.serving works on these types only, so it is testable without rclpy.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

STATUS_OK, STATUS_ERROR, STATUS_REFUSED = 0, 1, 2


@dataclass(frozen=True)
class ImageData:
    height: int
    width: int
    encoding: str
    step: int
    # Raw bytes (a memoryview/bytes/array of the message buffer; never copied on the way in).
    data: object
    # The sensor_msgs/Image it came from, reused as is when the client builds an Observation.
    source: object = field(default=None, repr=False, compare=False)

    def array(self) -> np.ndarray:
        """HxWxC uint8 view of the buffer (no copy); raises ValueError on a size mismatch."""
        from .preprocess import ENCODINGS

        c = ENCODINGS[self.encoding]
        buf = np.frombuffer(self.data, dtype=np.uint8)
        if self.step == self.width * c:
            return buf[: self.height * self.step].reshape(self.height, self.width, c)
        rows = buf[: self.height * self.step].reshape(self.height, self.step)
        return rows[:, : self.width * c].reshape(self.height, self.width, c)


@dataclass(frozen=True)
class RobotRegistration:
    """RegisterRobot.srv request."""

    robot_id: str
    task_id: str
    robot_namespace: str
    prompt: str
    camera_topics: tuple[str, ...]
    num_views: int
    image_height: int
    image_width: int
    joint_names: tuple[str, ...]
    state_dim: int
    action_dim: int
    control_period: float
    streaming: bool = False
    last_round_id: int = 0
    client_session: str = ""


@dataclass(frozen=True)
class RegistrationResult:
    accepted: bool
    reason: str
    server_instance: str
    last_round_id: int = 0  # the highest round the server accepted from this robot


@dataclass(frozen=True)
class ObservationData:
    """Observation.msg as plain data."""

    robot_id: str
    task_id: str
    round_id: int
    stamp: float
    images: tuple[ImageData, ...]
    state: np.ndarray
    wrench: np.ndarray  # [6]: force xyz, torque xyz
    wrench_stamp: float
    prompt: str
    exec_phase_start: float
    actions_remaining: int
    control_period: float
    horizon_policy: str
    horizon_params: tuple[float, ...]
    refresh: bool = False


@dataclass(frozen=True)
class ChunkResult:
    """ActionChunk.msg as plain data: an answer (or a refusal) for one observation."""

    robot_id: str
    task_id: str
    round_id: int
    stamp: float  # capture time of the observation answered
    status: int
    error: str = ""
    joint_names: tuple[str, ...] = ()
    dt: float = 0.0
    actions: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.float32))
    horizon: int = 0
    confidence: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    queue_ms: float = 0.0
    inference_ms: float = 0.0
    engine_instance: str = ""
