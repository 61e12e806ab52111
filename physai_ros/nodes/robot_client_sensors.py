"""robot_client's sensor inputs on ROS 2, mounted by robot_client: the robot's cameras, wrench and
joint states and the trajectory controller's execution info, into the client's logic
(physai_ros.client.robot_client.RobotClientCore) and its monitoring view.

  sub  camera topics (Image, or CompressedImage with camera_format: compressed; best effort),
       wrench (WrenchStamped, best effort), joint_states (JointState, best effort: matches
       reliable publishers too), execution_info (ExecutionInfo)
A corrupt compressed frame is counted (unreadable_images) and skipped: the previous one stays.
A wrench sample with a NaN/inf component is dropped and counted (wrench_dropped); the newest
good sample stays the one sent, so one bad force reading does not cost a round.
"""
from __future__ import annotations

import time

import numpy as np
from geometry_msgs.msg import WrenchStamped
from physai_ros_interfaces.msg import ExecutionInfo
from sensor_msgs.msg import CompressedImage, Image, JointState

from physai_ros.protocol.topics import EXECUTION_INFO_TOPIC
from physai_ros.ros.codecs.execution_info import execution_state_from_msg
from physai_ros.ros.codecs.observation import compressed_image_data, image_data
from physai_ros.ros.qos import sensor_data_qos
from physai_ros.ros.time_conv import now_sec, to_sec


class SensorInputs:
    def __init__(self, node):
        """node: the robot client node (its core, view, streaming and logger are read when a
        message arrives, so they may be set after this)."""
        self.node = node
        self.unreadable_images = 0
        robot = node.robot
        sensor = sensor_data_qos()
        compressed = robot.camera_format == "compressed"
        on_image = self._on_compressed if compressed else self._on_image
        for i, topic in enumerate(robot.camera_topics):
            node.create_subscription(CompressedImage if compressed else Image, topic,
                                     lambda m, i=i: on_image(i, m), sensor)
        node.create_subscription(WrenchStamped, robot.wrench_topic, self._on_wrench, sensor)
        node.create_subscription(JointState, robot.joint_states_topic, self._on_joints, sensor_data_qos(10))
        node.create_subscription(ExecutionInfo, EXECUTION_INFO_TOPIC, self._on_exec, sensor_data_qos(10))

    def _on_image(self, view: int, msg: Image) -> None:
        self._frame(view, image_data(msg), msg)

    def _on_compressed(self, view: int, msg: CompressedImage) -> None:
        try:
            image = compressed_image_data(msg)
        except ValueError as e:
            self.unreadable_images += 1
            self.node.get_logger().warning(f"camera {view}: {e}", throttle_duration_sec=1.0)
            return
        self._frame(view, image, msg)

    def _frame(self, view: int, image, msg) -> None:
        node = self.node
        node.view.on_camera(view, time.monotonic())
        stamp = to_sec(msg.header.stamp) or now_sec(node)
        node.core.on_image(view, image, stamp)
        if node.streaming is not None:
            node.streaming.on_frame(view, stamp)

    def _on_wrench(self, msg: WrenchStamped) -> None:
        node = self.node
        f, t = msg.wrench.force, msg.wrench.torque
        sample = (f.x, f.y, f.z, t.x, t.y, t.z)
        if not node.view.on_wrench(sample, time.monotonic()):
            node.get_logger().warning(f"dropped wrench sample: {node.view.last_wrench_drop}",
                                      throttle_duration_sec=1.0)
            return
        node.core.on_wrench(np.array(sample, np.float32), to_sec(msg.header.stamp))
        if node.streaming is not None:
            node.streaming.on_wrench(msg)

    def _on_joints(self, msg: JointState) -> None:
        self.node.view.on_joint_state(time.monotonic())
        self.node.core.on_joint_state(list(msg.name), list(msg.position))

    def _on_exec(self, msg: ExecutionInfo) -> None:
        node = self.node
        st = execution_state_from_msg(msg)
        node.view.on_exec_info(st.actions_remaining, st.control_period, st.underruns)
        node.core.on_exec_info(now_sec(node), st.actions_remaining, st.control_period, st.exec_phase_start,
                               st.executing_round_id)
