"""The action chunk (ActionChunk.msg) as plain data, for every side that handles one.

The policy server produces it, the robot client matches it to its rounds, the trajectory
controller executes it, and evaluation and trace capture read it: one type, so no side converts
another side's chunk. Times are float seconds on the robot's clock.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

# ActionChunk.STATUS_* (the message constants), for code that must not import the message.
STATUS_OK, STATUS_ERROR, STATUS_REFUSED = 0, 1, 2

# A robot client stops its trajectory controller with an ordinary chunk carrying both markers
# (physai_ros.control.hold). Observers skip these: they are no answer of the server.
HOLD_ERROR = "hold"
HOLD_ENGINE_INSTANCE = "robot_client"  # reserved: no engine instance may take this name


def is_hold_chunk(status: int, error: str, engine_instance: str) -> bool:
    """Whether a chunk (data or message fields) is a robot client's own hold, not a server
    answer. Both markers, so a server chunk whose error text happens to be "hold" is not one;
    the one test every side uses."""
    return status == STATUS_OK and error == HOLD_ERROR and engine_instance == HOLD_ENGINE_INSTANCE


@dataclass(frozen=True)
class ActionChunkData:
    """An answer (or a refusal) for the observation captured at ``stamp``.

    Action ``k`` is due at ``stamp + k * dt``; only the first ``horizon`` actions are executed.
    ``actions`` is ``[N, D]`` with columns in ``joint_names`` order (float32 on the wire; an
    empty ``[0, 0]`` for a refusal or error). An empty ``confidence`` means none was sent.
    ``queue_ms``, ``inference_ms``, ``prepare_ms`` and ``engine_instance`` say how the server
    produced it.
    """

    robot_id: str
    task_id: str
    round_id: int
    stamp: float  # capture time of the observation answered
    status: int = STATUS_OK
    error: str = ""
    joint_names: tuple[str, ...] = ()
    dt: float = 0.0
    actions: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.float32))
    horizon: int = 0
    confidence: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    queue_ms: float = 0.0
    inference_ms: float = 0.0
    prepare_ms: float = 0.0  # pre- and post-processing of this request, besides the engine
    engine_instance: str = ""
