"""engine_worker: one pi0 engine instance serving a policy server over ROS 2.

ROS I/O only; the logic is physai_ros.workers.engine_worker.WorkerCore.
  sub  /engine_workers/<instance_id>/batch_request  (EngineBatchRequest, reliable)
  pub  /engine_workers/<instance_id>/batch_result   (EngineBatchResult, reliable)
  pub  /engine_workers/<instance_id>/status         (EngineWorkerStatus, latched, every
                                                     heartbeat_period_s: the heartbeat)
Parameters: instance_id (worker_0), tier (edge|cloud), preset (tiny) or checkpoint (a LeRobot
checkpoint directory; wins when set), seed (0: random weights for a preset), device (cpu|cuda),
max_batch (8), heartbeat_period_s (0.5), profile_reps (3), profile_views (2), profile_tokens (32),
queue_limit (16), torch_threads (0: torch's default; N: the server's server.torch_threads), fleet_file,
keystore, insecure, components
(false; true: also answer the pipeline components' questions a factory plan sends here, on
/engine_workers/<instance_id>/component_query -> component_answer, with the fleet file's tokenizer)
(physai_ros.ros.node_security: requests must carry the server's signature; results and status
are signed with this worker's key, identity worker/<instance_id>).
At start-up the worker measures its latency-vs-batch profile (batch 1..max_batch) and
advertises it; requests that arrive meanwhile wait in the queue. Inference runs in its own
thread so heartbeats keep flowing during a long batch.
"""
from __future__ import annotations

import queue
import sys
import threading
import time

from physai_ros_interfaces.msg import (ComponentAnswer, ComponentQuery, EngineBatchRequest, EngineBatchResult,
                                       EngineWorkerStatus)
from rclpy.node import Node

from physai_ros.protocol.component import BAD_IMAGES, BUSY, ComponentRequest, refusal
from physai_ros.protocol.topics import (component_request_topic, component_result_topic, request_topic, result_topic,
                                        status_topic)
from physai_ros.ros.codecs.component import answer_to_msg, query_from_msg
from physai_ros.ros.message_digest import digest
from physai_ros.ros.node_security import node_security, open_endpoint
from physai_ros.ros.qos import latched_qos, reliable_qos
from physai_ros.ros.spin import run_node
from physai_ros.security.endpoints import BATCH_RESULT, WORKER_COMPONENT_ANSWER, WORKER_STATUS, WorkerAuth
from physai_ros.security.handshake import AuthError
from physai_ros.security.keystore import Identity
from physai_ros.security.message_auth import RefusalLog
from physai_ros.serving.compute_threads import build_for, serving_threads, use_threads
from physai_ros.workers.codec import encode_status
from physai_ros.workers.engine_worker import WorkerCore, build_engine


