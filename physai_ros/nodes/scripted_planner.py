"""scripted_planner: publishes action_chunk from the scripted expert (physai_ros.sim.planner), the
demo's stand-in for the policy server. Reads joint_states and task_status, answers every
`period_s` seconds with a chunk stamped with the joint_states capture time. As the server's
stand-in it signs its chunks with the server's key (physai_ros.security), so the controller
treats them as it would the server's. Run:
  python -m physai_ros.nodes.scripted_planner --ros-args -r __ns:=/robot_0 -p task:=reach
"""
from __future__ import annotations

import sys

import numpy as np
from rclpy.node import Node
from sensor_msgs.msg import JointState
from std_msgs.msg import String
from physai_ros_interfaces.msg import ActionChunk

from physai_ros.protocol import topics
from physai_ros.ros import qos
from physai_ros.ros.codecs.chunk import chunk_to_msg
from physai_ros.ros.message_digest import digest
from physai_ros.ros.node_security import node_security, open_endpoint
from physai_ros.ros.spin import run_node
from physai_ros.ros.time_conv import to_sec
from physai_ros.sim.planner import ScriptedChunkPlanner
from physai_ros.security.endpoints import CHUNK, PeerSigner
from physai_ros.sim.runtime import TaskStatus


class ScriptedPlannerNode(Node):
    def __init__(self) -> None:
        super().__init__("scripted_planner")
        p = self.declare_parameter
        ns = self.get_namespace().strip("/")
        robot_id = p("robot_id", ns or "robot_0").value
        self.planner = ScriptedChunkPlanner(
            robot_id, p("task", "pick_and_place").value, int(p("num_joints", 4).value),
            num_actions=int(p("num_actions", 50).value), dt=float(p("dt", 0.02).value),
            horizon=int(p("horizon", 40).value))
        p("fleet_file", "")
        sec, base = node_security(self)
        self.signer = open_endpoint(self, sec, base, [sec.server], lambda ks: PeerSigner(ks, sec.server))
        self._js: JointState | None = None
        self._status: TaskStatus | None = None
        self.round_id = 0
        self.errors = 0
        self.pub = self.create_publisher(ActionChunk, topics.ACTION_CHUNK_TOPIC, qos.reliable_qos())
        self.create_subscription(JointState, topics.JOINT_STATES_TOPIC, self._on_js, qos.reliable_qos())
        self.create_subscription(String, topics.TASK_STATUS_TOPIC, self._on_status, qos.latched_qos())
        period = float(p("period_s", 0.4).value)
        self.create_timer(period, self._tick)

    def _on_js(self, msg: JointState) -> None:
        self._js = msg

    def _on_status(self, msg: String) -> None:
        try:
            self._status = TaskStatus.from_json(msg.data)
        except (ValueError, TypeError) as exc:
            self.errors += 1
            self.get_logger().warning(f"unreadable task_status: {exc}", throttle_duration_sec=2.0)

    def _tick(self) -> None:
        js, status = self._js, self._status
        if js is None or status is None:
            return
        index = {n: i for i, n in enumerate(js.name)}
        try:
            positions = np.array([js.position[index[n]] for n in self.planner.joint_names])
            self.round_id += 1
            chunk = self.planner.plan(positions, status, to_sec(js.header.stamp), self.round_id)
        except (KeyError, IndexError, ValueError) as exc:
            self.errors += 1
            self.get_logger().warning(f"cannot plan: {exc}", throttle_duration_sec=2.0)
            return
        msg = chunk_to_msg(chunk)
        if self.signer is not None:
            msg.auth = self.signer.sign(CHUNK, digest(msg))
        self.pub.publish(msg)


def main(args: list[str] | None = None) -> int:
    return run_node(ScriptedPlannerNode, args)


if __name__ == "__main__":
    sys.exit(main())
