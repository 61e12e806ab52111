"""CompressedImage camera topics: a real CompressedImage publisher over DDS into the real
robot_client node (in this process), decoded once into the Image its Observation carries."""
import copy
import threading

import cv2
import numpy as np
import pytest
import rclpy
import yaml
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from rclpy.parameter import Parameter
from sensor_msgs.msg import CompressedImage, Image

from physai_ros.config.fleet import FleetConfigError, default_fleet_path, parse_fleet
from physai_ros.ros.codecs.observation import compressed_image_data, image_msg
from physai_ros.ros.qos import sensor_data_qos

from ros_rig import wait_for

TOPIC = "camera_0/image_raw/compressed"


def _fleet_doc(**robot):
    doc = yaml.safe_load(default_fleet_path().read_text())
    r = copy.deepcopy(doc["robots"][0])
    r.update(id="cc_robot", simulated=False, camera_format="compressed", cameras=[TOPIC],
             image_height=48, image_width=64)
    r.update(robot)
    r.pop("sim", None)
    doc["robots"] = [r]
    return doc


def _compressed(img_bgr, ext=".png"):
    ok, buf = cv2.imencode(ext, img_bgr)
    assert ok
    msg = CompressedImage()
    msg.format = ext[1:]
    msg.data = buf.tobytes()
    return msg


def test_camera_format_is_validated():
    assert parse_fleet(_fleet_doc()).robots[0].camera_format == "compressed"
    with pytest.raises(FleetConfigError, match=r"^robots\[0\]\.camera_format: expected one of \['raw', 'compressed'\]"):
        parse_fleet(_fleet_doc(camera_format="jpeg"))
    with pytest.raises(FleetConfigError, match=r"^robots\[0\]\.camera_format: 'compressed' needs simulated: false"):
        parse_fleet(_fleet_doc(simulated=True))


def test_decode_png_exact_jpeg_close_and_bad_data_is_a_clear_error():
    img = np.random.default_rng(0).integers(0, 256, (48, 64, 3), np.uint8)
    im = compressed_image_data(_compressed(img))
    assert (im.height, im.width, im.encoding, im.step) == (48, 64, "bgr8", 192)
    assert np.array_equal(im.array(), img)
    smooth = np.zeros((48, 64, 3), np.uint8)
    smooth[:, :, 1] = np.linspace(0, 255, 64, dtype=np.uint8)
    jim = compressed_image_data(_compressed(smooth, ".jpg"))
    assert np.abs(jim.array().astype(int) - smooth).mean() < 3
    bad = CompressedImage(format="jpeg")
    bad.data = b"definitely not a jpeg"
    with pytest.raises(ValueError, match="cannot decode CompressedImage"):
        compressed_image_data(bad)
    with pytest.raises(ValueError, match="empty CompressedImage"):
        compressed_image_data(CompressedImage(format="png"))


def test_robot_client_subscribes_and_decodes_a_real_compressed_publisher(tmp_path):
    from physai_ros.nodes.robot_client import RobotClientNode

    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(_fleet_doc()))
    context = Context()  # its own: nothing shared with (or shut down by) another test
    rclpy.init(context=context)
    client = RobotClientNode(namespace="/cc_robot", context=context, parameter_overrides=[
        Parameter("fleet_file", value=str(path)), Parameter("robot_id", value="cc_robot")])
    cam = rclpy.create_node("compressed_camera", namespace="/cc_robot", context=context)
    pub = cam.create_publisher(CompressedImage, TOPIC, sensor_data_qos())
    ex = SingleThreadedExecutor(context=context)
    ex.add_node(client)
    ex.add_node(cam)
    stop = threading.Event()
    spin = threading.Thread(target=lambda: [ex.spin_once(timeout_sec=0.05) for _ in iter(stop.is_set, True)],
                            daemon=True)
    spin.start()

    def publish_until(pred, msg, what, timeout=30.0):
        def published():  # discovery may lose the first ones: publish again on every poll
            pub.publish(msg)
            return pred()
        wait_for(published, timeout, what)

    try:
        img = np.random.default_rng(1).integers(0, 256, (48, 64, 3), np.uint8)
        msg = _compressed(img)
        msg.header.stamp.sec = 1234
        publish_until(lambda: client.core._images[0] is not None, msg, "the decoded frame")
        im = client.core._images[0]
        assert (im.height, im.width, im.encoding) == (48, 64, "bgr8")
        assert np.array_equal(im.array(), img)
        assert client.core._image_stamps[0] == pytest.approx(1234.0)
        # The Observation carries the decoded Image itself (decoded once, not re-encoded).
        assert isinstance(im.source, Image) and image_msg(im, 0.0) is im.source
        # A corrupt frame is counted, logged, and leaves the last good frame in place.
        bad = CompressedImage(format="jpeg")
        bad.data = b"\xff\xd8 truncated"
        publish_until(lambda: client.status()["unreadable_images"] >= 1, bad, "the bad frame to be counted")
        assert np.array_equal(client.core._images[0].array(), img)
    finally:
        stop.set()
        spin.join(timeout=2)
        ex.shutdown()
        client.destroy_node()
        cam.destroy_node()
        rclpy.try_shutdown(context=context)
