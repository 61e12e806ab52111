"""robot_client's streaming mode on ROS 2: a thin adapter over physai_ros.client.streaming,
mounted by robot_client when the robot's task has `mode: streaming` (docs/streaming.md).

  pub  stream_wrench (WrenchSample, best effort): each wrench sample as received, in the robot's
       name and with its session MAC, for the server's action-expert stream
Observations go out on the client's own observation topic: every complete set of new camera
frames at once (camera rate), while the server serves this robot streaming.
"""
from __future__ import annotations

from physai_ros_interfaces.msg import WrenchSample

from physai_ros.client.streaming import StreamingClient
from physai_ros.protocol.topics import STREAM_WRENCH_TOPIC
from physai_ros.ros.message_digest import digest
from physai_ros.ros.qos import sensor_data_qos
from physai_ros.security.endpoints import WRENCH
from physai_ros.security.handshake import AuthError


class StreamingIO:
    def __init__(self, node, client: StreamingClient):
        self.node, self.client = node, client
        self.wrench_pub = node.create_publisher(WrenchSample, STREAM_WRENCH_TOPIC, sensor_data_qos(10))

    @classmethod
    def for_node(cls, node) -> "StreamingIO | None":
        client = StreamingClient.for_robot(node.robot, node.core)
        return cls(node, client) if client is not None else None

    @property
    def active(self) -> bool:
        return self.client.active

    def on_frame(self, view: int, stamp: float) -> None:
        """Every complete set of new frames goes out at once, once the server listens."""
        if self.node.obs_pub.get_subscription_count() == 0:
            return
        obs = self.client.on_frame(view, stamp)
        if obs is not None:
            self.node.send(obs)

    def on_wrench(self, msg) -> None:
        """A good wrench sample (a geometry_msgs/WrenchStamped) the core took: forwarded as it
        came, at its native rate, while streaming."""
        if not self.client.on_wrench():
            return
        sample = WrenchSample(header=msg.header, robot_id=self.node.robot.id, wrench=msg.wrench)
        auth = self.node.auth
        if auth is not None:
            try:
                sample.auth = auth.tag_session(WRENCH, digest(sample))
            except AuthError as e:
                self.node.auth_refusals.refused("sending a wrench sample", e)
                return
        self.wrench_pub.publish(sample)

    def status(self) -> dict:
        return self.client.status()
