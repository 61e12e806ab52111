"""A ComponentBackend whose model runs on an engine worker (docs/factory.md): the VLM
components a factory plan places on a remote instance are asked there over DDS.

Each question goes out on /engine_workers/<id>/component_query, signed by the server
(WORKER_COMPONENT_QUERY), and its answer comes back on .../component_answer, signed by the worker
(WORKER_COMPONENT_ANSWER; an answer without the worker's signature is dropped and counted). The
proxy's own query ids match answers to questions; a question unanswered within timeout_s is
answered with that reason, so the component service's worker never waits for good. The node's
executor delivers the answers while the service's thread waits in answer().
"""
from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from typing import Any, Sequence

from physai_ros_interfaces.msg import ComponentAnswer, ComponentQuery

from physai_ros.pipeline.backend import ComponentAnswer as BackendAnswer
from physai_ros.protocol.component import BACKEND_ERROR, ComponentRequest
from physai_ros.protocol.topics import component_request_topic, component_result_topic
from physai_ros.ros.codecs.component import answer_from_msg, query_to_msg
from physai_ros.ros.message_digest import digest
from physai_ros.ros.qos import reliable_qos
from physai_ros.security.endpoints import WORKER_COMPONENT_ANSWER, WORKER_COMPONENT_QUERY
from physai_ros.security.handshake import AuthError


class RemoteComponentBackend:
    def __init__(self, node: Any, instance_id: str, auth: Any = None, timeout_s: float = 30.0,
                 engine: Any = None):
        """engine: the server's RemoteEngine proxy of the same worker (its heartbeat): while the
        worker is not alive (starting, measuring its profile, lost) questions are answered at
        once with the reason instead of waiting timeout_s each."""
        self.name = f"remote@{instance_id}"
        self.instance_id, self.timeout_s = instance_id, float(timeout_s)
        self._engine = engine
        self.not_alive = 0  # questions answered "not alive" without asking
        self._auth = auth
        self._verifier = auth.worker(instance_id) if auth is not None else None
        self._pub = node.create_publisher(ComponentQuery, component_request_topic(instance_id), reliable_qos(50))
        self._sub = node.create_subscription(ComponentAnswer, component_result_topic(instance_id), self._on_answer,
                                             reliable_qos(50))
        self._ids = itertools.count(1)
        self._answers: dict[int, Any] = {}  # our query id -> its answer (None while waiting)
        self._cv = threading.Condition()
        self._sign_lock = threading.Lock()
        self.refused: Counter = Counter()  # answers dropped, by reason (unsigned, unknown id)
        self.timeouts = 0

    def answer(self, queries: Sequence[Any]) -> list[BackendAnswer]:
        if self._engine is not None and not self._engine.alive:
            self.not_alive += len(queries)
            why = self._engine.why_not_alive()
            return [BackendAnswer(error=f"not_alive: engine worker {self.instance_id}: {why}") for _ in queries]
        ids = []
        for q in queries:
            qid = next(self._ids)
            msg = query_to_msg(ComponentRequest(query_id=qid, task_id="", query=q, stamp=time.time()))
            with self._cv:
                self._answers[qid] = None
            with self._sign_lock:
                if self._auth is not None:
                    msg.auth = self._auth.sign(WORKER_COMPONENT_QUERY, digest(msg))
                self._pub.publish(msg)
            ids.append(qid)
        end = time.monotonic() + self.timeout_s
        with self._cv:
            self._cv.wait_for(lambda: all(self._answers[i] is not None for i in ids), max(0.0, end - time.monotonic()))
            got = [self._answers.pop(i) for i in ids]
        out = []
        for a in got:
            if a is None:
                self.timeouts += 1
                out.append(BackendAnswer(error=f"timeout: engine worker {self.instance_id} did not answer "
                                               f"within {self.timeout_s:g} s"))
                continue
            err = a.error[len(BACKEND_ERROR) + 2:] if a.error.startswith(BACKEND_ERROR + ": ") else a.error
            out.append(BackendAnswer(text=a.text, error=err, tokens=a.tokens, latency_ms=a.latency_ms,
                                     meta={"path": a.backend}))
        return out

    def _on_answer(self, msg: ComponentAnswer) -> None:
        if self._verifier is not None:
            try:
                self._verifier.check(WORKER_COMPONENT_ANSWER, digest(msg), msg.auth)
            except AuthError as e:
                self.refused[e.refusal_reason] += 1
                return
        a = answer_from_msg(msg)
        with self._cv:
            if self._answers.get(a.query_id, 0) is not None:  # not asked, or answered already
                self.refused["unknown_query"] += 1
                return
            self._answers[a.query_id] = a
            self._cv.notify_all()

    def forget(self, robot_id: str) -> None:
        pass  # the worker keeps nothing per robot (own prefill for every question)

    def close(self) -> None:
        with self._cv:
            self._cv.notify_all()
