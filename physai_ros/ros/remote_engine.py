"""RemoteEngine: the server-side stand-in for an engine_worker, with the local engine's API.

ROS glue (it publishes and subscribes through a node): the policy server node builds these and
hands them to serving.startup.engine_builder, which never touches ROS itself.

It has `.config` and `.infer(list[EngineInput]) -> list[EngineOutput]`, so the serving core holds
it in an EngineSlot like a local Pi0Engine. It publishes each batch on the worker's request
topic through a node it is given, and blocks the calling (inference) thread until the result
arrives or the timeout passes. Result and status callbacks run in whatever executor spins that
node, so infer() must not be called from that executor's own thread.

Liveness: the worker's latched status is its heartbeat. The worker is alive while its
heartbeats keep coming (age <= liveness_timeout_s, measured on this host's monotonic clock so
host clocks need not agree), it is ready (profile measured), its model equals ours, and its
request subscription is matched. The server leaves dead workers out of scheduling.

Authentication (`auth`, the server's ServerAuth; None when insecure): requests carry the
server's signature; results and status count only when signed by this worker's key from the
fleet keystore, so a process posing as the worker can neither answer a batch nor advertise a
profile. Refused messages are counted by reason (auth_refused) and otherwise ignored.
"""
from __future__ import annotations

import itertools
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from physai_ros_interfaces.msg import EngineBatchRequest, EngineBatchResult, EngineWorkerStatus

from physai_ros.engine.types import EngineOutput, Pi0Config
from physai_ros.protocol.topics import check_instance_id, request_topic, result_topic, status_topic
from physai_ros.ros.message_digest import digest
from physai_ros.ros.qos import latched_qos, reliable_qos
from physai_ros.scheduler.types import LatencyProfile
from physai_ros.security.endpoints import BATCH_REQUEST, BATCH_RESULT, WORKER_STATUS
from physai_ros.security.handshake import AuthError
from physai_ros.workers.codec import (BadResult, WorkerStatus, config_from_json, decode_result,
                                      decode_status, encode_request)


# How often a waiting infer() checks the worker's heartbeat.
LIVENESS_POLL_S = 0.05


class RemoteEngineError(RuntimeError):
    """The worker answered with an error, or answered something unusable."""


class RemoteEngineTimeout(RemoteEngineError):
    """No result within the timeout (worker dead, overloaded, or unreachable)."""

    # The batch itself was not at fault: the serving core runs its requests again on another
    # instance (ServingCore.run_batch reads this flag; it never imports this module).
    instance_lost = True


class RemoteEngineLost(RemoteEngineTimeout):
    """The worker's heartbeat stopped while a batch was in flight (killed, or its link cut):
    raised as soon as the worker stops being alive, without waiting for the call timeout."""


class RemoteEngineUnavailable(RemoteEngineError):
    """The worker is not alive; nothing was sent."""

    instance_lost = True


@dataclass
class RemoteStats:
    batches: int = 0
    robots: int = 0
    errors: int = 0
    timeouts: int = 0
    lost: int = 0  # batches given up because the worker stopped heartbeating meanwhile
    unavailable: int = 0
    unmatched_results: int = 0  # late (after a timeout) or another server's batch
    bad_status: int = 0
    auth_refused: dict = field(default_factory=dict)  # reason -> results/status not signed by the worker
    last_error: str = ""
    errors_by_kind: dict = field(default_factory=dict)


class _Call:
    __slots__ = ("done", "result")

    def __init__(self):
        self.done = threading.Event()
        self.result: Optional[EngineBatchResult] = None


