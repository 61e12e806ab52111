"""policy_server: serves the pi0 engine to every registered robot over ROS 2.

ROS I/O only; the logic is physai_ros.serving.serving_core.ServingCore.
  service  /policy_server/register_robot  (physai_ros_interfaces/RegisterRobot)
  sub      /<ns>/observation               (Observation, reliable), one per registered robot
  pub      /<ns>/action_chunk              (ActionChunk, reliable), answers and refusals
  pub      /<ns>/observation_refresh       (std_msgs/UInt64, reliable): resend this round fresh
  pub      /diagnostics                    (diagnostic_msgs/DiagnosticArray, monitoring Updater):
           "policy_server: <robot_id>" per robot, ": engine <id>" per instance, ": fleet",
           ": registrations" and ": inputs" (refusals not attributable to a served round)
  pub      /<robot_id>/metrics/<name>, /fleet/metrics/<name>  (std_msgs/Float64, for rqt_plot)
  with the language stream on: pub /<ns>/text, service /policy_server/ask_robot (policy_server_language)
Parameters: fleet_file (default: the embedded config/fleet.yaml), num_robots (0: the robots
listed; N: the first N, cloning the last entry beyond the list, as the launchers start them),
checkpoint (a policy directory replacing server.model: physai-fleet --checkpoint).
Inference runs in serving.runner's threads (one per engine instance, so instances compute
concurrently); DDS callbacks never wait for the engine.
"""
from __future__ import annotations

import threading
import time

from physai_ros_interfaces.msg import ActionChunk, Observation
from physai_ros_interfaces.srv import RegisterRobot
from rclpy.node import Node
from std_msgs.msg import UInt64

from physai_ros.serving.compute_threads import build_for, serving_threads
from physai_ros.monitoring.config import load_monitoring
from physai_ros.monitoring.diagnostics import ERROR, OK, MetricsTask, level_byte
from physai_ros.monitoring.metrics import MetricsPublisher
from physai_ros.monitoring.refusals import RefusalHealth, RefusalLog
from physai_ros.monitoring.server_view import ServerView
from physai_ros.nodes.policy_server_language import PolicyServerLanguage
from physai_ros.nodes.policy_server_pipeline import PolicyServerPipeline
from physai_ros.nodes.policy_server_streaming import PolicyServerStreaming
from physai_ros.protocol.registration import RegistrationResult
from physai_ros.protocol.topics import (ACTION_CHUNK_TOPIC, OBSERVATION_TOPIC, REFRESH_TOPIC, REGISTER_SERVICE,
                                        robot_topic)
