"""The policy server's streaming mode on ROS 2: a thin adapter over
physai_ros.serving.streaming.service, mounted by policy_server when a fleet.yaml task has
`mode: streaming`.

Per streaming robot (namespace <ns>):
  pub  <ns>/trajectory_segment (TrajectorySegment, reliable, depth 50) -> trajectory_controller;
       header.stamp = capture time of the newest wrench sample the segment's newest tick read
       (the tick time before any sample), so the quick loop can be traced end to end
  sub  <ns>/stream_wrench (WrenchSample, sensor-data QoS) <- robot_client, at its native rate; a
       sample in another robot's name or without the robot's session MAC is refused and counted
  observations arrive on the server's usual <ns>/observation subscription and are routed here
/diagnostics: "policy_server: streaming" (slots, rates, missed ticks, per-robot counters).
Segments are published from the action-expert thread (rclpy publishers are thread-safe), so a
segment never waits for the executor.
"""
from __future__ import annotations

import dataclasses
import time

from physai_ros_interfaces.msg import TrajectorySegment, WrenchSample

from physai_ros.monitoring.diagnostics import OK, WARN, level_byte
from physai_ros.protocol.chunk import ActionChunkData
from physai_ros.protocol.observation import ObservationData
from physai_ros.protocol.registration import RegistrationResult, RobotRegistration
from physai_ros.protocol.segment import TrajectorySegmentData
from physai_ros.protocol.topics import STREAM_WRENCH_TOPIC, TRAJECTORY_SEGMENT_TOPIC
from physai_ros.ros.codecs.segment import segment_to_msg
from physai_ros.ros.message_digest import digest
from physai_ros.ros.qos import reliable_qos, sensor_data_qos
from physai_ros.ros.time_conv import now_sec, to_sec
from physai_ros.security.endpoints import SEGMENT, WRENCH
from physai_ros.security.handshake import AuthError
from physai_ros.serving.streaming.service import build_streaming_service, streaming_tasks


