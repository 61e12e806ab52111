"""The robot client's streaming mode without ROS: registration, the server's explicit grant,
camera-rate observations, wrench forwarding and the fallback to chunked."""
import dataclasses

import numpy as np

from physai_ros.client.robot_client import RobotClientCore
from physai_ros.client.streaming import StreamingClient
from physai_ros.protocol.chunk import STATUS_OK, STATUS_REFUSED, ActionChunkData
from physai_ros.protocol.observation import ImageData
from physai_ros.protocol.registration import RegistrationResult

from streaming_service_helpers import fleet


def _client(views=2):
    f = fleet()
    robot = f.robots[0]
    robot = dataclasses.replace(robot, camera_topics=tuple(f"camera_{i}/image_raw" for i in range(views)))
    core = RobotClientCore(robot)
    return robot, core, StreamingClient.for_robot(robot, core)


def _image():
    return ImageData(64, 64, "rgb8", 64 * 3, bytes(64 * 64 * 3))


def test_only_a_streaming_task_gets_a_streaming_client_and_it_asks_for_streaming():
    robot, core, sc = _client()
    assert sc is not None and sc.registration().streaming and not core.registration().streaming
    chunked = dataclasses.replace(robot, task=dataclasses.replace(robot.task, mode="chunked"))
    assert StreamingClient.for_robot(chunked, RobotClientCore(chunked)) is None


def test_streaming_starts_only_on_the_servers_explicit_grant_and_falls_back():
    robot, core, sc = _client()
    for reason, active in [("", False), ("chunked: all 1 streaming slot(s) taken by robot_9; served chunked", False),
                           ("streaming: 1/1 slot(s) used", True)]:
        res = RegistrationResult(True, reason, "srv")
        core.on_registered(res)
        sc.on_registered(res)
        assert sc.active is active, reason
    # The server lost our slot (timeout, restart): back to chunked, and register again.
    core.tick(100.0)  # consumes the pending registration
    assert not core.tick(100.1).register
    sc.on_chunk(ActionChunkData(robot.id, robot.task.name, 12, 1.0, STATUS_REFUSED, error="not_streaming: robot ..."))
    assert not sc.active and sc.fallbacks == 1 and core.tick(100.2).register
    sc.on_chunk(ActionChunkData(robot.id, robot.task.name, 14, 1.0, STATUS_OK))  # inactive: nothing changes
    assert sc.fallbacks == 1


def test_an_observation_goes_out_for_every_complete_set_of_new_frames():
    robot, core, sc = _client(views=2)
    res = RegistrationResult(True, "streaming: 1/1 slot(s) used", "srv")
    core.on_registered(res)
    sc.on_registered(res)
    core.on_joint_state(list(robot.joints), [0.1] * len(robot.joints))
    sent = []
    for k in range(4):
        t = 10.0 + k / 30
        core.on_image(0, _image(), t)
        assert sc.on_frame(0, t) is None, "view 1 has no frame of this set yet"
        core.on_image(1, _image(), t)
        obs = sc.on_frame(1, t)
        assert obs is not None and obs.stamp == t and len(obs.images) == 2
        assert sc.on_frame(1, t) is None, "no new frame, nothing to send"
        sent.append(obs.round_id)
    assert sent == [2, 4, 6, 8] and core.round_id == 8 and sc.observations_sent == 4
    assert core.registration().last_round_id == 8, "a re-registration continues above the streamed rounds"
    assert sc.on_wrench() and sc.wrench_forwarded == 1
    sc.on_registered(RegistrationResult(True, "", "srv"))
    assert not sc.on_wrench() and sc.on_frame(0, 20.0) is None
    assert np.isfinite(obs.state).all()


def test_fleet_summary_fields_say_which_mode_the_robot_ran_in():
    from physai_ros.client.streaming import summary_fields

    robot, core, sc = _client()
    sc.on_registered(RegistrationResult(True, "streaming: 1/1 slot(s) used", "srv"))
    status = {"chunks_ok": 0, **sc.status()}
    assert summary_fields(status) == {"mode": "streaming", "stream_observations": 0}
    assert summary_fields(None) == {"mode": "chunked", "stream_observations": 0}
