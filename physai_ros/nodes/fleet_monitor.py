"""The fleet's observer node: counts every robot stream, keeps the newest status and execution
info, samples camera frames for the contact sheet, and reads the nodes' /diagnostics (publisher
side stream rates from their FrequencyStatus tasks, refusals by reason, holds). Each robot's
language stream (/<ns>/text) goes into a monitoring.text_report.RobotTextLog with the sim's ground
truth from task_status and the served rounds' capture times, so the summary can pair what a robot
said with what the simulator knew. With a FleetTraceCapture it also follows each
robot's observation and action_chunk topics to record task traces (--record-trace). Runs inside
the physai-fleet process."""
from __future__ import annotations

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import WrenchStamped
from rclpy.node import Node
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import String
from trajectory_msgs.msg import JointTrajectory
from physai_ros_interfaces.msg import ActionChunk, ExecutionInfo, Observation, RobotText

from physai_ros.control.types import ExecutionState
from physai_ros.monitoring.diagnostics_reader import DiagnosticsReader
from physai_ros.monitoring.robot_summary import RateCounter, RobotSummary
from physai_ros.monitoring.text_report import GroundTruth, RobotTextLog
from physai_ros.protocol import topics
from physai_ros.protocol.chunk import STATUS_OK, is_hold_chunk
from physai_ros.protocol.text import TEXT_TOPIC
from physai_ros.ros import qos
from physai_ros.ros.codecs.chunk import chunk_from_msg
from physai_ros.ros.codecs.execution_info import execution_state_from_msg
from physai_ros.ros.codecs.observation import observation_from_msg
from physai_ros.ros.codecs.text import text_from_msg
from physai_ros.ros.image import ImageBridge
from physai_ros.ros.time_conv import now_sec, to_sec
from physai_ros.sim.runtime import TaskStatus
from physai_ros.sim.trace_capture import FleetTraceCapture


