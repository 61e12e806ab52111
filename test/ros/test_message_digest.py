"""The content digest auth tags cover: equal on both sides of a serialisation round trip (the CDR
bytes are not: Fast DDS leaves padding uninitialised), different after any one-field change
(a flipped bit in an image included), and blind to the auth field itself."""
from __future__ import annotations

import array

import numpy as np
import pytest
from physai_ros_interfaces.msg import (ActionChunk, EngineBatchRequest, EngineBatchResult, EngineWorkerStatus,
                                       Observation, TrajectorySegment)
from physai_ros_interfaces.srv import RegisterRobot
from rclpy.serialization import deserialize_message, serialize_message
from sensor_msgs.msg import Image

from physai_ros.ros.message_digest import digest


def observation() -> Observation:
    rng = np.random.default_rng(0)
    o = Observation(robot_id="robot_0", task_id="reach", round_id=12, prompt="reach the goal")
    o.header.stamp.sec, o.header.stamp.nanosec = 1700000000, 5
    for _ in range(2):
        im = Image(height=8, width=8, encoding="rgb8", step=24)
        im.data = rng.integers(0, 256, 8 * 8 * 3, dtype=np.uint8).tobytes()
        o.images.append(im)
    o.state = [0.25, -1.5, 3.0]
    o.horizon_params = [0.1]
    o.wrench.force.x = 1.0 / 3.0
    return o


def roundtrip(msg):
    return deserialize_message(serialize_message(msg), type(msg))


@pytest.mark.parametrize("msg", [
    observation(),
    ActionChunk(robot_id="robot_0", round_id=3, joint_names=["a", "b"], dt=0.02, action_dim=2, num_actions=2,
                actions=array.array("f", [0.1, 0.2, 0.3, 0.4]), confidence=[0.5]),
    TrajectorySegment(robot_id="robot_0", segment_id=9, positions=[1.0, 2.0], committed=[True, False]),
    EngineBatchRequest(batch_id="b1", images_u8=bytes(range(200)), tokens=[1, 2, 3], token_mask=[True, False, True],
                       state=[0.5] * 4),
    EngineBatchResult(batch_id="b1", actions=[1.5] * 6, total_ms=12.5),
    EngineWorkerStatus(instance_id="worker_0", profile_batch_sizes=[1, 2], profile_latencies_s=[0.1, 0.2]),
], ids=lambda m: type(m).__name__)
def test_equal_after_roundtrip_and_blind_to_auth(msg):
    d = digest(msg)
    back = roundtrip(msg)
    assert digest(back) == d
    back.auth = bytes(96)
    assert digest(back) == d


def test_any_one_field_change_changes_it():
    base = digest(observation())
    changes = [
        lambda o: setattr(o, "robot_id", "robot_1"),
        lambda o: setattr(o, "round_id", 13),
        lambda o: setattr(o.header.stamp, "nanosec", 6),
        lambda o: setattr(o, "prompt", "reach the goal!"),
        lambda o: setattr(o, "state", [0.25, -1.5, 3.0000002]),
        lambda o: setattr(o.wrench.force, "x", 0.3333),
        lambda o: setattr(o, "refresh", True),
        lambda o: o.images.pop(),
    ]
    for change in changes:
        o = observation()
        change(o)
        assert digest(o) != base
    o = roundtrip(observation())
    o.images[1].data[100] ^= 1  # one flipped bit in one image
    assert digest(o) != base


def test_service_request_skips_the_proof_field():
    r = RegisterRobot.Request(robot_id="robot_0", camera_topics=["cam"], num_views=1)
    d = digest(r, skip=("auth_proof",))
    r.auth_proof = bytes(150)
    assert digest(roundtrip(r), skip=("auth_proof",)) == d
    r.num_views = 2
    assert digest(r, skip=("auth_proof",)) != d