class PolicyServerStreaming:
    def __init__(self, node, fleet, core):
        self.node, self.fleet, self.core, self.router = node, fleet, core, node.router
        self.input_refusals = node.report.input_refusals  # the server's "inputs" and "security" statuses
        log = node.get_logger()
        local = [s.engine for s in core.engines.values() if not s.remote]
        self.service = build_streaming_service(fleet, self._publish, core.action_runner,
                                               ros_clock=lambda: now_sec(node), log=log.warning,
                                               chunked=local[0] if local else None,
                                               chunked_compute=node._serving_threads.chunked)
        for r in fleet.robots:  # known streaming robots: topics now, so discovery is done early
            if r.task.mode == "streaming":
                self._ensure_topics(r.id, r.namespace)
        node.create_timer(0.5, self._reap)
        node.updater.add("streaming", self._diagnose)
        sc = fleet.server.streaming
        shared = bool(local) and self.service.core.expert.model is local[0].model
        log.info(f"streaming mode for task(s) {', '.join(streaming_tasks(fleet))}: {sc.slots} slot(s), "
                 f"VLM {sc.vlm_hz:g} Hz, action expert {sc.ae_hz:g} Hz, force token "
                 f"{'on' if self.service.core.expert.has_force else 'off'} ({sc.force}), when full: {sc.when_full}, "
                 f"weights {'shared with the chunked engine' if shared else 'of their own'}")

    @classmethod
    def maybe(cls, node, fleet, core) -> "PolicyServerStreaming | None":
        return cls(node, fleet, core) if streaming_tasks(fleet) else None

    def _ensure_topics(self, robot_id: str, namespace: str) -> None:
        ns = self.router.bind(robot_id, namespace)
        self.router.publisher(ns, TrajectorySegment, TRAJECTORY_SEGMENT_TOPIC, reliable_qos(depth=50))
        self.router.subscribe(ns, WrenchSample, STREAM_WRENCH_TOPIC, self._on_wrench, sensor_data_qos(10))

    # ---- called by policy_server ---------------------------------------------------------

    def on_register(self, reg: RobotRegistration, res: RegistrationResult) -> RegistrationResult:
        """After the serving core accepted `reg`: give it a streaming slot, serve it chunked,
        or refuse it (server.streaming.when_full)."""
        if not res.accepted:
            self.service.release(reg.robot_id, "registration_refused")
            return res
        task = self.fleet.tasks.get(reg.task_id)
        if task is None:
            self.service.release(reg.robot_id, "left_streaming")
            return res
        adm = self.service.admit(reg, task)
        if adm.streaming:
            self._ensure_topics(reg.robot_id, reg.robot_namespace)
        elif adm.reason:
            self.node.get_logger().info(f"{reg.robot_id}: {adm.reason}", throttle_duration_sec=5.0)
        return dataclasses.replace(res, accepted=adm.accepted, reason=adm.reason)

    def handles(self, robot_id: str) -> bool:
        return self.service.is_streaming(robot_id)

    def on_observation(self, obs: ObservationData) -> ActionChunkData | None:
        """Route a streaming robot's observation; a refusal comes back as a REFUSED chunk."""
        refusal = self.service.on_observation(obs)
        if refusal is None:
            return None
        self.node.get_logger().warning(f"streaming: refused observation of {obs.robot_id}: {refusal}",
                                       throttle_duration_sec=1.0)
        return self.core.action_runner.refused(obs, self.core.registration(obs.robot_id), refusal)

    def close(self, timeout_s: float) -> None:
        self.service.close(timeout_s)

    # ---- ROS callbacks -------------------------------------------------------------------

    def _on_wrench(self, msg: WrenchSample, ns: str) -> None:
        # The topic's robot only, with its session MAC: nothing else feeds its action expert.
        robot_id = self.router.owner(ns)
        if msg.robot_id != robot_id:
            self.input_refusals.add(robot_id, "robot_id_mismatch", f"wrench sample claims {msg.robot_id[:64]!r}",
                                    time.time())
            return
        auth = self.router.auth
        if auth is not None:
            try:
                auth.check_session(robot_id, WRENCH, digest(msg), msg.auth)
            except AuthError as e:
                self.input_refusals.add(robot_id, e.refusal_reason, f"wrench sample: {e}", time.time())
                self.node.get_logger().warning(f"streaming: refused wrench of {robot_id}: {e}",
                                               throttle_duration_sec=5.0)
                return
        f, t = msg.wrench.force, msg.wrench.torque
        why = self.service.on_wrench(robot_id, (f.x, f.y, f.z, t.x, t.y, t.z), to_sec(msg.header.stamp))
        if why is not None and not why.startswith(("waiting_for_observation", "not_streaming")):
            self.node.get_logger().warning(f"streaming: dropped wrench of {robot_id}: {why}", throttle_duration_sec=1.0)

    def _publish(self, out: TrajectorySegmentData) -> None:
        # Signed by the server: the controller executes nothing else.
        self.router.publish(out.robot_id, TRAJECTORY_SEGMENT_TOPIC, segment_to_msg(out), SEGMENT)

    def _reap(self) -> None:
        for rid in self.service.reap():
            self.node.get_logger().info(f"streaming: {rid} silent for {self.service.cfg.timeout_s} s; slot freed")

    def _diagnose(self, stat):
        d = self.service.diagnostics()
        level = level_byte(OK if not d["engine_errors"] and not d["publish_errors"] else WARN)
        msg = (f"{len(d['streaming_robots'])}/{d['slots']} slot(s) used"
               + (f", VLM {d['vlm_hz']:.1f} Hz, AE {d['ae_hz']:.1f} Hz, missed ticks {100 * d['missed_tick_fraction']:.0f} %"
                  if d["running"] and d["vlm_hz"] is not None else ", streams stopped"))
        stat.summary(level, msg)
        for k, v in d.items():
            if k != "robots":
                stat.add(k, str(v))
        for rid, rd in d["robots"].items():
            for k, v in rd.items():
                stat.add(f"{rid}.{k}", str(v))
        return stat