class RemoteEngine:
    """Proxy for the engine_worker `instance_id`.

    timeout_s: fixed per-call timeout; None derives it from the advertised profile
      (timeout_factor x latency at that batch size + timeout_slack_s), so a slow model does not
      need a hand-tuned number and a fast one still fails fast.
    liveness_timeout_s: None = 3 heartbeat periods (at least 1 s).
    """

    def __init__(self, node: Any, instance_id: str, config: Pi0Config, *,
                 timeout_s: Optional[float] = None, timeout_factor: float = 3.0,
                 timeout_slack_s: float = 2.0, liveness_timeout_s: Optional[float] = None,
                 clock: Callable[[], float] = time.monotonic, auth: Any = None):
        self.instance_id = check_instance_id(instance_id)
        self._auth = auth
        self._worker_auth = auth.worker(instance_id) if auth is not None else None
        self._pub_lock = threading.Lock()  # sign and publish in one step: counters arrive in order
        self.config = config
        self.timeout_s = timeout_s
        self.timeout_factor = timeout_factor
        self.timeout_slack_s = timeout_slack_s
        self._liveness_timeout_s = liveness_timeout_s
        self.clock = clock
        self.stats = RemoteStats()
        self.status: Optional[WorkerStatus] = None
        self.status_error = ""
        self.last_heartbeat: Optional[float] = None  # local monotonic time of the newest status
        self.network_rtt_s = 0.0  # EWMA of round trip minus the worker's own time
        self._prefix = f"{uuid.uuid4().hex[:8]}"
        self._ids = itertools.count(1)
        self._calls: dict[str, _Call] = {}
        self._lock = threading.Lock()
        self._pub = node.create_publisher(EngineBatchRequest, request_topic(instance_id), reliable_qos())
        self._subs = [
            node.create_subscription(EngineBatchResult, result_topic(instance_id), self._on_result,
                                     reliable_qos()),
            node.create_subscription(EngineWorkerStatus, status_topic(instance_id), self._on_status,
                                     latched_qos()),
        ]

    # ---- what the scheduler reads -------------------------------------------------------

    @property
    def profile(self) -> Optional[LatencyProfile]:
        st = self.status
        return st.profile if st is not None else None

    @property
    def max_batch(self) -> Optional[int]:
        st = self.status
        return st.max_batch if st is not None else None

    @property
    def tier(self) -> Optional[str]:
        st = self.status
        return st.tier if st is not None else None

    @property
    def liveness_timeout_s(self) -> float:
        if self._liveness_timeout_s is not None:
            return self._liveness_timeout_s
        period = self.status.heartbeat_period_s if self.status is not None else 0.5
        return max(1.0, 3.0 * period)

    def heartbeat_age(self) -> Optional[float]:
        return None if self.last_heartbeat is None else self.clock() - self.last_heartbeat

    def why_not_alive(self) -> str:
        """'' when alive, else the reason (for diagnostics and error messages)."""
        if self.status is None:
            return self.status_error or "no status received from the worker yet"
        if self.status_error:
            return self.status_error
        age = self.heartbeat_age()
        if age is None or age > self.liveness_timeout_s:
            return f"last heartbeat {age:.1f} s ago (limit {self.liveness_timeout_s:.1f} s)"
        if not self.status.ready:
            return "worker is starting (measuring its latency profile)"
        if self._pub.get_subscription_count() == 0:
            return "worker's request subscription not matched yet"
        return ""

    @property
    def alive(self) -> bool:
        return self.why_not_alive() == ""

    def call_timeout(self, batch: int) -> float:
        if self.timeout_s is not None:
            return self.timeout_s
        prof = self.profile
        est = prof.latency(batch) if prof is not None else 0.0
        return self.timeout_factor * est + self.timeout_slack_s

    # ---- the engine API -----------------------------------------------------------------

    def infer(self, batch: list) -> list[EngineOutput]:
        """Run a batch on the worker. Raises EngineInputError (bad input, nothing sent, as the
        local engine would), RemoteEngineUnavailable, RemoteEngineTimeout or RemoteEngineError."""
        batch_id = f"{self._prefix}-{next(self._ids)}"
        msg = encode_request(batch, self.config, batch_id, self.instance_id)
        reason = self.why_not_alive()
        if reason:
            self._count("unavailable", reason)
            raise RemoteEngineUnavailable(f"engine worker {self.instance_id} not alive: {reason}")
        call = _Call()
        timeout = self.call_timeout(len(batch))
        with self._lock:
            self._calls[batch_id] = call
        t0 = self.clock()
        try:
            with self._pub_lock:
                if self._auth is not None:
                    msg.auth = self._auth.sign(BATCH_REQUEST, digest(msg))
                self._pub.publish(msg)
            self._await(call, batch_id, t0, timeout)
        finally:
            with self._lock:
                self._calls.pop(batch_id, None)
        res = call.result
        rtt = self.clock() - t0
        if res.status != EngineBatchResult.STATUS_OK:
            self._count("worker_error", res.error)
            raise RemoteEngineError(f"engine worker {self.instance_id}: {res.error}")
        try:
            outputs = decode_result(res, self.config, len(batch))
        except BadResult as e:
            self._count("bad_result", str(e))
            raise RemoteEngineError(f"engine worker {self.instance_id}: unusable result: {e}") from e
        worker_s = (res.queue_ms + res.total_ms) / 1e3
        self.network_rtt_s = 0.8 * self.network_rtt_s + 0.2 * max(0.0, rtt - worker_s)
        for o in outputs:
            o.timings_ms["roundtrip_ms"] = rtt * 1e3
        with self._lock:
            self.stats.batches += 1
            self.stats.robots += len(batch)
        return outputs

    def _await(self, call: _Call, batch_id: str, t0: float, timeout: float) -> None:
        """Wait for the result; give up at the timeout, or earlier once the worker is no longer
        alive: a dead or cut-off worker then costs its in-flight requests one liveness timeout
        (about a second) instead of the whole call timeout before they run elsewhere."""
        while not call.done.wait(min(LIVENESS_POLL_S, max(0.0, t0 + timeout - self.clock()))):
            age = self.heartbeat_age()
            if self.clock() - t0 >= timeout:
                self._count("timeout", f"no result for batch {batch_id} within {timeout:.2f} s")
                raise RemoteEngineTimeout(
                    f"engine worker {self.instance_id}: no result for batch {batch_id} within "
                    f"{timeout:.2f} s (last heartbeat {age:.1f} s ago)")
            if age is not None and age > self.liveness_timeout_s:
                self._count("lost", f"heartbeat stopped while batch {batch_id} was in flight")
                raise RemoteEngineLost(
                    f"engine worker {self.instance_id}: lost while batch {batch_id} was in flight "
                    f"(last heartbeat {age:.1f} s ago, limit {self.liveness_timeout_s:.1f} s)")

    def _count(self, kind: str, msg: str) -> None:
        with self._lock:
            s = self.stats
            if kind == "timeout":
                s.timeouts += 1
            elif kind == "lost":
                s.lost += 1
            elif kind == "unavailable":
                s.unavailable += 1
            else:
                s.errors += 1
            s.errors_by_kind[kind] = s.errors_by_kind.get(kind, 0) + 1
            s.last_error = msg

    # ---- callbacks (executor thread) ----------------------------------------------------

    def _authentic(self, domain: bytes, msg) -> bool:
        if self._worker_auth is None:
            return True
        try:
            self._worker_auth.check(domain, digest(msg), msg.auth)
            return True
        except AuthError as e:
            with self._lock:
                self.stats.auth_refused[e.reason] = self.stats.auth_refused.get(e.reason, 0) + 1
                self.stats.last_error = f"refused {domain.decode()}: {e}"
            return False

    def _on_result(self, msg: EngineBatchResult) -> None:
        if not self._authentic(BATCH_RESULT, msg):
            return
        with self._lock:
            call = self._calls.get(msg.batch_id)
            if call is None:
                self.stats.unmatched_results += 1
                return
        call.result = msg
        call.done.set()

    def _on_status(self, msg: EngineWorkerStatus) -> None:
        if not self._authentic(WORKER_STATUS, msg):
            return
        try:
            st = decode_status(msg)
            if st.instance_id != self.instance_id:
                raise ValueError(f"instance_id: expected {self.instance_id!r}, got {st.instance_id!r}")
            theirs = config_from_json(st.model_config)
            if theirs != self.config:
                raise ValueError("model_config: the worker runs a different model than this server "
                                 f"(worker {st.model or '?'})")
        except ValueError as e:
            with self._lock:
                self.stats.bad_status += 1
                self.status_error = f"unusable worker status: {e}"
                self.last_heartbeat = self.clock()
            return
        with self._lock:
            self.status, self.status_error = st, ""
            self.last_heartbeat = self.clock()

    def diagnostics(self) -> dict:
        st = self.status
        age = self.heartbeat_age()
        return {
            "alive": self.alive, "why_not_alive": self.why_not_alive(),
            "heartbeat_age_s": round(age, 3) if age is not None else None,
            "tier": st.tier if st else "", "max_batch": st.max_batch if st else 0,
            "profile": st.profile.to_pairs() if st and st.profile else [],
            "worker_batches": st.batches_served if st else 0,
            "worker_errors": st.errors if st else 0,
            "batches": self.stats.batches, "timeouts": self.stats.timeouts, "lost": self.stats.lost,
            "errors": self.stats.errors, "unavailable": self.stats.unavailable,
            "unmatched_results": self.stats.unmatched_results, "auth_refused": dict(self.stats.auth_refused),
            "network_rtt_ms": round(self.network_rtt_s * 1e3, 3),
        }


def remote_engines_on(node: Any) -> Callable[[Any, Pi0Config], "RemoteEngine"]:
    """serving.startup.engine_builder's remote-engine factory: proxies for fleet.yaml's server.remote_engines
    entries that publish and subscribe through `node` (the policy server's, whose executor
    delivers their results while an instance thread waits in infer())."""
    def make(entry: Any, model: Pi0Config) -> RemoteEngine:
        return RemoteEngine(node, entry.instance_id, model, timeout_s=entry.timeout_s,
                            liveness_timeout_s=entry.liveness_timeout_s, auth=getattr(node, "auth", None))

    return make
