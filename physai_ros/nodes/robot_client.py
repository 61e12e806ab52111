"""robot_client: the robot side of the serving path, in the robot's namespace.

ROS I/O only; the logic is physai_ros.client.robot_client.RobotClientCore.
  sub  the robot's cameras, wrench, joint states and execution_info (nodes/robot_client_sensors.py),
       action_chunk (ActionChunk, reliable), observation_refresh (std_msgs/UInt64)
  srv  operator_command (OperatorCommand): an operator's signed resume / acknowledge
       (nodes/robot_client_operator.py; `physai-fleet operator resume ROBOT`)
  pub  observation (Observation, reliable) -> policy_server
       action_chunk (ActionChunk, reliable): hold chunks for SLO fallbacks
       client_status (std_msgs/String JSON, 1 Hz): counters, state, latency percentiles
       /diagnostics (monitoring Updater): "<ns>/robot_client: client", graded with fleet.yaml's
       monitoring thresholds (stream rates, latency, SLO meet rate, refusals, fallbacks,
       underruns, dropped wrench samples, buffer fill)
       /<robot_id>/metrics/<name> (std_msgs/Float64, for rqt_plot)
  call /policy_server/register_robot (ros/registration_call.py)
A streaming task adds its ROS I/O from nodes/robot_client_streaming.py (stream_wrench).
A task with a pipeline (fleet.yaml `components:` ..., docs/pipelines.md) adds its ROS I/O from
nodes/robot_client_pipeline.py (component_query/component_answer, pipeline_event,
reset_episode, the "pipeline" diagnostic); an operator's resume then clears the pipeline's
escalation too.
Parameters: fleet_file, robot_id (selects the robot entry in fleet.yaml), tick_rate_hz.
"""
from __future__ import annotations

import json
import time

from physai_ros_interfaces.msg import ActionChunk, Observation
from rclpy.duration import Duration
from rclpy.node import Node
from std_msgs.msg import String, UInt64

from physai_ros.client.registration import RegistrationExchange
from physai_ros.client.robot_client import RobotClientCore
from physai_ros.client.status import core_status
from physai_ros.config.fleet import load_fleet
from physai_ros.control.hold import hold_chunk
from physai_ros.monitoring.client_view import ClientView
from physai_ros.monitoring.config import load_monitoring
from physai_ros.monitoring.metrics import MetricsPublisher
from physai_ros.monitoring.thresholds import MetricsTask
from physai_ros.nodes.robot_client_operator import OperatorIO
from physai_ros.nodes.robot_client_pipeline import PipelineIO
from physai_ros.ros.registration_call import RegistrationCall
from physai_ros.nodes.robot_client_sensors import SensorInputs
from physai_ros.nodes.robot_client_streaming import StreamingIO
from physai_ros.protocol.chunk import is_hold_chunk
from physai_ros.protocol.topics import ACTION_CHUNK_TOPIC, CLIENT_STATUS_TOPIC, OBSERVATION_TOPIC, REFRESH_TOPIC
from physai_ros.ros.codecs.chunk import chunk_from_msg, chunk_to_msg
from physai_ros.ros.codecs.observation import observation_to_msg
from physai_ros.ros.diagnostics_updater import Updater
from physai_ros.ros.message_digest import digest
from physai_ros.ros.node_security import node_security, open_endpoint, security_diagnostics
from physai_ros.ros.qos import reliable_qos
from physai_ros.ros.spin import run_node
from physai_ros.ros.time_conv import now_sec
from physai_ros.security.endpoints import HOLD, RobotAuth
from physai_ros.security.handshake import AuthError
from physai_ros.security.keystore import Identity
from physai_ros.security.message_auth import RefusalLog