class EngineWorkerNode(Node):
    def __init__(self):
        super().__init__("engine_worker")
        p = {name: self.declare_parameter(name, default).value for name, default in (
            ("instance_id", "worker_0"), ("tier", "edge"), ("preset", "tiny"), ("checkpoint", ""),
            ("seed", 0), ("device", "cpu"), ("max_batch", 8), ("heartbeat_period_s", 0.5),
            ("profile_reps", 3), ("profile_views", 2), ("profile_tokens", 32), ("queue_limit", 16),
            ("torch_threads", 0), ("fleet_file", ""), ("components", False))}
        sec, base = node_security(self)
        iid = p["instance_id"]
        self.auth = open_endpoint(self, sec, base, [sec.server, Identity("worker", iid)],
                                  lambda ks: WorkerAuth(ks, iid, sec.server))
        self.auth_refusals = RefusalLog(self.get_logger().warning)
        self._pub_lock = threading.Lock()  # sign and publish in one step (results, status)
        # torch_threads N >= 1: the engine computes on the worker thread alone, N threads, built on
        # a thread that ends (as the server's server.torch_threads; serving.compute_threads). 0: as
        # torch sets it up, built here.
        self._torch_threads = int(p["torch_threads"]) if p["torch_threads"] > 0 else None
        engine, model = build_for(self._torch_threads, lambda: build_engine(
            p["preset"], p["checkpoint"], int(p["seed"]), p["device"], log=self.get_logger().info,
            language=bool(p["components"])))
        # The worker thread sets its count itself (as the server's serving threads do).
        self._serve_threads = serving_threads(self._torch_threads)
        self.core = WorkerCore(engine, p["instance_id"], p["tier"], int(p["max_batch"]), model,
                               float(p["heartbeat_period_s"]))
        self._profile_args = (int(p["profile_reps"]), int(p["profile_views"]), int(p["profile_tokens"]))
        iid = self.core.instance_id
        self._queue: queue.Queue = queue.Queue(maxsize=int(p["queue_limit"]))
        self._result_pub = self.create_publisher(EngineBatchResult, result_topic(iid), reliable_qos())
        self._status_pub = self.create_publisher(EngineWorkerStatus, status_topic(iid), latched_qos())
        self.create_subscription(EngineBatchRequest, request_topic(iid), self._on_request, reliable_qos(50))
        # A factory plan's VLM components on this worker (docs/factory.md): its questions share
        # the queue, and so the engine, with the System 1 batches.
        self.components = None
        if p["components"]:
            from physai_ros.serving.pipeline.on_worker import WorkerComponents

            self.components = WorkerComponents(engine, p["fleet_file"], iid)
            self._answer_pub = self.create_publisher(ComponentAnswer, component_result_topic(iid), reliable_qos(50))
            self.create_subscription(ComponentQuery, component_request_topic(iid), self._on_component, reliable_qos(50))
        self.create_timer(self.core.heartbeat_period_s, self._publish_status)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._work, name="engine_worker_infer", daemon=True)
        self._thread.start()
        self._publish_status()
        self.get_logger().info(f"engine worker {iid} ({p['tier']}, {model}, max_batch "
                               f"{p['max_batch']}): measuring the latency profile")

    def _on_request(self, msg: EngineBatchRequest) -> None:
        if self.auth is not None:
            try:
                self.auth.check_request(digest(msg), msg.auth)
            except AuthError as e:  # not from the fleet's server: not run, not answered
                self.auth_refusals.refused(f"batch {msg.batch_id[:64]!r}", e)
                n = sum(self.auth_refusals.counts.values())
                self.core.last_error = f"refused {n} unauthenticated request(s), last: {e}"
                return
        try:
            self._queue.put_nowait((msg, time.monotonic()))
        except queue.Full:
            self._publish(self.core.refuse(msg.batch_id, f"worker queue full ({self._queue.maxsize} batches)"))
        self.core.queue_depth = self._queue.qsize()

    def _on_component(self, msg: ComponentQuery) -> None:
        if self.auth is not None:
            try:
                self.auth.check_component_request(digest(msg), msg.auth)
            except AuthError as e:  # not the fleet's server's: not answered
                self.auth_refusals.refused(f"component query {msg.query_id}", e)
                return
        try:
            req = query_from_msg(msg)
        except ValueError as e:
            return self._publish_answers([refusal(str(msg.robot_id)[:64], int(msg.query_id), str(msg.component)[:32],
                                                  BAD_IMAGES, str(e), stamp=time.time())])
        try:
            self._queue.put_nowait((req, time.monotonic()))
        except queue.Full:
            self._publish_answers([refusal(req.robot_id, req.query_id, req.component, BUSY,
                                           f"worker queue full ({self._queue.maxsize})", stamp=time.time())])

    def _publish_answers(self, answers) -> None:
        for a in answers:
            self._send(self._answer_pub, lambda a=a: answer_to_msg(a), WORKER_COMPONENT_ANSWER,
                       f"component answer {a.query_id}")

    def _work(self) -> None:
        use_threads(self._serve_threads)
        try:
            prof = self.core.measure(*self._profile_args)
            self.get_logger().info("profile (batch, ms): " + ", ".join(
                f"{b}:{t * 1e3:.1f}" for b, t in zip(prof.batch_sizes, prof.latencies_s)))
        except Exception as e:  # no profile: stay STARTING (not alive for the server) and say why
            self.core.last_error = f"profile measurement failed: {type(e).__name__}: {e}"
            self.get_logger().error(self.core.last_error)
            return
        self._publish_status()
        while not self._stop.is_set():
            try:
                msg, received = self._queue.get(timeout=0.1)
            except queue.Empty:
                continue
            if isinstance(msg, ComponentRequest):
                self._publish_answers(self.components.answer([msg]))
                self.core.queue_depth = self._queue.qsize()
                continue
            res = self.core.serve(msg, received)
            self.core.queue_depth = self._queue.qsize()
            if res.status != EngineBatchResult.STATUS_OK:
                self.get_logger().warning(f"batch {res.batch_id!r}: {res.error}")
            self._publish(res)

    def _publish(self, res: EngineBatchResult) -> None:
        self._send(self._result_pub, lambda: self._stamped(res), BATCH_RESULT, f"result {res.batch_id!r}")

    def _publish_status(self) -> None:
        self._send(self._status_pub, lambda: self._stamped(encode_status(self.core.status())), WORKER_STATUS,
                   "status")

    def _stamped(self, msg):
        msg.header.stamp = self.get_clock().now().to_msg()
        return msg

    def _send(self, pub, build, domain: bytes, what: str) -> None:
        """Build, sign (when authenticating) and publish one message; a failure after stop is
        the context shutting down, any other is logged (the worker keeps serving)."""
        try:
            msg = build()
            with self._pub_lock:
                if self.auth is not None:
                    msg.auth = self.auth.signer.sign(domain, digest(msg))
                pub.publish(msg)
        except Exception as e:
            if not self._stop.is_set():
                self.get_logger().error(f"publishing {what} failed: {e}")

    def close(self, timeout_s: float) -> None:
        # A batch (or the start-up profile) in progress is not waited for past the stop budget:
        # run_node exits without the thread.
        self._stop.set()
        self._thread.join(timeout=timeout_s)


def main(args: list[str] | None = None) -> int:
    return run_node(EngineWorkerNode, args)


if __name__ == "__main__":
    sys.exit(main())
