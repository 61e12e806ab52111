"""policy_server: serves the pi0 engine to every registered robot over ROS 2.

ROS I/O only; the logic is physai_ros.serving.serving_core.ServingCore.
  service  /policy_server/register_robot  (physai_ros_interfaces/RegisterRobot)
  sub      /<ns>/observation               (Observation, reliable), one per registered robot
  pub      /<ns>/action_chunk              (ActionChunk, reliable), answers and refusals
  pub      /<ns>/observation_refresh       (std_msgs/UInt64, reliable): resend this round fresh
  pub      /diagnostics, /<robot_id>/metrics/<name>, /fleet/metrics/<name> (policy_server_monitoring)
  with the language stream on: pub /<ns>/text, service /policy_server/ask_robot (policy_server_language)
Parameters: fleet_file (default: the embedded config/fleet.yaml), num_robots (0: the robots
listed; N: the first N, cloning the last entry beyond the list, as the launchers start them),
checkpoint (a policy directory replacing server.model: physai-fleet --checkpoint).
Inference runs in serving.serving_threads's threads (one per engine instance, so instances compute
concurrently); DDS callbacks never wait for the engine. Per-robot topics, ownership checks and
signed publishing are ros.robot_router's; what is reported is monitoring.server_metrics's.
"""
from __future__ import annotations

import threading
import time

from physai_ros_interfaces.msg import ActionChunk, Observation
from physai_ros_interfaces.srv import RegisterRobot
from rclpy.node import Node
from std_msgs.msg import UInt64

from physai_ros.config.fleet import load_fleet
from physai_ros.nodes.policy_server_language import PolicyServerLanguage
from physai_ros.nodes.policy_server_monitoring import ServerMonitoringIO
from physai_ros.nodes.policy_server_pipeline import PolicyServerPipeline
from physai_ros.nodes.policy_server_streaming import PolicyServerStreaming
from physai_ros.protocol.topics import ACTION_CHUNK_TOPIC, OBSERVATION_TOPIC, REFRESH_TOPIC, REGISTER_SERVICE
from physai_ros.ros.codecs.chunk import chunk_to_msg
from physai_ros.ros.codecs.observation import observation_from_msg
from physai_ros.ros.codecs.registration import registration_from_request, result_to_response
from physai_ros.ros.message_digest import digest
from physai_ros.ros.node_security import node_security, open_endpoint
from physai_ros.ros.qos import reliable_qos
from physai_ros.ros.remote_engine import remote_engines_on
from physai_ros.ros.robot_router import RobotRouter
from physai_ros.ros.spin import run_node
from physai_ros.security.endpoints import CHUNK, ServerAuth
from physai_ros.security.keystore import Identity
from physai_ros.serving.compute_threads import build_for, serving_threads
from physai_ros.serving.startup.factory_plan import apply_factory
from physai_ros.serving.registration_desk import RegistrationDesk
from physai_ros.serving.serving_threads import ServingThreads
from physai_ros.serving.startup.engine_builder import build_and_warm, model_format, serving_summary
from physai_ros.serving.startup.preflight import SERVING_LOG_MARK, STARTUP_LOG_PREFIX, check_server_files


