"""trajectory_controller: executes action chunks through the trajectory buffer (physai_ros.control).

Subscribes action_chunk (ActionChunk, reliable), trajectory_segment (TrajectorySegment, reliable;
streaming mode) and joint_states (the position to hold before the
first chunk); publishes joint_trajectory (JointTrajectory, reliable) at control_rate_hz,
execution_info (ExecutionInfo, reliable) and /diagnostics through the monitoring Updater
("<ns>/trajectory_controller: buffer", ": rejections", ": joint_trajectory rate"). A robot
client's hold chunk (physai_ros.control.hold) stops the buffer instead of being inserted. Run:
  python -m physai_ros.nodes.trajectory_controller --ros-args -r __ns:=/robot_0 -p num_joints:=4
"""
from __future__ import annotations

import sys

from rclpy.node import Node
from sensor_msgs.msg import JointState
from trajectory_msgs.msg import JointTrajectory
from physai_ros_interfaces.msg import ActionChunk, ExecutionInfo, TrajectorySegment

from physai_ros.config.fleet import load_fleet
from physai_ros.control.execution_gate import ExecutionGate
from physai_ros.control.joint_trajectory import hold_plan, to_joint_trajectory
from physai_ros.control.joints import default_joint_names
from physai_ros.control.trajectory_buffer import TrajectoryBuffer
from physai_ros.monitoring.config import load_monitoring
from physai_ros.monitoring.robot_health import BufferHealth, RejectionHealth
from physai_ros.protocol import topics
from physai_ros.protocol.chunk import STATUS_ERROR, STATUS_REFUSED, is_hold_chunk
from physai_ros.ros import qos
from physai_ros.ros.codecs.chunk import ChunkMessageError, executable_chunk_from_msg
from physai_ros.ros.codecs.execution_info import execution_info_to_msg
from physai_ros.ros.codecs.joint_trajectory import plan_to_msg
from physai_ros.ros.codecs.segment import SegmentMessageError, segment_from_msg
from physai_ros.ros.diagnostics_updater import FrequencyStatus, FrequencyStatusParam, Updater
from physai_ros.ros.message_digest import digest
from physai_ros.ros.node_security import node_security, open_endpoint, security_diagnostics
from physai_ros.ros.spin import run_node
from physai_ros.ros.time_conv import now_sec
from physai_ros.security.endpoints import ControllerAuth
from physai_ros.security.handshake import AuthError
from physai_ros.security.keystore import Identity
from physai_ros.security.message_auth import RefusalLog


