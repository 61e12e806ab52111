"""robot_client's task pipeline on ROS (docs/pipelines.md "Robot side"): the ROS I/O of
client.pipeline.ClientPipeline, attached to a RobotClientNode whose task has a pipeline
(`PipelineIO.for_node` is None otherwise and the node is unchanged). In the robot's namespace:
  pub  component_query (ComponentQuery, reliable): the due queries with the robot's newest camera
       Images (reused as received) and joint positions, tagged with the session MAC when auth is on
  sub  component_answer (ComponentAnswer, reliable): answers; with auth on an answer the server did
       not sign is dropped and counted (auth_refused "component answer"), as a foreign robot's is
  pub  pipeline_event (PipelineEvent, reliable, transient local, depth 100): one message per pipeline
       decision; a subscriber that joins late (physai-fleet's monitor while discovery is still
       going on, an operator's tool) asking for transient local gets the newest 100
  (an operator's signed acknowledge or resume, nodes/robot_client_operator.py, clears the latched
       escalation: the pipeline's and the client's own System 1 stop)
  call reset_episode (ResetEpisode, the sim_robot's): a monitor's "failed" -> the sim's next episode
/diagnostics: "<ns>/robot_client: pipeline", ERROR with the escalation's reason while latched
(published at once when it latches or clears), WARN while held, OK otherwise.
Hold chunks go out through the node's own hold publisher (signed as its SLO holds are).
Parameter pipeline_tick_hz (default 50): how often the controller is stepped.
"""
from __future__ import annotations

from physai_ros_interfaces.msg import ComponentAnswer, ComponentQuery, PipelineEvent
from physai_ros_interfaces.srv import ResetEpisode

from physai_ros.client.pipeline import ClientPipeline, OutgoingQuery, PipelineOutput
from physai_ros.monitoring.diagnostics import ERROR, OK, WARN, level_byte
from physai_ros.pipeline.backend import ComponentQuery as BackendQuery
from physai_ros.protocol.component import COMPONENT_ANSWER_TOPIC, COMPONENT_QUERY_TOPIC, ComponentRequest
from physai_ros.protocol.topics import PIPELINE_EVENT_TOPIC, RESET_EPISODE_SERVICE
from physai_ros.ros.codecs._arrays import safe_time
from physai_ros.ros.codecs.component import answer_from_msg, backend_answer, query_to_msg
from physai_ros.ros.codecs.observation import image_msg
from physai_ros.ros.message_digest import digest
from physai_ros.ros.qos import latched_qos, reliable_qos
from physai_ros.ros.time_conv import now_sec
from physai_ros.security.handshake import AuthError


def query_msg(q: OutgoingQuery) -> ComponentQuery:
    """The robot's camera Images are reused as received (no copy), as in its Observations."""
    query = BackendQuery(robot_id=q.robot_id, component=q.component, question=q.question,
                         task_prompt=q.task_prompt, images=(), state=q.state, max_tokens=q.max_tokens)
    return query_to_msg(ComponentRequest(q.query_id, q.task_id, query, q.stamp),
                        images=[image_msg(im, q.stamp) for im in q.images])


def event_msg(e) -> PipelineEvent:
    msg = PipelineEvent()
    msg.header.stamp = safe_time(e.stamp)
    msg.robot_id, msg.task_id, msg.kind, msg.source = e.robot_id, e.task_id, e.kind, e.source
    msg.reason, msg.text, msg.retry, msg.escalated = e.reason, e.text, int(e.retry), bool(e.escalated)
    return msg


