"""The policy server's pipeline components on ROS 2: a thin adapter over
physai_ros.serving.pipeline.service, mounted by policy_server when a task of fleet.yaml has a
pipeline with System 2, safety or monitor (docs/pipelines.md "Serving the components").

  sub      /<ns>/component_query    (ComponentQuery, reliable): a robot client's question to one of
           its task's components; with authentication on it carries the robot's session tag
           (domain "component_query", RobotAuth.tag_component_query), checked like observations
  pub      /<ns>/component_answer   (ComponentAnswer, reliable): the answer or the refusal
           ("<reason>: <detail>"), same query_id; signed by the server (domain
           "component_answer", RobotAuth.check_component_answer on the robot)
A query on /<ns>/component_query claiming another robot's id, or failing authentication, is
counted and dropped unanswered (there is no trustworthy address to answer on), as observations are.
/diagnostics: "policy_server: pipeline" (asked, answered, refused by reason, backend errors,
latency p50/p99 per component, queue depth, batches per backend).
"""
from __future__ import annotations

import time

from physai_ros_interfaces.msg import ComponentAnswer, ComponentQuery

from physai_ros.monitoring.diagnostics import OK, WARN, level_byte
from physai_ros.protocol.component import (COMPONENT_ANSWER_TOPIC, COMPONENT_QUERY_TOPIC, ROBOT_ID_MISMATCH,
                                           UNREADABLE)
from physai_ros.ros.codecs.component import answer_to_msg, query_from_msg
from physai_ros.ros.message_digest import digest
from physai_ros.ros.qos import reliable_qos
from physai_ros.ros.remote_components import RemoteComponentBackend
from physai_ros.security.endpoints import COMPONENT_ANSWER
from physai_ros.serving.pipeline.backends import load_backends
from physai_ros.serving.pipeline.service import ComponentService, ComponentServiceSettings


def serves_components(fleet) -> bool:
    """A task's pipeline has a component the server answers (System 2, safety, monitor)."""
    return any(t.pipeline is not None and t.pipeline.vlm_components for t in fleet.tasks.values())


class PolicyServerPipeline:
    def __init__(self, node, fleet, core, backends=None):
        self.node, self.core, self.router = node, core, node.router
        self.input_refusals = node.report.input_refusals  # the server's "inputs" and "security" statuses
        self.published = 0
        self._with_topics: set[str] = set()  # robots whose query and answer topics exist
        c = fleet.server.components
        if backends is None:  # components a factory plan puts on an engine worker are asked there
            backends = load_backends(fleet, core, remote=lambda iid: RemoteComponentBackend(
                node, iid, auth=node.router.auth, engine=core.engines[iid].engine))
        self.service = ComponentService(fleet, core, self.publish, backends=backends,
                                        settings=ComponentServiceSettings(
                                            max_queue=c.max_queue, max_batch=c.max_batch, order=c.order,
                                            max_question_chars=c.max_question_chars,
                                            max_answer_tokens=c.max_answer_tokens,
                                            kv_budget_mb=c.kv_budget_mb, placement=c.placement))
        for r in fleet.robots:  # known robots: topics now, so discovery is done before queries flow
            self.ensure_topics(r.id, r.namespace)
        # Robots the fleet file does not list get theirs once registered.
        node.create_timer(0.5, self._track_registrations)
        node.updater.add("pipeline", self._diagnose)
        routes = "; ".join(f"{t}.{c}: {k}" for (t, c), k in sorted(self.service.routes.items()))
        node.get_logger().info(f"pipeline components served on /<ns>/{COMPONENT_QUERY_TOPIC}: {routes}")

    @classmethod
    def maybe(cls, node, fleet, core) -> "PolicyServerPipeline | None":
        return cls(node, fleet, core) if serves_components(fleet) else None

    # ---- topics -------------------------------------------------------------------------

    def ensure_topics(self, robot_id: str, namespace: str) -> None:
        ns = self.router.bind(robot_id, namespace)
        self.router.subscribe(ns, ComponentQuery, COMPONENT_QUERY_TOPIC, self._on_query, reliable_qos(depth=50))
        self.router.publisher(ns, ComponentAnswer, COMPONENT_ANSWER_TOPIC, reliable_qos(depth=50))
        self._with_topics.add(robot_id)

    def _track_registrations(self) -> None:
        for reg in list(self.core.registry.registrations.values()):
            if reg.robot_id not in self._with_topics:
                self.ensure_topics(reg.robot_id, reg.robot_namespace)

    # ---- queries ----------------------------------------------------------------------

    def _on_query(self, msg: ComponentQuery, ns: str) -> None:
        robot_id, query_id, component = str(msg.robot_id), int(msg.query_id), str(msg.component)
        owner = self.router.owner(ns)
        misclaim = self.router.misclaim(robot_id, ns, COMPONENT_QUERY_TOPIC)
        if misclaim is not None:
            self._drop(owner, query_id, component, ROBOT_ID_MISMATCH, f"query on {misclaim}")
            return
        # Not registered here at all (this server restarted): the service answers unknown_robot,
        # which makes the client register again; a query failing its check otherwise is dropped.
        problem = self.node.desk.session_problem(
            lambda: self.router.auth.check_component_query(robot_id, digest(msg), msg.auth), robot_id)
        if problem is not None:
            self._drop(owner, query_id, component, *problem)
            return
        try:
            req = query_from_msg(msg)
        except Exception as e:  # an image buffer of the wrong size, ...: this query's problem only
            a = self.service.refuse(robot_id, query_id, component, UNREADABLE, f"{type(e).__name__}: {e}")
            self._warn(f"refused component query {query_id} of {robot_id[:64]}: {a.error}")
            return
        refused = self.service.submit(req)
        if refused is not None:
            self._warn(f"refused component query {query_id} of {robot_id[:64]}/{component[:32]}: {refused.error}")

    def _drop(self, owner: str, query_id: int, component: str, reason: str, detail: str) -> None:
        self.service.refuse(owner, query_id, component, reason, detail, answer=False)
        self.input_refusals.add(owner, reason, f"component query: {detail}", time.time())
        self._warn(f"dropped component query ({reason}): {detail}")

    def _warn(self, text: str) -> None:
        self.node.get_logger().warning(text, throttle_duration_sec=1.0)

    # ---- answers (the service's worker thread, or the executor for refusals) ------------

    def publish(self, answers) -> None:
        for a in answers:
            if self.router.publish(a.robot_id, COMPONENT_ANSWER_TOPIC, answer_to_msg(a), COMPONENT_ANSWER):
                self.published += 1

    def _diagnose(self, stat):
        d = self.service.diagnostics()
        bad = d["backend_errors"] + d["delivery_errors"]
        stat.summary(level_byte(WARN if bad else OK),
                     f"{d['answered']} answered of {d['asked']} asked, {d['refused']} refused, "
                     f"{d['backend_errors']} backend error(s), {d['queued']} queued")
        for k, v in d.items():
            stat.add(k, str(v))
        stat.add("published", str(self.published))
        return stat

    def forget(self, robot_id: str) -> None:
        self.service.forget(robot_id)

    def close(self, timeout_s: float) -> bool:
        return self.service.close(timeout_s)
