"""The policy server's language stream on ROS 2: a thin adapter over
physai_ros.serving.language.stream, mounted by policy_server when fleet.yaml turns it on.

  pub      /<ns>/text                 (RobotText, reliable, depth 50): a robot's text as tokens
           arrive, the whole text so far in every update, done = true last; signed by the
           server (domain "text") like its chunks
  service  /policy_server/ask_robot   (AskRobot): an operator's question for the robot's next
           frame, signed by an operator identity of the fleet's keystore
           (security/operator_commands.py; `physai-fleet operator ask ROBOT QUESTION`); refused
           at once with the reason (unauthenticated, unknown robot, empty, too long, bad
           characters, rate, busy, max_tokens), counted per robot; rates and waiting questions
           are per operator
/diagnostics: "policy_server: language" (tokens/s, texts active, K/V memory, frame rate held vs
f_min per instance); per robot, its status carries text_tokens_per_s, text_active, text_kv_bytes;
/<robot>/metrics/text_tokens_per_s and /fleet/metrics/text_tokens_per_s for rqt_plot.
"""
from __future__ import annotations

from physai_ros_interfaces.msg import RobotText
from physai_ros_interfaces.srv import AskRobot

from physai_ros.monitoring.diagnostics import OK, WARN, level_byte
from physai_ros.protocol.text import ASK_SERVICE, TEXT_TOPIC, QueryAnswer
from physai_ros.ros.codecs.text import answer_to_response, query_from_request, text_to_msg
from physai_ros.ros.message_digest import digest
from physai_ros.ros.qos import reliable_qos
from physai_ros.security.endpoints import TEXT
from physai_ros.security.handshake import AuthError
from physai_ros.security.operator_commands import OperatorCheck


class PolicyServerLanguage:
    def __init__(self, node, fleet, core):
        self.node, self.core, self.stream = node, core, core.language
        self.router = node.router
        self.published = 0
        auth = node.router.auth
        self.operators = OperatorCheck(auth.keystore, node.security.max_skew_s) if auth is not None else None
        for r in fleet.robots:  # known robots: topics now, so discovery is done before text flows
            self.ensure_topics(r.id, r.namespace)
        node.create_service(AskRobot, ASK_SERVICE, self._on_ask)
        node.create_timer(0.5, lambda: self.publish(core.take_text_notices()))
        node.updater.add("language", self._diagnose)
        tasks = [f"{n} ({t.language.question or 'continues its prompt'!s}, every {t.language.every_rounds} rounds)"
                 for n, t in fleet.tasks.items() if t.language is not None and t.language.every_rounds > 0]
        node.get_logger().info("language stream on: " + ("; ".join(tasks) if tasks else "operator questions only")
                               + f"; ask with {ASK_SERVICE}")

    @classmethod
    def maybe(cls, node, fleet, core) -> "PolicyServerLanguage | None":
        return cls(node, fleet, core) if core.language is not None else None

    def ensure_topics(self, robot_id: str, namespace: str) -> None:
        self.router.publisher(self.router.bind(robot_id, namespace), RobotText, TEXT_TOPIC, reliable_qos(depth=50))

    def publish(self, texts) -> None:
        """From serving.serving_threads's instance threads (after the chunks) and the notice timer."""
        for t in texts:
            if self.router.publish(t.robot_id, TEXT_TOPIC, text_to_msg(t), TEXT):
                self.published += 1

    def _on_ask(self, request, response):
        try:
            q = query_from_request(request)
            if self.operators is not None:
                try:
                    self.operators.check(q.requester, "ask", q.robot_id, digest(request), request.auth)
                except AuthError as e:  # counted with the robot it names, as every refusal is
                    refused = self.stream.refuse(q, e.refusal_reason, e.detail,
                                                 registered=self.core.registration(q.robot_id) is not None)
                    return self._answer(request, refused, response)
            answer = self.stream.ask(q, registered=self.core.registration(q.robot_id) is not None)
        except Exception as e:  # a malformed request is refused, never raised into the executor
            answer = QueryAnswer(False, f"invalid: {type(e).__name__}: {e}")
        return self._answer(request, answer, response)

    def _answer(self, request, answer: QueryAnswer, response):
        if not answer.accepted:
            self.node.get_logger().warning(f"refused question for {str(request.robot_id)[:64]!r} from "
                                           f"{str(request.operator_name)[:64]!r}: {answer.reason}",
                                           throttle_duration_sec=1.0)
        return answer_to_response(answer, response)

    def robot_metrics(self, robot_id: str) -> dict:
        d = self.stream.robot_diagnostics(robot_id)
        for key in ("text_tokens_per_s", "text_active", "text_kv_bytes"):
            self.node.metrics.set(robot_id, key, d[key])
        return d

    def _diagnose(self, stat):
        d = self.stream.fleet_diagnostics()
        slipped = sum(v for k, v in d.items() if k.endswith(".frames_below_floor_by_text"))
        stat.summary(level_byte(WARN if slipped else OK),
                     f"{d['text_tokens_per_s']:g} tokens/s, {d['text_active']} text(s) active"
                     + (f"; {slipped} frame(s) over the action-rate floor because of text" if slipped else ""))
        for k, v in d.items():
            stat.add(k, str(v))
        stat.add("published", str(self.published))
        for key in ("text_tokens_per_s", "text_active", "text_kv_bytes"):
            self.node.metrics.set(None, key, d[key])
        return stat