class FleetMonitor(Node):
    def __init__(self, robots: dict[str, int], snapshot_period_s: float = 5.0, probe_all: bool = False,
                 capture: FleetTraceCapture | None = None):
        """robots: namespace (without slash) -> number of camera views. The 480 Hz streams
        (wrench, joint_trajectory) are measured at their publishers (task_status, diagnostics);
        probe_all also subscribes to them, which costs the monitor a lot of CPU per robot.
        capture: record task traces from the serving topics (observation, action_chunk)."""
        super().__init__("fleet_monitor")
        self.capture = capture
        self.bridge = ImageBridge()
        self.rates: dict[str, dict[str, RateCounter]] = {}
        self.status: dict[str, TaskStatus] = {}
        self.info: dict[str, ExecutionState] = {}
        self.frames: dict[str, list[tuple[float, np.ndarray]]] = {}
        self.diagnostics = DiagnosticsReader(robots)  # rates, refusals, holds, server series
        self._newest: dict[str, list[np.ndarray | None]] = {}
        self.latency_ms: dict[str, list[float]] = {}
        self.text_logs: dict[str, RobotTextLog] = {}
        self.t0 = now_sec(self)
        for ns, views in robots.items():
            self.rates[ns] = {}
            self.frames[ns] = []
            self._newest[ns] = [None] * views
            sd, rel = qos.sensor_data_qos(), qos.reliable_qos()
            if probe_all:
                self._count(ns, WrenchStamped, topics.WRENCH_TOPIC, sd)
                self._count(ns, JointTrajectory, topics.JOINT_TRAJECTORY_TOPIC, rel)
            self._count(ns, JointState, topics.JOINT_STATES_TOPIC, rel)
            self._count(ns, ExecutionInfo, topics.EXECUTION_INFO_TOPIC, rel, self._on_info)
            for i in range(views):
                self._count(ns, Image, topics.camera_topic(i), sd, self._image_cb(i))
            self.create_subscription(String, topics.robot_topic(ns, topics.TASK_STATUS_TOPIC), self._status_cb(ns),
                                     qos.latched_qos())
            self.latency_ms[ns] = []
            self.text_logs[ns] = RobotTextLog()
            # Reliable, depth 50 like the server's publisher. The updates are signed; the monitor
            # only shows them, so it does not verify them (a robot_client would).
            self.create_subscription(RobotText, topics.robot_topic(ns, TEXT_TOPIC),
                                     lambda m, ns=ns: self._on_text(ns, m), qos.reliable_qos(50))
            self.create_subscription(ActionChunk, topics.robot_topic(ns, topics.ACTION_CHUNK_TOPIC),
                                     lambda m, ns=ns: self._on_chunk(ns, m), qos.reliable_qos(50))
            if capture is not None:
                self._follow_rounds(ns, capture)
        self.create_subscription(DiagnosticArray, topics.DIAGNOSTICS_TOPIC, self._on_diagnostics, qos.reliable_qos(50))
        self.create_timer(snapshot_period_s, self._snapshot)

    def clock(self) -> float:
        """Seconds since this monitor started: the time base of its series and snapshots."""
        return now_sec(self) - self.t0

    def _on_chunk(self, ns: str, msg: ActionChunk) -> None:
        # Served rounds only: not refusals, not a robot_client's own hold chunk.
        if msg.status != STATUS_OK or is_hold_chunk(msg.status, msg.error, msg.engine_instance):
            return
        samples = self.latency_ms[ns]
        capture = to_sec(msg.header.stamp)
        samples.append(round((now_sec(self) - capture) * 1e3, 2))
        self.text_logs[ns].on_round(msg.round_id, capture)  # when the frame its texts start from was taken
        if len(samples) > 6000:
            del samples[:-5000]

    def _on_diagnostics(self, msg: DiagnosticArray) -> None:
        stamp, t = to_sec(msg.header.stamp), now_sec(self) - self.t0
        for st in msg.status:
            why = self.diagnostics.on_status(st.name, st.hardware_id, {kv.key: kv.value for kv in st.values}, stamp, t)
            if why is not None:
                self.get_logger().warning(why, throttle_duration_sec=5.0)

    def _count(self, ns: str, msg_type, topic: str, profile, then=None) -> None:
        counter = self.rates[ns].setdefault(topic, RateCounter())

        def cb(msg) -> None:
            counter.add(now_sec(self))
            if then is not None:
                then(ns, msg)

        self.create_subscription(msg_type, topics.robot_topic(ns, topic), cb, profile)

    def _follow_rounds(self, ns: str, capture: FleetTraceCapture) -> None:
        # Reliable like their publishers: a lost request or chunk would shift the trace's rounds.
        self.create_subscription(
            Observation, topics.robot_topic(ns, topics.OBSERVATION_TOPIC),
            lambda m: capture.on_request(ns, observation_from_msg(m), now_sec(self)), qos.reliable_qos(50))
        self.create_subscription(
            ActionChunk, topics.robot_topic(ns, topics.ACTION_CHUNK_TOPIC),
            lambda m: capture.on_chunk(ns, chunk_from_msg(m), now_sec(self)), qos.reliable_qos(50))

    def _on_info(self, ns: str, msg: ExecutionInfo) -> None:
        st = self.info[ns] = execution_state_from_msg(msg)
        if self.capture is not None:
            self.capture.on_executing(ns, st.executing_round_id, st.exec_phase_start)

    def _image_cb(self, i: int):
        def cb(ns: str, msg: Image) -> None:
            # The message buffer is reused by rclpy for the next message: keep a copy.
            self._newest[ns][i] = np.array(self.bridge.imgmsg_to_cv2(msg, "rgb8"))
        return cb

    def _status_cb(self, ns: str):
        def cb(msg: String) -> None:
            try:
                st = TaskStatus.from_json(msg.data)
            except (ValueError, TypeError) as exc:
                self.get_logger().warning(f"{ns}: unreadable task_status: {exc}", throttle_duration_sec=5.0)
                return
            self.status[ns] = st
            self.text_logs[ns].on_status(GroundTruth.from_status(st))
        return cb

    def _on_text(self, ns: str, msg: RobotText) -> None:
        try:
            self.text_logs[ns].on_text(text_from_msg(msg), now_sec(self))
        except (ValueError, TypeError) as exc:
            self.get_logger().warning(f"{ns}: unreadable text: {exc}", throttle_duration_sec=5.0)

    def _snapshot(self) -> None:
        t = now_sec(self) - self.t0
        for ns, views in self._newest.items():
            if all(v is not None for v in views):
                self.frames[ns].append((t, np.concatenate(_same_width(views), axis=0)))

    def summaries(self) -> list[RobotSummary]:
        out = []
        for ns in self.rates:
            s = RobotSummary(robot_id=ns)
            st = self.status.get(ns)
            if st is not None:
                s.task, s.episodes_finished, s.tasks_completed, s.timeouts = (
                    st.task, st.episodes_finished, st.successes, st.timeouts)
            info = self.info.get(ns)
            if info is not None:
                s.chunks_executed, s.chunks_rejected, s.underruns = (
                    int(info.chunks_accepted), int(info.chunks_rejected), int(info.underruns))
                s.last_reject_reason = info.last_reject_reason
            d = self.diagnostics
            s.refused_inputs = dict(d.refused.get(ns, {}))
            if not s.refused_inputs and s.chunks_rejected:  # no diagnostics yet: reasons unknown
                s.refused_inputs = {"unknown": s.chunks_rejected}
            s.holds_applied = d.holds.get(ns, 0)
            s.rates_hz = {k: round(c.rate_hz, 2) for k, c in self.rates[ns].items()}
            s.published_hz = {k: round(c.rate_hz, 2) for k, c in d.published[ns].items()}
            s.counts = {k: c.count for k, c in self.rates[ns].items()}
            s.latency_samples_ms = list(self.latency_ms.get(ns, [])[-5000:])
            s.slo_ms = d.slo_ms.get(ns)
            out.append(s)
        return out

    def series(self) -> dict[str, dict[str, dict[str, list[float]]]]:
        return self.diagnostics.series()


def _same_width(views: list) -> list:
    """A robot's views scaled to the first one's width (aspect kept), to stack them in one cell:
    a robot's cameras may differ in size."""
    w = views[0].shape[1]
    if all(v.shape[1] == w for v in views):
        return views
    import cv2

    return [v if v.shape[1] == w else cv2.resize(v, (w, max(1, round(v.shape[0] * w / v.shape[1]))))
            for v in views]