class PipelineIO:
    def __init__(self, node, pipeline: ClientPipeline):
        self.node, self.pipeline = node, pipeline
        self.log = node.get_logger()
        self.query_pub = node.create_publisher(ComponentQuery, COMPONENT_QUERY_TOPIC, reliable_qos(10))
        self.event_pub = node.create_publisher(PipelineEvent, PIPELINE_EVENT_TOPIC, latched_qos(100))
        node.create_subscription(ComponentAnswer, COMPONENT_ANSWER_TOPIC, self._on_answer, reliable_qos(50))
        self.reset_client = node.create_client(ResetEpisode, RESET_EPISODE_SERVICE)
        self.foreign_answers = 0
        self.answers_refused = 0  # auth on: not signed by the server
        self.queries_unsent = 0  # no session yet (auth on): the controller counts the SLO miss
        self.reset_failures = 0
        self._reported = ""
        hz = float(node.declare_parameter("pipeline_tick_hz", 50.0).value)
        node.create_timer(1.0 / hz, self.step)
        node.updater.add("pipeline", self._diagnostics)

    @classmethod
    def for_node(cls, node) -> "PipelineIO | None":
        io: list[PipelineIO] = []
        pipeline = ClientPipeline.for_robot(node.core, lambda reason: io[0].request_reset(reason))
        if pipeline is None:
            return None
        io.append(cls(node, pipeline))
        return io[0]

    # ---- driving ---------------------------------------------------------------------------

    def step(self) -> None:
        self.publish(self.pipeline.step(now_sec(self.node)))

    def on_chunk_taken(self) -> None:
        self.pipeline.on_chunk_taken(now_sec(self.node))

    def _on_answer(self, msg: ComponentAnswer) -> None:
        if msg.robot_id != self.node.robot.id:
            self.foreign_answers += 1
            return
        if self.node.auth is not None:
            try:
                self.node.auth.check_component_answer(digest(msg), msg.auth)
            except AuthError as e:  # not the server's: counted, logged once per burst, ignored
                self.answers_refused += 1
                self.node.auth_refusals.refused(f"component answer {msg.query_id}", e)
                return
        answer = backend_answer(answer_from_msg(msg))
        self.publish(self.pipeline.on_answer(int(msg.query_id), answer, now_sec(self.node)))

    def acknowledge(self, note: str = "") -> tuple[bool, str, str]:
        ack = self.pipeline.acknowledge(now_sec(self.node))
        if ack.accepted:
            self.log.warning(f"escalation acknowledged{f' ({note})' if note else ''}: {ack.cleared}")
        self.publish(ack.output)
        return ack.accepted, ack.reason, ack.cleared

    def request_reset(self, reason: str) -> None:
        """A monitor's "failed": the sim robot's next episode (asynchronous; a robot without the
        service is logged and counted)."""
        if not self.reset_client.service_is_ready():
            self.reset_failures += 1
            self.log.error(f"episode reset wanted ({reason}) but {RESET_EPISODE_SERVICE} is not available")
            return
        fut = self.reset_client.call_async(ResetEpisode.Request(reason=reason))
        fut.add_done_callback(self._on_reset_done)

    def _on_reset_done(self, fut) -> None:
        try:
            resp = fut.result()
        except Exception:
            resp = None
        if resp is None or not resp.accepted:
            self.reset_failures += 1
            self.log.error(f"episode reset refused: {resp.reason_refused if resp is not None else 'no answer'}")
        else:
            self.log.info(f"episode reset: episode {resp.episode} next")

    # ---- output ----------------------------------------------------------------------------

    def publish(self, out: PipelineOutput) -> None:
        for h in out.holds:  # first: a safety stop reaches the controller before anything else
            self.node.publish_hold(h, "pipeline hold")
        for q in out.queries:
            msg = query_msg(q)
            if self.node.auth is not None:
                try:
                    msg.auth = self.node.auth.tag_component_query(digest(msg))
                except AuthError as e:  # no session yet: unsent, the controller counts the miss
                    self.queries_unsent += 1
                    self.node.auth_refusals.refused(f"sending component query {q.query_id}", e)
                    continue
            self.query_pub.publish(msg)
        for e in out.events:
            self.event_pub.publish(event_msg(e))
            line = f"pipeline {e.kind} ({e.source or '-'}): {e.reason or e.text}"
            if e.kind == "escalate":  # rclpy: one severity per call site
                self.log.error(line)
            else:
                self.log.info(line)
        if self._reported != self.pipeline.escalated:  # latched or cleared: tell /diagnostics now
            self._reported = self.pipeline.escalated
            self.node.updater.force_update()

    def _diagnostics(self, stat):
        p = self.pipeline
        if p.escalated:
            stat.summary(level_byte(ERROR), f"escalated: {p.escalated}")
        elif p.held:
            stat.summary(level_byte(WARN), "held: " + "; ".join(f"{s}: {r}" for s, r in p.controller.holds.items()))
        else:
            stat.summary(level_byte(OK), "running" if p.started else "waiting for registration and inputs")
        c = p.counters
        stat.add("escalated", p.escalated)
        stat.add("prompt", p.controller.system1_prompt)
        for key in ("episodes", "retries", "total_retries", "safety_stops", "replans", "escalations",
                    "tasks_done", "system1_predictions"):
            stat.add(key, str(getattr(c, key)))
        for name, cc in c.components.items():
            stat.add(f"{name}.asked", str(cc.asked))
            stat.add(f"{name}.answered", str(cc.answered))
            stat.add(f"{name}.slo_attainment", f"{cc.slo_attainment:.3f}")
            stat.add(f"{name}.slo_misses", str(cc.slo_misses))
            stat.add(f"{name}.errors", str(sum(cc.errors.values())))
        stat.add("foreign_answers", str(self.foreign_answers))
        stat.add("answers_refused", str(self.answers_refused))
        stat.add("queries_unsent", str(self.queries_unsent))
        stat.add("reset_failures", str(self.reset_failures))
        return stat

    def status(self) -> dict:
        s = self.pipeline.status()
        s["pipeline"].update(foreign_answers=self.foreign_answers, answers_refused=self.answers_refused,
                             queries_unsent=self.queries_unsent,
                             reset_failures=self.reset_failures)
        return s