class RobotClientNode(Node):
    def __init__(self, **node_kwargs):
        # node_kwargs (namespace, parameter_overrides) let a test run the node in its process.
        super().__init__("robot_client", **node_kwargs)
        fleet_file = self.declare_parameter("fleet_file", "").value or None
        robot_id = self.declare_parameter("robot_id", "").value or self.get_namespace().strip("/")
        tick_hz = float(self.declare_parameter("tick_rate_hz", 100.0).value)
        fleet = load_fleet(fleet_file)
        self.robot = fleet.resolve_robot(robot_id)
        # Authentication: registration proof, observation MACs, signed holds, checked chunks.
        self.security, base = node_security(self, fleet)
        sec = self.security
        self.auth = open_endpoint(self, sec, base, [sec.server, Identity("robot", self.robot.id)],
                                  lambda ks: RobotAuth(ks, self.robot.id, sec.server))
        self.auth_refusals = RefusalLog(self.get_logger().warning)
        self.core = RobotClientCore(self.robot)
        self.sensors = SensorInputs(self)
        self.create_subscription(ActionChunk, ACTION_CHUNK_TOPIC, self._on_chunk, reliable_qos(50))
        self.create_subscription(UInt64, REFRESH_TOPIC, self._on_refresh, reliable_qos())
        self.obs_pub = self.create_publisher(Observation, OBSERVATION_TOPIC, reliable_qos())
        # Streaming mode: None unless the robot's task has `mode: streaming`.
        self.streaming = StreamingIO.for_node(self)
        self.hold_pub = self.create_publisher(ActionChunk, ACTION_CHUNK_TOPIC, reliable_qos())
        self.status_pub = self.create_publisher(String, CLIENT_STATUS_TOPIC, reliable_qos())
        self.registration = RegistrationCall(self, RegistrationExchange(
            self.core, self.auth, self.auth_refusals, self.streaming.client if self.streaming is not None else None))
        self._unreadable = 0
        self._escalations_logged = 0
        self.create_timer(1.0 / tick_hz, self._tick)
        self.create_timer(1.0, self._publish_status)
        self._setup_monitoring(fleet_file)
        # None unless the robot's task has a pipeline.
        self.pipeline = PipelineIO.for_node(self)
        self.operator = OperatorIO(self)
        self.get_logger().info(f"robot client {self.robot.id}: task {self.robot.task.name}, "
                               f"{self.robot.num_views} view(s), SLO {self.robot.task.slo_ms} ms, "
                               f"fallback {self.robot.task.fallback}")

    # ---- inputs -------------------------------------------------------------------------

    def _on_chunk(self, msg: ActionChunk) -> None:
        if is_hold_chunk(msg.status, msg.error, msg.engine_instance):
            return  # our own hold chunk
        if self.auth is not None:
            try:
                self.auth.check_chunk(digest(msg), msg.auth)
            except AuthError as e:  # not the server's: counted, logged once per burst, ignored
                self.auth_refusals.refused(f"chunk round {msg.round_id}", e)
                return
        try:
            chunk = chunk_from_msg(msg)
        except Exception:
            self._unreadable += 1
            return
        served = self.core.counters.chunks_ok
        self.core.on_chunk(chunk, now_sec(self))
        if self.pipeline is not None:
            self.pipeline.on_chunk_taken()
        if self.streaming is not None:
            self.streaming.client.on_chunk(chunk)
        if self.core.counters.chunks_ok > served:
            lat = self.core.counters.latencies_s[-1]
            self.view.on_served(lat, time.monotonic())
            self.metrics.set(self.robot.id, "latency_ms", lat * 1e3)

    def _on_refresh(self, msg: UInt64) -> None:
        obs = self.core.refresh(int(msg.data), now_sec(self))
        if obs is not None:
            self.send(obs)

    # ---- periodic work ------------------------------------------------------------------

    def _tick(self) -> None:
        now = now_sec(self)
        # Until the server's observation subscription has matched, a published observation
        # would be dropped (reliable but volatile), so the client does not send yet.
        streaming = self.streaming is not None and self.streaming.active  # no chunked rounds then
        out = self.core.tick(now, link_up=self.obs_pub.get_subscription_count() > 0 and not streaming)
        if out.register:
            self.registration.register()
        if out.hold is not None:
            self.publish_hold(out.hold, "SLO fallback")
        if out.observation is not None:
            self.send(out.observation)
        while self._escalations_logged < len(self.core.escalations):
            self.get_logger().error(self.core.escalations[self._escalations_logged])
            self._escalations_logged += 1

    def publish_hold(self, h, why: str) -> None:
        msg = chunk_to_msg(hold_chunk(self.robot.id, self.robot.task.name, h, self.robot.joints))
        if self.auth is not None:  # the controller takes holds signed by this robot only
            msg.auth = self.auth.signer.sign(HOLD, digest(msg))
        self.hold_pub.publish(msg)
        self.get_logger().warning(f"{why}: hold (round {h.round_id}): {h.reason}", throttle_duration_sec=1.0)

    def send(self, obs) -> None:
        msg = observation_to_msg(obs)
        if self.auth is not None:
            try:
                msg.auth = self.auth.tag_observation(digest(msg))
            except AuthError as e:  # no session yet: the server would refuse it anyway
                self.auth_refusals.refused(f"sending round {obs.round_id}", e)
                return
        self.obs_pub.publish(msg)

    def status(self) -> dict:
        return {
            **core_status(self.core, now_sec(self)),
            "unreadable_chunks": self._unreadable,
            "unreadable_images": self.sensors.unreadable_images,
            "wrench_dropped": self.view.wrench_dropped,
            "insecure": self.security.insecure,
            "auth_refused": dict(self.auth_refusals.counts),
            **(self.streaming.status() if self.streaming is not None else {}),
            **(self.pipeline.status() if self.pipeline is not None else {}),
            **self.operator.status(),
        }

    # ---- monitoring -----------------------------------------------------------------------

    def _setup_monitoring(self, fleet_file: str | None) -> None:
        mon = load_monitoring(fleet_file)
        self.view = ClientView(self.robot.num_views, self.robot.task.slo_ms, mon.window_s)
        self.metrics = MetricsPublisher(self, period_s=mon.metrics_period_s)
        self.updater = Updater(self, period=mon.diagnostics_period_s)
        self.updater.setHardwareID(self.robot.id)
        self.updater.add(MetricsTask("client", self._client_metrics, mon.thresholds,
                                     ok_message=lambda: self.core.state.value, fault=self.core.fault))
        self.updater.add("security", security_diagnostics(self.security, lambda: dict(self.auth_refusals.counts)))

    def _client_metrics(self) -> dict:
        m = self.view.metrics(self.status(), time.monotonic())
        for key in ("latency_ms_p50", "latency_ms_p99", "slo_meet_rate", "camera_hz", "wrench_hz",
                    "joint_states_hz", "buffer_actions", "buffer_s", "underruns", "fallbacks_total",
                    "refused", "wrench_dropped", "rounds", "rounds_lost", "rounds_duplicated"):
            if isinstance(m.get(key), (int, float)):
                self.metrics.set(self.robot.id, key, m[key])
        return m

    def _publish_status(self) -> None:
        self.status_pub.publish(String(data=json.dumps(self.status())))

    def close(self, timeout_s: float) -> None:
        """On shutdown (run_node): a last status, so the round ledger a monitor keeps covers
        every round this client sent, not only those up to the last 1 Hz status. Waits for its
        acknowledgement at most 1 s, and never past `timeout_s` (the stop budget)."""
        self._publish_status()
        self.status_pub.wait_for_all_acked(Duration(seconds=min(1.0, timeout_s)))


def main(argv: list[str] | None = None) -> int:
    # run_node: clean exit on SIGINT and SIGTERM (spin_once loop; see physai_ros.ros.spin).
    return run_node(RobotClientNode, argv)


if __name__ == "__main__":
    raise SystemExit(main())
