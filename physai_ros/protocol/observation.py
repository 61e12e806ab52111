"""The Observation message (and its camera images) as plain data.

The robot client builds it, the policy server validates and preprocesses it, evaluation and
training submit it without ROS. Times are float seconds (ROS time as seconds).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

# Channels of each image encoding the serving path accepts (anything else is refused).
ENCODINGS = {"rgb8": 3, "bgr8": 3, "rgba8": 4, "bgra8": 4, "mono8": 1}


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
        c = ENCODINGS[self.encoding]
        buf = np.frombuffer(self.data, dtype=np.uint8)
        if self.step == self.width * c:
            return buf[: self.height * self.step].reshape(self.height, self.width, c)
        rows = buf[: self.height * self.step].reshape(self.height, self.step)
        return rows[:, : self.width * c].reshape(self.height, self.width, c)


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
    # Round of the chunk the robot's controller executes (ExecutionInfo.executing_round_id; 0:
    # none). With exec_phase_start it tells the server which chunk it sent is running and when
    # it arrived (real-time chunking, docs/rtc.md).
    executing_round_id: int = 0