class PolicyServerNode(Node):
    def __init__(self):
        super().__init__("policy_server")
        fleet_file = self.declare_parameter("fleet_file", "").value or None
        # num_robots: how many robots the launcher started (physai_ros.fleet.plan.server_spec), so the
        # server expects exactly those (a clone robot_<k> beyond the list, or fewer than listed)
        # and does not report robots that were never launched as unregistered. 0: as listed.
        num_robots = int(self.declare_parameter("num_robots", 0).value or 0)
        checkpoint = self.declare_parameter("checkpoint", "").value or None
        self.fleet = load_fleet(fleet_file)
        if checkpoint:
            self.fleet = self.fleet.with_checkpoint(checkpoint)
        if num_robots > 0:
            self.fleet = self.fleet.with_num_robots(num_robots)
        check_server_files(self.fleet)  # a missing checkpoint fails here, named, in one line
        # Which LeRobot wrote the checkpoint decides the engine's float32 variant: said once here
        # (physai-fleet relays startup lines) and kept for the "model" diagnostics status.
        self.model_format = model_format(self.fleet)
        if self.model_format is not None:
            self._startup(self.model_format.summary())
        # Authentication (physai_ros.security): None only with an explicit insecure: true. Set up
        # before the engines: remote engine proxies sign their requests with it.
        sec, base = node_security(self, self.fleet)
        self.security = sec
        need = [sec.server] + [Identity("robot", r.id) for r in self.fleet.robots] + \
            [Identity("worker", w.instance_id) for w in self.fleet.server.remote_engines]
        self.auth = open_endpoint(self, sec, base, need, lambda ks: ServerAuth(ks, sec.server, sec.max_skew_s))
        self.router = RobotRouter(self, self.auth)
        model = self.fleet.server.model
        self._startup(f"loading {model.checkpoint or 'preset ' + str(model.preset)} on "
                      f"{self.fleet.server.device} ({self.fleet.server.engine_instances} engine instance(s))")
        # server.torch_threads N >= 1: only the engines' serving threads compute in parallel, N
        # threads each, the model built, warmed up and profiled on a thread that ends (2.4-2.7x
        # faster on cores of its own; serving.compute_threads). 0: as torch sets it up, built here.
        torch_threads = self.fleet.server.torch_threads or None
        self.core, profiled, warm_s = build_for(torch_threads, lambda: build_and_warm(
            self.fleet, remote_engine=remote_engines_on(self), progress=self._startup))
        # fleet.yaml factory.apply: plan on the measured profiles and run the plan (docs/factory.md).
        self.factory = apply_factory(self.core, self.fleet, measured=list(profiled))
        if self.factory is not None:
            self._startup(f"factory plan: {self.factory.summary()}")
            self.factory.on_applied = lambda change: self.get_logger().info(f"factory plan applied: {change.line()}")
        self._stop = threading.Event()
        self.monitor = ServerMonitoringIO(self, fleet_file, self.fleet, self.core, self.model_format, sec)
        # The extensions publish into these too.
        self.view, self.metrics, self.report, self.updater = (self.monitor.view, self.monitor.metrics,
                                                              self.monitor.report, self.monitor.updater)
        self.desk = RegistrationDesk(self.core, self.auth, self.report.registration_refusals)
        # Known robots get their topics now, so DDS discovery is done before the first chunk
        # (a reliable, volatile publisher drops what it sends before a subscriber matches).
        for robot in self.fleet.robots:
            self._ensure_topics(robot.id, robot.namespace)
        # The language stream when fleet.yaml asks for it: /<ns>/text and ask_robot.
        self.language = PolicyServerLanguage.maybe(self, self.fleet, self.core)
        if self.language is not None:
            self.report.robot_extras = self.language.robot_metrics
        self.pipeline = PolicyServerPipeline.maybe(self, self.fleet, self.core)  # task pipelines: /<ns>/component_query
        # Each serving thread sets its own torch thread count (serving.compute_threads.use_threads).
        self._serving_threads = ServingThreads(self.core, self._publish_chunks, self._publish_refresh,
                                               self.get_logger().error, on_texts=self._publish_texts,
                                               torch_threads=serving_threads(torch_threads)).start()
        if self.fleet.server.robot_timeout_s is not None:
            # A robot silent past server.robot_timeout_s (network cut, client dead) is freed.
            self.create_timer(1.0, self._release_idle_robots)
        # Streaming mode for tasks with `mode: streaming`; None when no task asks.
        self.streaming = PolicyServerStreaming.maybe(self, self.fleet, self.core)
        self.desk.streaming = self.streaming
        # Last: the service appearing in the graph is what clients and physai-fleet take for
        # "the server is up", so it must not appear before everything it needs exists.
        self.create_service(RegisterRobot, REGISTER_SERVICE, self._on_register)
        self.get_logger().info(SERVING_LOG_MARK + serving_summary(self.fleet, self.core, profiled, warm_s))

    def _startup(self, message: str) -> None:
        """"startup:" lines are the progress physai-fleet relays while the user waits."""
        self.get_logger().info(f"{STARTUP_LOG_PREFIX} {message}")

    # ---- registration and per-robot topics ----------------------------------------------

    def _on_register(self, request, response):
        try:
            reg, unreadable = registration_from_request(request), None
        except Exception as e:  # answered as a refusal by the desk, never raised into the executor
            reg, unreadable = None, str(e)
        out = self.desk.register(reg, unreadable, str(request.robot_id),
                                 lambda: digest(request, skip=("auth_proof",)), request.auth_proof)
        result_to_response(out.result, response)
        if out.grant is not None:
            response.auth_grant = out.grant
        elif not out.result.accepted and self.auth is not None:
            response.auth_grant = self.desk.refusal_signature(request.auth_proof, response.reason)
        if out.warning is not None:
            self.get_logger().warning(out.warning, throttle_duration_sec=1.0)
        self._publish_chunks(self.core.take_notices())  # a restarted robot's dropped round
        if out.result.accepted:
            self._ensure_topics(reg.robot_id, reg.robot_namespace)
        return response

    def _ensure_topics(self, robot_id: str, namespace: str) -> None:
        ns = self.router.bind(robot_id, namespace)
        self.router.publisher(ns, ActionChunk, ACTION_CHUNK_TOPIC, reliable_qos())
        self.router.publisher(ns, UInt64, REFRESH_TOPIC, reliable_qos())
        self.router.subscribe(ns, Observation, OBSERVATION_TOPIC, self._on_observation, reliable_qos())
        if getattr(self, "language", None) is not None:
            self.language.ensure_topics(robot_id, namespace)
        self.monitor.track(robot_id)

    def _on_observation(self, msg: Observation, ns: str) -> None:
        # The topic says who sent it: a message on /robot_0/observation claiming another robot
        # is refused (ros.robot_router), counted against the topic's robot and logged.
        owner = self.router.owner(ns)
        misclaim = self.router.misclaim(msg.robot_id, ns, OBSERVATION_TOPIC)
        if misclaim is not None:
            self._refuse_input(owner, "robot_id_mismatch", f"observation on {misclaim}")
            return
        problem = self.desk.session_problem(
            lambda: self.auth.check_observation(msg.robot_id, digest(msg), msg.auth), msg.robot_id)
        if problem is not None:
            self._refuse_input(owner, *problem)
            return
        try:
            obs = observation_from_msg(msg)
        except Exception as e:
            self._refuse_input(owner, "unreadable", f"{type(e).__name__}: {e}")
            return
        if self.streaming is not None and self.streaming.handles(obs.robot_id):
            refused = self.streaming.on_observation(obs)
            if refused is not None:
                self._publish(refused)
            return
        for chunk in self._serving_threads.submit(obs):  # and dispatched at once when an instance is idle
            self._publish(chunk)

    def _refuse_input(self, owner: str, reason: str, detail: str) -> None:
        self.report.input_refusals.add(owner, reason, detail, time.time())
        self.get_logger().warning(f"refused observation on {owner!r}'s topic ({reason}): {detail}",
                                  throttle_duration_sec=1.0)

    def _publish(self, chunk) -> None:
        try:
            # An unknown robot has nowhere to be answered on; the core still counted its refusal.
            if self.router.publish(chunk.robot_id, ACTION_CHUNK_TOPIC, chunk_to_msg(chunk), CHUNK):
                self.view.on_chunk(chunk.robot_id, int(chunk.status), chunk.stamp, queue_ms=float(chunk.queue_ms))
        except Exception as e:  # shutting down (context gone) or a broken message
            if not self._stop.is_set():
                self.get_logger().error(f"publishing a chunk for {chunk.robot_id} failed: {e}")

    # ---- inference: serving.serving_threads's threads call these -----------------------------------

    def _publish_chunks(self, chunks) -> None:
        for chunk in chunks:
            self._publish(chunk)

    def _publish_texts(self, texts) -> None:
        if self.language is not None and not self._stop.is_set():
            self.language.publish(texts)

    def _publish_refresh(self, robot_id: str, round_id: int) -> None:
        if not self._stop.is_set():
            self.router.publish(robot_id, REFRESH_TOPIC, UInt64(data=int(round_id)))

    def _release_idle_robots(self) -> None:
        timeout = self.fleet.server.robot_timeout_s
        gone = self.core.release_idle(timeout)
        self._publish_chunks(self.core.take_notices())
        for rid in gone:
            if self.auth is not None:
                self.auth.end_session(rid)  # it registers again on return, with a new session
            if self.pipeline is not None:
                self.pipeline.forget(rid)  # its waiting questions and kept prefix
            self.get_logger().warning(
                f"robot {rid!r} silent for over {timeout:g} s: its "
                "registration, queue entry and history are freed (it registers again on return)")

    def close(self, timeout_s: float) -> None:
        """Called by run_node before destroy_node: stop the worker threads while publishers
        still exist, all within `timeout_s` (what is left of the stop budget). A thread still
        inside a batch then is left to run_node, which exits without it."""
        end = time.monotonic() + timeout_s
        self._stop.set()
        try:
            if self.streaming is not None:
                self.streaming.close(timeout_s)
            if self.pipeline is not None:
                self.pipeline.close(max(0.0, end - time.monotonic()))
        finally:
            self._serving_threads.stop(timeout=max(0.0, end - time.monotonic()))
            if self.factory is not None:  # a rescheduling proposal still solving (seconds at most)
                self.factory.wait_for_proposals(max(0.0, end - time.monotonic()))


def main(argv: list[str] | None = None) -> int:
    # run_node: clean exit on SIGINT and SIGTERM (spin_once loop; see physai_ros.ros.spin).
    return run_node(PolicyServerNode, argv)


if __name__ == "__main__":
    raise SystemExit(main())
