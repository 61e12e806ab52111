"""The shared plain types and names (physai_ros.protocol), without ROS: the names on the wire stay
what the other processes code against, and the plain types hold what every side needs."""
import math
import subprocess
import sys

import numpy as np
import pytest

from physai_ros.protocol import topics
from physai_ros.protocol.chunk import STATUS_OK, ActionChunkData
from physai_ros.protocol.observation import ImageData
from physai_ros.protocol.segment import TrajectorySegmentData


def test_topic_names_are_the_wire_contract():
    assert (topics.ACTION_CHUNK_TOPIC, topics.OBSERVATION_TOPIC, topics.REFRESH_TOPIC) == (
        "action_chunk", "observation", "observation_refresh")
    assert topics.camera_topic(1) == "camera_1/image_raw" and topics.REGISTER_SERVICE == "/policy_server/register_robot"
    assert topics.robot_topic("robot_0", topics.EXECUTION_INFO_TOPIC) == "/robot_0/execution_info"
    assert topics.robot_topic("/robot_0/", "wrench") == "/robot_0/wrench" and topics.robot_topic("", "x") == "/x"
    assert topics.request_topic("gpu_1") == "/engine_workers/gpu_1/batch_request"
    assert topics.result_topic("gpu_1").endswith("/batch_result") and topics.status_topic("gpu_1").endswith("/status")


@pytest.mark.parametrize("bad", ["", "9a", "a-b", "a/b", None])
def test_a_worker_instance_id_must_be_a_ros_name_token(bad):
    with pytest.raises(ValueError, match="instance_id"):
        topics.request_topic(bad)


def test_a_chunk_defaults_to_an_ok_answer_with_no_actions():
    c = ActionChunkData("r", "t", 2, 1.5)
    assert c.status == STATUS_OK and c.actions.shape == (0, 0) and c.confidence.size == 0 and c.error == ""


def test_image_data_reads_padded_rows_without_a_copy():
    img = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    padded = np.zeros((2, 12), np.uint8)
    padded[:, :9] = img.reshape(2, 9)
    im = ImageData(2, 3, "rgb8", 12, padded.tobytes())
    np.testing.assert_array_equal(im.array(), img)


def test_a_segments_stamp_is_its_wrench_sample_else_its_tick():
    seg = TrajectorySegmentData("r", 2, 0, ("a",), 1.0, 0.01, np.zeros((2, 1), np.float32), np.zeros(2, bool),
                                tick_time=5.0, wrench_stamp=4.9)
    assert seg.stamp == 4.9
    assert TrajectorySegmentData(**{**seg.__dict__, "wrench_stamp": math.nan}).stamp == 5.0


def test_the_protocol_imports_without_ros_or_torch():
    code = ("import sys; import physai_ros.protocol.chunk, physai_ros.protocol.observation, "
            "physai_ros.protocol.registration, physai_ros.protocol.segment, physai_ros.protocol.topics; "
            "print(any(m in sys.modules for m in ('rclpy', 'torch', 'physai_ros_interfaces')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
