"""The generated interfaces cross a process boundary intact (real publishers, subscribers,
service, DDS)."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from physai_ros_interfaces.msg import ActionChunk, ExecutionInfo, Observation, TrajectorySegment
from physai_ros_interfaces.srv import RegisterRobot
from sensor_msgs.msg import Image

from physai_ros.ros.image import ImageBridge
from physai_ros.ros.qos import reliable_qos
from physai_ros.ros.time_conv import time_from_sec

pytestmark = pytest.mark.ros


def make_messages():
    img = ImageBridge().cv2_to_imgmsg(np.arange(4 * 6 * 3, dtype=np.uint8).reshape(4, 6, 3), "rgb8")
    img = Image(header=img.header, height=img.height, width=img.width, encoding=img.encoding,
                is_bigendian=img.is_bigendian, step=img.step, data=bytes(img.data))
    obs = Observation(robot_id="robot_7", task_id="t1", round_id=2**40 + 3, images=[img, img],
                      state=[0.5, -1.25, 3.0], prompt="pick up the cube", actions_remaining=17,
                      control_period=0.02, horizon_policy="confidence", horizon_params=[0.5, 10.0], refresh=True)
    obs.header.stamp = time_from_sec(1234.5)
    obs.wrench.force.z = -1.962
    obs.wrench_stamp = time_from_sec(1234.499)
    obs.exec_phase_start = time_from_sec(1230.0)
    chunk = ActionChunk(robot_id="robot_7", task_id="t1", round_id=3, status=ActionChunk.STATUS_OK,
                        joint_names=["a", "b"], dt=0.02, action_dim=2, num_actions=3,
                        actions=[0.0, 1.0, 2.0, 3.0, 4.0, 5.0], horizon=2, confidence=[1.0, 0.5, 0.25],
                        queue_ms=1.5, inference_ms=42.0, engine_instance="gpu0/0")
    chunk.header.stamp = time_from_sec(1234.5)
    seg = TrajectorySegment(robot_id="robot_7", round_id=3, segment_id=9, joint_names=["a", "b"], dt=1 / 480,
                            num_nodes=2, dim=2, positions=[0.1, 0.2, 0.3, 0.4], committed=[True, False])
    seg.start_time = time_from_sec(1235.0)
    info = ExecutionInfo(robot_id="robot_7", executing_round_id=3, actions_remaining=12, control_period=0.02,
                         buffer_nodes=240, buffer_dry=False, underruns=1, chunks_accepted=5, chunks_rejected=2,
                         last_reject_reason="stale_round")
    info.exec_phase_start = time_from_sec(1233.0)
    return {"observation": obs, "action_chunk": chunk, "trajectory_segment": seg, "execution_info": info}


def test_all_messages_and_the_service_round_trip_between_processes(ros):
    prefix = f"/rt{os.getpid()}"
    helper = Path(__file__).parent / "ros_echo_node.py"
    echo = subprocess.Popen([sys.executable, str(helper), prefix], start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        msgs = make_messages()
        types = {"observation": Observation, "action_chunk": ActionChunk, "trajectory_segment": TrajectorySegment,
                 "execution_info": ExecutionInfo}
        received = {}
        pubs = {k: ros.node.create_publisher(t, f"{prefix}/in/{k}", reliable_qos()) for k, t in types.items()}
        for k, t in types.items():
            ros.node.create_subscription(t, f"{prefix}/out/{k}", lambda m, k=k: received.setdefault(k, m),
                                         reliable_qos())

        def publish_missing():
            for k, pub in pubs.items():
                if k not in received:
                    pub.publish(msgs[k])

        ok = ros.spin_until(lambda: len(received) == len(types), timeout=30.0, every=publish_missing)
        assert ok, f"echoes missing for {sorted(set(types) - set(received))}"
        for k in types:
            assert received[k] == msgs[k], k
        np.testing.assert_array_equal(np.frombuffer(received["observation"].images[1].data, np.uint8),
                                      np.arange(72, dtype=np.uint8))

        client = ros.node.create_client(RegisterRobot, f"{prefix}/register_robot")
        assert ros.spin_until(lambda: client.service_is_ready(), timeout=20.0)
        req = RegisterRobot.Request(robot_id="robot_7", task_id="t1", robot_namespace="/robot_7",
                                    camera_topics=["camera_0/image_raw", "camera_1/image_raw"], num_views=2,
                                    image_height=224, image_width=320, joint_names=["a", "b"], state_dim=2,
                                    action_dim=2, control_period=0.02, streaming=True, last_round_id=41)
        future = client.call_async(req)
        assert ros.spin_until(future.done, timeout=10.0)
        resp = future.result()
        assert resp.accepted
        assert resp.reason == "robot_7|t1|camera_0/image_raw,camera_1/image_raw|41"
        assert resp.server_instance == "echo:320x224x2:True"
        bad = client.call_async(RegisterRobot.Request(robot_id="", state_dim=1))
        assert ros.spin_until(bad.done, timeout=10.0)
        assert not bad.result().accepted
    finally:
        echo.terminate()
        try:
            out, _ = echo.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            echo.kill()
            out, _ = echo.communicate()
        if echo.returncode not in (0, -15):
            pytest.fail(f"echo process failed ({echo.returncode}):\n{out.decode(errors='replace')}")
