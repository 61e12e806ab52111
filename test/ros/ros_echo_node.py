"""Test helper process: echoes the project's messages and answers RegisterRobot, so a test can
check that every interface survives a real round trip between two processes.

Run: python test/ros/ros_echo_node.py <prefix>
Subscribes <prefix>/in/<name>, republishes the received message unchanged on <prefix>/out/<name>;
serves <prefix>/register_robot (reason and server_instance derived from the request).
"""
import sys

from physai_ros_interfaces.msg import ActionChunk, ExecutionInfo, Observation, TrajectorySegment
from physai_ros_interfaces.srv import RegisterRobot
from rclpy.node import Node

from physai_ros.ros.qos import reliable_qos
from physai_ros.ros.spin import run_node

TYPES = {"observation": Observation, "action_chunk": ActionChunk, "trajectory_segment": TrajectorySegment,
         "execution_info": ExecutionInfo}


class Echo(Node):
    def __init__(self, prefix: str):
        super().__init__("echo")
        for name, t in TYPES.items():
            pub = self.create_publisher(t, f"{prefix}/out/{name}", reliable_qos())
            self.create_subscription(t, f"{prefix}/in/{name}", pub.publish, reliable_qos())
        self.create_service(RegisterRobot, f"{prefix}/register_robot", self._register)

    def _register(self, req, resp):
        resp.accepted = bool(req.robot_id) and req.state_dim == len(req.joint_names)
        resp.reason = f"{req.robot_id}|{req.task_id}|{','.join(req.camera_topics)}|{req.last_round_id}"
        resp.server_instance = f"echo:{req.image_width}x{req.image_height}x{req.num_views}:{req.streaming}"
        return resp


if __name__ == "__main__":
    prefix = sys.argv[1]
    sys.exit(run_node(lambda: Echo(prefix), ["echo"]))