class TrajectoryControllerNode(Node):
    def __init__(self) -> None:
        super().__init__("trajectory_controller")
        p = self.declare_parameter
        ns = self.get_namespace().strip("/")
        self.robot_id = p("robot_id", ns or "robot_0").value
        names = list(p("joint_names", [""]).value)
        if not any(names):
            names = list(default_joint_names(p("num_joints", 4).value))
        self.joint_names = tuple(names)
        self.control_rate = float(p("control_rate_hz", 480.0).value)
        self.lookahead_points = int(p("lookahead_points", 6).value)
        self.lookahead_stride = int(p("lookahead_stride", 8).value)
        self.buffer = TrajectoryBuffer(self.joint_names, rate_hz=float(p("buffer_rate_hz", 480.0).value),
                                       merge=p("merge", "replace").value,
                                       crossfade_s=float(p("crossfade_s", 0.05).value))
        self.gate = ExecutionGate(self.robot_id, self.buffer)  # what reaches the buffer, counted
        self.publish_failures = 0
        # Only what the fleet's server signed (chunks, segments) or this robot's client signed
        # (holds) is executed; public keys only, no secret in the process that moves the arm.
        fleet_file = p("fleet_file", "").value or None
        self.security, base = node_security(self, load_fleet(fleet_file))
        sec = self.security
        self.auth = open_endpoint(self, sec, base, [sec.server, Identity("robot", self.robot_id)],
                                  lambda ks: ControllerAuth(ks, self.robot_id, sec.server))
        self.auth_refusals = RefusalLog(self.get_logger().warning)

        self.traj_pub = self.create_publisher(JointTrajectory, topics.JOINT_TRAJECTORY_TOPIC, qos.reliable_qos())
        self.info_pub = self.create_publisher(ExecutionInfo, topics.EXECUTION_INFO_TOPIC, qos.reliable_qos())
        self.create_subscription(ActionChunk, topics.ACTION_CHUNK_TOPIC, self._on_chunk, qos.reliable_qos())
        self.create_subscription(TrajectorySegment, topics.TRAJECTORY_SEGMENT_TOPIC, self._on_segment,
                                 qos.reliable_qos(depth=50))
        self.create_subscription(JointState, topics.JOINT_STATES_TOPIC, self._on_joint_state, qos.reliable_qos())
        self.create_timer(1.0 / self.control_rate, self._tick)
        self.create_timer(1.0 / float(p("execution_info_rate_hz", 50.0).value), self._publish_info)
        # Levels from fleet.yaml's monitoring block (fleet_file; the embedded one by default);
        # the explicit parameters still override it for a robot-only deployment.
        mon = load_monitoring(fleet_file)
        self.updater = Updater(self, period=1.0 / float(p("diagnostics_rate_hz", 1.0 / mon.diagnostics_period_s).value))
        self.updater.setHardwareID(self.robot_id)
        self._buffer_health = BufferHealth(self.buffer.rate_hz,
                                           dry_error_s=float(p("dry_error_s", mon.buffer_dry_error_s).value))
        self._rejection_health = RejectionHealth()
        self.updater.add("buffer", self._diagnose_buffer)
        self.updater.add("rejections", lambda stat: self._rejection_health.run(stat, self.gate.rejections()))
        self.cmd_rate = FrequencyStatus(FrequencyStatusParam({"min": self.control_rate, "max": self.control_rate},
                                                             mon.rate_tolerance, 5), "joint_trajectory rate")
        self.updater.add(self.cmd_rate)
        self.updater.add("security", security_diagnostics(sec, lambda: dict(self.auth_refusals.counts)))
        self.get_logger().info(f"trajectory controller {self.robot_id}: joints {self.joint_names}, "
                               f"{self.control_rate:g} Hz, merge {self.buffer.merge.value}")

    def _on_joint_state(self, msg: JointState) -> None:
        self.gate.on_joint_state(list(msg.name), list(msg.position))

    def _refused(self, reason: str, detail: str) -> None:
        self.gate.reject(reason)
        self._warn_rejected(f"{reason}: {detail}")

    def _warn_rejected(self, text: str) -> None:
        self.get_logger().warning(f"rejected input ({self.gate.rejected_total} rejected): {text}",
                                  throttle_duration_sec=1.0)

    def _on_chunk(self, msg: ActionChunk) -> None:
        wrong = self.gate.wrong_robot(msg.robot_id, "chunk")
        if wrong is not None:
            return self._warn_rejected(f"wrong_robot: {wrong}")
        hold = is_hold_chunk(msg.status, msg.error, msg.engine_instance)
        if not self._authentic(msg, "hold" if hold else "chunk"):
            return
        if hold:
            detail = self.gate.on_hold(int(msg.round_id), now_sec(self))
            self.get_logger().info(f"robot_client hold round {msg.round_id}: {detail}", throttle_duration_sec=1.0)
            return
        if msg.status in (STATUS_REFUSED, STATUS_ERROR):  # the client's business; never executed
            return self.gate.on_client_answer("refused" if msg.status == STATUS_REFUSED else "error")
        try:
            chunk = executable_chunk_from_msg(msg)
        except ChunkMessageError as exc:
            return self._refused("malformed_message", str(exc))
        out = self.gate.insert_chunk(chunk, now_sec(self))
        if not out.accepted:
            self.get_logger().warning(f"rejected chunk round {chunk.round_id} ({self.gate.rejected_total} rejected): "
                                      f"{out.reason} {out.detail}", throttle_duration_sec=1.0)

    def _on_segment(self, msg: TrajectorySegment) -> None:
        """Streaming mode: dense nodes the buffer commits as their time comes."""
        wrong = self.gate.wrong_robot(msg.robot_id, "segment")
        if wrong is not None:
            return self._warn_rejected(f"wrong_robot: {wrong}")
        if not self._authentic(msg, "segment"):
            return
        try:
            seg = segment_from_msg(msg)
        except SegmentMessageError as exc:
            return self._refused("malformed_segment", str(exc))
        out = self.gate.insert_segment(seg, now_sec(self))
        if not out.accepted:
            self.get_logger().warning(f"rejected segment {seg.segment_id}: {out.reason} {out.detail}",
                                      throttle_duration_sec=1.0)

    def _authentic(self, msg, kind: str) -> bool:
        """A refused message leaves the buffer untouched; it is counted by reason (rejections
        and the "security" status on /diagnostics) and logged once per burst."""
        if self.auth is None:
            return True
        try:
            check = {"chunk": self.auth.check_chunk, "segment": self.auth.check_segment, "hold": self.auth.check_hold}
            check[kind](digest(msg), msg.auth)
            return True
        except AuthError as e:
            self.auth_refusals.refused(f"{kind} round {msg.round_id}", e)
            self.gate.reject(e.refusal_reason)
            return False

    def _tick(self) -> None:
        now = now_sec(self)
        cmd = self.buffer.advance(now)
        if cmd is None:  # no chunk and no joint state yet: nothing safe to command
            return
        plan = to_joint_trajectory(self.buffer.tentative_nodes(), now, self.joint_names,
                                   stride=self.lookahead_stride, max_points=self.lookahead_points)
        if not plan.points:
            plan = hold_plan(cmd, now, self.joint_names, settle_s=1.0 / self.control_rate)
        if self._publish(self.traj_pub, plan_to_msg(plan)):
            self.cmd_rate.tick()

    def _publish_info(self) -> None:
        now = now_sec(self)
        self._publish(self.info_pub, execution_info_to_msg(self.gate.execution_state(now), self.robot_id, now))

    def _publish(self, pub, msg) -> bool:
        """Publish; a failure of the middleware (seen once in a 49-process soak at load 170:
        "cannot publish data") is counted and logged, never the end of the process that holds
        the arm: the next tick publishes again."""
        try:
            pub.publish(msg)
            return True
        except RuntimeError as e:  # rclpy's RCLError (its module is private) is a RuntimeError
            self.publish_failures += 1
            self.get_logger().error(f"publishing on {pub.topic_name} failed ({self.publish_failures} so far): {e}",
                                    throttle_duration_sec=5.0)
            return False

    def _diagnose_buffer(self, stat):
        now = now_sec(self)
        g = self.gate
        return self._buffer_health.run(stat, now, self.buffer.execution_state(now), have_start=g.have_start,
                                       seen_chunk=g.seen_chunk, holding_round=g.holding_round, holds=g.holds,
                                       client_answers=g.client_answers)


def main(args: list[str] | None = None) -> int:
    return run_node(TrajectoryControllerNode, args)


if __name__ == "__main__":
    sys.exit(main())