from physai_ros.ros.codecs.chunk import chunk_to_msg
from physai_ros.ros.codecs.observation import observation_from_msg
from physai_ros.ros.codecs.registration import registration_from_request, result_to_response
from physai_ros.ros.diagnostics_updater import Updater
from physai_ros.ros.message_digest import digest
from physai_ros.ros.node_security import node_security, open_endpoint, security_diagnostics
from physai_ros.ros.qos import reliable_qos
from physai_ros.ros.remote_engine import remote_engines_on
from physai_ros.ros.spin import run_node
from physai_ros.security.endpoints import CHUNK, ServerAuth
from physai_ros.security.handshake import AuthError
from physai_ros.security.keystore import Identity
from physai_ros.config.fleet import load_fleet
from physai_ros.serving.engine_builder import build_core, model_format, profile_local_engines
from physai_ros.serving.factory_runtime import apply_factory
from physai_ros.serving.preflight import SERVING_LOG_MARK, STARTUP_LOG_PREFIX, check_server_files
from physai_ros.serving.runner import ServingRunner


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
        self._sign_lock = threading.Lock()  # sign and publish in one step: counters arrive in order
        # "startup:" lines are the progress physai-fleet relays while the user waits.
        started = time.monotonic()
        model = self.fleet.server.model
        self._startup(f"loading {model.checkpoint or 'preset ' + str(model.preset)} on "
                      f"{self.fleet.server.device} ({self.fleet.server.engine_instances} engine instance(s))")
        # server.torch_threads N >= 1: only the engines' serving threads compute in parallel, N
        # threads each, the model built, warmed up and profiled on a thread that ends (2.4-2.7x
        # faster on cores of its own; serving.compute_threads). 0: as torch sets it up, built here.
        self._torch_threads = self.fleet.server.torch_threads or None
        self.core, profiled, warm_s = build_for(self._torch_threads, lambda: self._build_engines(started))
        # The count each serving thread sets for itself (not whatever another thread, e.g. a
        # component thread at one, sets later: serving.compute_threads.use_threads).
        serve_threads = serving_threads(self._torch_threads)
        # fleet.yaml factory.apply: plan on the measured profiles and run the plan (docs/factory.md).
        self.factory = apply_factory(self.core, self.fleet, measured=list(profiled))
        if self.factory is not None:
            self._startup(f"factory plan: {self.factory.summary()}")
        self._robots: dict[str, tuple] = {}  # namespace -> (sub, chunk pub, refresh pub)
        self._pubs_by_robot: dict[str, tuple] = {}
        self._pub_lock = threading.Lock()
        self._setup_monitoring(fleet_file)
        # Known robots get their topics now, so DDS discovery is done before the first chunk
        # (a reliable, volatile publisher drops what it sends before a subscriber matches).
        for robot in self.fleet.robots:
            self._ensure_topics(robot.id, robot.namespace)
        self._stop = threading.Event()
        # The language stream (issue 22) when fleet.yaml asks for it: /<ns>/text and ask_robot.
        self.language = PolicyServerLanguage.maybe(self, self.fleet, self.core)
        self.pipeline = PolicyServerPipeline.maybe(self, self.fleet, self.core)  # issue 23: /<ns>/component_query
        self._runner = ServingRunner(self.core, self._publish_chunks, self._publish_refresh,
                                     self.get_logger().error, on_texts=self._publish_texts,
                                     torch_threads=serve_threads).start()
        if self.fleet.server.robot_timeout_s is not None:
            # A robot silent past server.robot_timeout_s (network cut, client dead) is freed.
            self.create_timer(1.0, self._release_idle_robots)
        # Streaming mode (issue 7) for tasks with `mode: streaming`; None when no task asks.
        self.streaming = PolicyServerStreaming.maybe(self, self.fleet, self.core)
        # Last: the service appearing in the graph is what clients and physai-fleet take for
        # "the server is up", so it must not appear before everything it needs exists.
        self.create_service(RegisterRobot, REGISTER_SERVICE, self._on_register)
        self.get_logger().info(
            f"{SERVING_LOG_MARK}{self.fleet.server.model.preset or self.fleet.server.model.checkpoint} with "
            f"{len(self.core.engines)} engine instance(s), scheduler {self.fleet.server.scheduler}, "
            f"instance {self.core.instance_id} (warm-up {warm_s * 1e3:.0f} ms"
            + (", profiles " + "; ".join(
                f"{iid}: " + " ".join(f"{b}:{t * 1e3:.0f}ms" for b, t in self.core.engines[iid].profile.to_pairs())
                for iid in profiled) if profiled else "") + ")")

    def _build_engines(self, started: float):
        """(core, measured profiles, warm-up seconds). Remote engine proxies publish and subscribe
        through this node: its executor delivers their results while a worker waits in infer()."""
        core = build_core(self.fleet, remote_engine=remote_engines_on(self))
        self._startup(f"model loaded after {time.monotonic() - started:.1f} s; measuring the "
                      "latency-vs-batch profile (this is the warm-up)")
        # Measuring the profile runs every batch size once unmeasured first: it is the warm-up.
        profiled = profile_local_engines(core, self.fleet, progress=self._startup)
        return core, profiled, max(profiled.values()) if profiled else core.warm_up()

    def _startup(self, message: str) -> None:
        self.get_logger().info(f"{STARTUP_LOG_PREFIX} {message}")

    # ---- registration and per-robot topics ----------------------------------------------

    def _on_register(self, request, response):
        try:
            reg = registration_from_request(request)
            session = None
            if self.auth is not None:
                try:
                    grant, key = self.auth.register(reg.robot_id, digest(request, skip=("auth_proof",)),
                                                    request.auth_proof)
                except AuthError as e:
                    return self._refuse_registration(reg.robot_id, f"unauthenticated_{e.reason}", str(e), response,
                                                     request)
                session = (grant, key)
            res = self.core.register(reg)
            if self.streaming is not None:
                res = self.streaming.on_register(reg, res)
        except Exception as e:  # a malformed request must not take the service down
            result_to_response(RegistrationResult(False, f"bad_registration: {e}", self.core.instance_id), response)
            self.registration_refusals.add(str(request.robot_id), "bad_registration", str(e), time.time())
            return self._sign_refusal(request, response)
        result_to_response(res, response)
        if res.accepted and session is not None:
            self.auth.start_session(reg.robot_id, session[1])
            response.auth_grant = session[0]
        elif not res.accepted:
            self._sign_refusal(request, response)
        self._publish_chunks(self.core.take_notices())  # a restarted robot's dropped round
        if res.accepted:
            self._ensure_topics(reg.robot_id, reg.robot_namespace)
        else:
            reason, _, detail = res.reason.partition(": ")
            self.registration_refusals.add(reg.robot_id, reason, detail, time.time())
            self.get_logger().warning(f"refused registration of {reg.robot_id!r}: {res.reason}",
                                      throttle_duration_sec=1.0)
        return response

    def _refuse_registration(self, robot_id: str, reason: str, detail: str, response, request):
        result_to_response(RegistrationResult(False, f"{reason}: {detail}", self.core.instance_id), response)
        self.registration_refusals.add(str(robot_id)[:64], reason, detail, time.time())
        self.get_logger().warning(f"refused registration of {str(robot_id)[:64]!r}: {reason}: {detail}",
                                  throttle_duration_sec=1.0)
        return self._sign_refusal(request, response)

    def _sign_refusal(self, request, response):
        """A refusal carries the server's signature over the proof it answers: a robot acts only on
        its own fleet server's refusals (a second register_robot service's are nobody's)."""
        if self.auth is not None:
            response.auth_grant = list(self.auth.sign_refusal(request.auth_proof, response.reason))
        return response

    def _ensure_topics(self, robot_id: str, namespace: str) -> None:
        ns = "/" + namespace.strip("/") if namespace.strip("/") else ""
        with self._pub_lock:
            if ns not in self._robots:
                chunk_pub = self.create_publisher(ActionChunk, robot_topic(ns, ACTION_CHUNK_TOPIC),
                                                  reliable_qos())
                refresh_pub = self.create_publisher(UInt64, robot_topic(ns, REFRESH_TOPIC), reliable_qos())
                sub = self.create_subscription(Observation, robot_topic(ns, OBSERVATION_TOPIC),
                                               lambda m, ns=ns: self._on_observation(m, ns), reliable_qos())
                self._robots[ns] = (sub, chunk_pub, refresh_pub)
                self._owner_by_ns[ns] = robot_id
            self._pubs_by_robot[robot_id] = self._robots[ns]
            self._ns_by_robot[robot_id] = ns
            new_robot = robot_id not in self._diag_robots
            self._diag_robots.add(robot_id)
        if getattr(self, "language", None) is not None:
            self.language.ensure_topics(robot_id, namespace)
        if new_robot:
            self.view.track(robot_id)
            self.updater.add(MetricsTask(robot_id, lambda rid=robot_id: self._robot_metrics(rid),
                                         self.monitoring.thresholds,
                                         ok_message=lambda rid=robot_id: self._robot_ok_message(rid)))

    def _on_observation(self, msg: Observation, ns: str) -> None:
        # The topic says who sent it: a message on /robot_0/observation claiming another robot
        # would be served (and answered) as that robot, so it is refused here. There is no
        # trustworthy address to answer on; it is counted against the topic's robot and logged.
        with self._pub_lock:
            claimed_ns = self._ns_by_robot.get(msg.robot_id)
            owner = self._owner_by_ns.get(ns, ns)
        if claimed_ns != ns:
            self._refuse_input(owner, "robot_id_mismatch",
                               f"observation on {robot_topic(ns, OBSERVATION_TOPIC)} claims robot {msg.robot_id[:64]!r}"
                               + (f" (served on {claimed_ns})" if claimed_ns is not None else " (unknown)"))
            return
        if self.auth is not None and not self._authentic(msg, owner):
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
        for chunk in self._runner.submit(obs):  # and dispatched at once when an instance is idle
            self._publish(chunk)

    def _authentic(self, msg: Observation, owner: str) -> bool:
        try:
            self.auth.check_observation(msg.robot_id, digest(msg), msg.auth)
            return True
        except AuthError as e:
            if e.reason == "no_session" and self.core.registration(msg.robot_id) is None:
                # Not registered here at all (this server restarted): the core answers with a
                # signed REFUSED "not registered", which makes the client register again.
                return True
            self._refuse_input(owner, f"unauthenticated_{e.reason}", str(e))
            return False

    def _refuse_input(self, owner: str, reason: str, detail: str) -> None:
        self.input_refusals.add(owner, reason, detail, time.time())
        self.get_logger().warning(f"refused observation on {owner!r}'s topic ({reason}): {detail}",
                                  throttle_duration_sec=1.0)

    def _publish(self, chunk) -> None:
        with self._pub_lock:
            pubs = self._pubs_by_robot.get(chunk.robot_id)
        if pubs is None:
            # Unknown robot: nowhere to answer on; the refusal is still counted by the core.
            return
        try:
            msg = chunk_to_msg(chunk)
            with self._sign_lock:
                if self.auth is not None:
                    msg.auth = self.auth.sign(CHUNK, digest(msg))
                pubs[1].publish(msg)
            self.view.on_chunk(chunk.robot_id, int(chunk.status), chunk.stamp, queue_ms=float(chunk.queue_ms))
        except Exception as e:  # shutting down (context gone) or a broken message
            if not self._stop.is_set():
                self.get_logger().error(f"publishing a chunk for {chunk.robot_id} failed: {e}")

    # ---- inference: serving.runner's threads call these -----------------------------------

    def _publish_chunks(self, chunks) -> None:
        for chunk in chunks:
            self._publish(chunk)

    def _publish_texts(self, texts) -> None:
        if self.language is not None and not self._stop.is_set():
            self.language.publish(texts)

    def _publish_refresh(self, robot_id: str, round_id: int) -> None:
        with self._pub_lock:
            pubs = self._pubs_by_robot.get(robot_id)
        if pubs is not None and not self._stop.is_set():
            pubs[2].publish(UInt64(data=int(round_id)))

    # ---- monitoring -----------------------------------------------------------------------

    def _setup_monitoring(self, fleet_file: str | None) -> None:
        self.monitoring = load_monitoring(fleet_file)
        self._owner_by_ns: dict[str, str] = {}  # namespace -> robot id answering there
        self._ns_by_robot: dict[str, str] = {}
        self._diag_robots: set[str] = set()
        self.registration_refusals = RefusalLog(max_ids=32)
        self.input_refusals = RefusalLog(max_ids=32)
        slo = {r.id: float(r.task.slo_ms) for r in self.fleet.robots}
        tasks = {name: float(t.slo_ms) for name, t in self.fleet.tasks.items()}

        def slo_ms(rid: str):
            reg = self.core.registration(rid)
            return tasks.get(reg.task_id) if reg is not None and reg.task_id in tasks else slo.get(rid)
        self.view = ServerView(self.monitoring.window_s, slo_ms)
        self._diag_cache: tuple[float, dict] = (-1.0, {})
        self.updater = Updater(self, period=self.monitoring.diagnostics_period_s)
        self.updater.setHardwareID(str(self.core.instance_id))
        self.metrics = MetricsPublisher(self, period_s=self.monitoring.metrics_period_s)
        self.updater.add(MetricsTask("fleet", self._fleet_metrics, self.monitoring.thresholds,
                                     ok_message=lambda: f"{self.core.registered_robots()} robot(s) registered"))
        for iid in self.core.engines:
            self.updater.add(f"engine {iid}", lambda stat, iid=iid: self._engine_status(stat, iid))
        self.updater.add("model", self._model_status)
        reg_health = RefusalHealth(self.registration_refusals, "registration(s)")
        self.updater.add("registrations", reg_health.run)
        input_health = RefusalHealth(self.input_refusals,
                                     "observation(s) with a wrong robot_id, unreadable or unauthenticated")
        self.updater.add("inputs", input_health.run)
        self.updater.add("security", security_diagnostics(self.security, self._auth_refusals))

    def _auth_refusals(self) -> dict:
        out: dict = {}
        for log in (self.registration_refusals, self.input_refusals):
            for snap in log.snapshot().values():
                for reason, n in snap.by_reason.items():
                    if reason.startswith("unauthenticated_"):
                        out[reason] = out.get(reason, 0) + n
        return out

    def _core_diagnostics(self) -> dict:
        # One core snapshot per update, shared by every robot's task.
        now = time.monotonic()
        at, diag = self._diag_cache
        if now - at > 0.5 * self.monitoring.diagnostics_period_s:
            diag = self.core.diagnostics()
            self._diag_cache = (now, diag)
        return diag

    def _robot_metrics(self, rid: str) -> dict:
        core = dict(self._core_diagnostics().get(rid) or {"registered": False})
        snap = self.input_refusals.snapshot().get(rid)
        if snap is not None:  # refusals the node made before the core saw the message
            refused = dict(core.get("refused") or {})
            for reason, n in snap.by_reason.items():
                refused[reason] = refused.get(reason, 0) + n
            core["refused"] = refused
            core["refused_total"] = sum(refused.values())
        m = self.view.robot_metrics(rid, core)
        if self.language is not None:
            m.update(self.language.robot_metrics(rid))
        for key in ("latency_ms_p50", "latency_ms_p99", "slo_meet_rate", "wait_ratio", "rounds", "refused_total",
                    "errors", "queue_ms_p50", "inference_ms_p50"):
            if isinstance(m.get(key), (int, float)):
                self.metrics.set(rid, key, m[key])
        return m

    def _robot_ok_message(self, rid: str) -> str:
        d = self._core_diagnostics().get(rid) or {}
        if not d.get("registered"):
            return "not registered"
        return f"{d.get('rounds', 0)} rounds, {d.get('refused_total', 0)} refused"

    def _fleet_metrics(self) -> dict:
        diag = self._core_diagnostics()
        m = {
            "queue_depth": self.core.pending(),
            "robots_registered": self.core.registered_robots(),
            "rounds_total": sum(d.get("rounds", 0) for d in diag.values()),
            "refused_total": sum(d.get("refused_total", 0) for d in diag.values()) + self.input_refusals.total,
            "registration_refusals": self.registration_refusals.total,
            "engines_alive": sum(1 for d in self.core.engine_diagnostics().values() if d.get("alive")),
        }
        for key, value in m.items():
            self.metrics.set(None, key, value)
        return m

    def _model_status(self, stat):
        """The checkpoint's format decision and where its normalisation statistics came from."""
        m = self.fleet.server.model
        fmt = self.model_format
        stat.summary(level_byte(OK), f"{fmt.policy_type} checkpoint, {fmt.family}" if fmt is not None
                     else f"preset {m.preset} (random weights, seed {m.seed})")
        for k, v in {**(fmt.as_status() if fmt is not None else {}),
                     **self.core.action_runner.normalizer.describe()}.items():
            stat.add(k, v)
        return stat

    def _engine_status(self, stat, iid: str):
        d = self.core.engine_diagnostics().get(iid, {})
        alive = bool(d.get("alive"))
        stat.summary(level_byte(OK if alive else ERROR),
                     "alive" if alive else f"not alive: {d.get('why_not_alive', '')}")
        for k, v in d.items():
            stat.add(k, str(v))
        return stat

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
            self._runner.stop(timeout=max(0.0, end - time.monotonic()))
            if self.factory is not None:  # a rescheduling proposal still solving (seconds at most)
                self.factory.wait_for_proposals(max(0.0, end - time.monotonic()))


def main(argv: list[str] | None = None) -> int:
    # run_node: clean exit on SIGINT and SIGTERM (spin_once loop; see physai_ros.ros.spin).
    return run_node(PolicyServerNode, argv)


if __name__ == "__main__":
    raise SystemExit(main())
