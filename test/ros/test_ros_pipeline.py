"""A task pipeline over real DDS between real processes (robot side): a sim_robot and a
robot_client whose task has safety and monitor components; this process stands in for the policy
server (registration with the fleet's real keys, and the component service: it checks each
query's session tag and answers scripted texts signed with the server's key). Checked: the sim's
reset_episode service, a monitor's "failed" -> the sim's next episode and a retry event, a safety
"unsafe" -> a hold event (and hold chunk) within the safety SLO plus one control period, and an
escalation that latches (ERROR diagnostic, escalated event), is not cleared by an unsigned
acknowledge, and clears through an operator's signed one."""
import collections
import json
import os
import threading
import time

import pytest
import yaml
from diagnostic_msgs.msg import DiagnosticArray
from physai_ros_interfaces.msg import ActionChunk, ComponentAnswer, ComponentQuery, PipelineEvent
from physai_ros_interfaces.srv import OperatorCommand, RegisterRobot, ResetEpisode
from std_msgs.msg import String

from physai_ros.config.fleet import default_fleet_path, load_fleet
from physai_ros.fleet import plan as fleet_plan
from physai_ros.protocol.chunk import HOLD_ENGINE_INSTANCE
from physai_ros.protocol.topics import REGISTER_SERVICE
from physai_ros.ros.message_digest import digest
from physai_ros.ros.qos import latched_qos, reliable_qos
from physai_ros.security.endpoints import COMPONENT_ANSWER
from physai_ros.sim.runtime import TaskStatus
from auth_rig import server_auth, sign_as_operator
from ros_test_helpers import fail_with_logs

pytestmark = [pytest.mark.ros, pytest.mark.slow]

SAFETY_SLO_S = 0.4
FORGED = "<forged>"
STARTUP_S = 60.0


def _fleet_file(tmp_path, rid):
    doc = yaml.safe_load(default_fleet_path().read_text())
    robot = dict(doc["robots"][0], id=rid)
    doc["robots"] = [robot]
    task = doc["tasks"]["pick_place"]
    task.pop("language", None)
    task.update({
        "slo_ms": 5000,
        "max_consecutive_slo_violation": 1000,
        "task_retry": {"max_task_retries": 1},
        "safety_and_slo_violation": {"max_consecutive_safety_replan": 1, "max_consecutive_slo_violation": 1000},
        "components": {
            "safety": {"model": "vla", "prompt": "is the workcell safe?", "freq_hz": 5, "slo_ms": SAFETY_SLO_S * 1e3},
            "monitor": {"model": "vla", "prompt": "ongoing, done, or failed?", "freq_hz": 2, "slo_ms": 1000,
                        "fallback": "hold"},
        },
    })
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


class StandInServer:
    """Registration and the component service, as the policy server does them (real keys)."""

    def __init__(self, node, fleet, rid):
        self.node, self.rid, self.ns = node, rid, f"/{rid}"
        self.auth = server_auth(fleet)
        self.lock = threading.Lock()
        self.script = collections.defaultdict(collections.deque)  # component -> texts to answer next
        self.default = {"safety": "safe", "monitor": "ongoing"}
        self.queries = collections.Counter()
        self.bad_tags = 0
        self.answered = []  # (component, text, monotonic publish time)
        self.events = []  # (monotonic receive time, PipelineEvent)
        self.holds = []  # (monotonic receive time, ActionChunk)
        self.status = None
        self.client_status = {}
        self.diag = {}
        node.create_service(RegisterRobot, REGISTER_SERVICE, self._register)
        node.create_subscription(ComponentQuery, f"{self.ns}/component_query", self._query, reliable_qos(50))
        self.answer_pub = node.create_publisher(ComponentAnswer, f"{self.ns}/component_answer", reliable_qos(50))
        node.create_subscription(PipelineEvent, f"{self.ns}/pipeline_event",
                                 lambda m: self.events.append((time.monotonic(), m)), reliable_qos(100))
        node.create_subscription(ActionChunk, f"{self.ns}/action_chunk", self._chunk, reliable_qos(50))
        node.create_subscription(String, f"{self.ns}/task_status",
                                 lambda m: setattr(self, "status", TaskStatus.from_json(m.data)), latched_qos())
        node.create_subscription(String, f"{self.ns}/client_status",
                                 lambda m: setattr(self, "client_status", json.loads(m.data)), reliable_qos())
        node.create_subscription(DiagnosticArray, "/diagnostics", self._diag, reliable_qos(50))
        self.fleet = fleet
        self.ack = node.create_client(OperatorCommand, f"{self.ns}/operator_command")
        self.reset = node.create_client(ResetEpisode, f"{self.ns}/reset_episode")

    def _register(self, req, resp):
        resp.accepted, resp.server_instance = True, "stand_in"
        grant, key = self.auth.register(req.robot_id, digest(req, skip=("auth_proof",)), req.auth_proof)
        self.auth.start_session(req.robot_id, key)
        resp.auth_grant = grant
        return resp

    def _query(self, msg):
        try:
            self.auth.check_component_query(self.rid, digest(msg), msg.auth)
        except Exception:
            self.bad_tags += 1
            return
        comp = msg.component
        self.queries[comp] += 1
        todo = self.script[comp]
        text = todo.popleft() if todo else self.default[comp]
        if text == FORGED:  # an "unsafe" not signed by the server (must be dropped), then the real answer
            self.answer_pub.publish(ComponentAnswer(robot_id=msg.robot_id, query_id=msg.query_id, component=comp,
                                                    text="unsafe", auth=[1, 2, 3]))
            text = self.default[comp]
        a = ComponentAnswer(robot_id=msg.robot_id, query_id=msg.query_id, component=comp, text=text,
                            backend="stand_in")
        a.header.stamp = self.node.get_clock().now().to_msg()
        a.auth = self.auth.sign(COMPONENT_ANSWER, digest(a))
        self.answered.append((comp, text, time.monotonic()))
        self.answer_pub.publish(a)

    def _chunk(self, msg):
        if msg.engine_instance == HOLD_ENGINE_INSTANCE:
            self.holds.append((time.monotonic(), msg))

    def _diag(self, msg):
        for st in msg.status:
            if st.hardware_id == self.rid and st.name.endswith("pipeline"):
                self.diag = {"level": st.level[0] if isinstance(st.level, bytes) else st.level,
                             "message": st.message}

    def kinds(self, since=0):
        return [(e.kind, e.source) for _, e in self.events[since:]]

    def call(self, ros, client, request, timeout=20.0):
        assert client.wait_for_service(timeout_sec=timeout)
        fut = client.call_async(request)
        assert ros.spin_until(fut.done, timeout)
        return fut.result()


def test_pipeline_resets_holds_and_escalates_over_ros(ros, procs, tmp_path):
    rid = f"pipe{os.getpid()}"
    path = _fleet_file(tmp_path, rid)
    fleet = load_fleet(path)
    robot = fleet.robots[0]
    specs = [s for s in fleet_plan.fleet_plan(fleet, controller=False) if s.name.split("/")[-1] in
             ("sim_robot", "robot_client")]
    assert len(specs) == 2
    srv = StandInServer(ros.node, fleet, rid)
    for s in specs:
        procs.start(s)

    # The sim's reset service on its own: the next episode's number, and the sim then runs it.
    if not ros.spin_until(lambda: srv.status is not None, STARTUP_S):
        fail_with_logs(procs, "no task_status from the sim robot")
    ep0 = srv.status.episode
    resp = srv.call(ros, srv.reset, ResetEpisode.Request(reason="test"))
    assert resp.accepted and resp.episode == ep0 + 1
    if not ros.spin_until(lambda: srv.status.episode == ep0 + 1, 20.0):
        fail_with_logs(procs, f"the sim did not start episode {ep0 + 1}: {srv.status}")

    # The client registers with the stand-in and asks both components, tagged with its session.
    if not ros.spin_until(lambda: srv.queries["safety"] >= 2 and srv.queries["monitor"] >= 1, STARTUP_S):
        fail_with_logs(procs, f"no component queries (bad tags: {srv.bad_tags})")
    assert srv.bad_tags == 0

    # monitor "failed" -> a reset_episode event (retry 1) and the sim's next episode.
    ep1 = srv.status.episode
    n = len(srv.events)
    srv.script["monitor"].append("failed")
    if not ros.spin_until(lambda: ("reset_episode", "monitor") in srv.kinds(n), 20.0):
        fail_with_logs(procs, f"no reset_episode event: {srv.kinds(n)}")
    ev = next(e for _, e in srv.events[n:] if e.kind == "reset_episode")
    assert ev.retry == 1 and ev.robot_id == rid and not ev.escalated
    if not ros.spin_until(lambda: srv.status.episode > ep1, 20.0):
        fail_with_logs(procs, f"the sim's episode did not advance past {ep1}")

    # safety "unsafe" -> a hold event within the safety SLO plus one control period of the answer.
    n, h = len(srv.events), len(srv.holds)
    a = len(srv.answered)
    srv.script["safety"].append("unsafe")
    if not ros.spin_until(lambda: ("replan", "safety") in srv.kinds(n) and len(srv.holds) > h, 20.0):
        fail_with_logs(procs, f"no safety hold: {srv.kinds(n)}")
    sent = next(t for c, text, t in srv.answered[a:] if text == "unsafe")
    held = next(t for t, e in srv.events[n:] if e.kind == "hold" and e.source == "safety")
    budget = SAFETY_SLO_S + 1.0 / robot.control_rate_hz
    print(f"safety hold event {held - sent:.4f} s after the unsafe answer")
    assert held - sent <= budget, f"hold event {held - sent:.3f} s after the unsafe answer (> {budget:.3f} s)"
    assert [k for k, _ in srv.kinds(n)][:3] == ["hold", "drop_plan", "replan"]
    # The next "safe" resumes.
    if not ros.spin_until(lambda: ("resume", "") in srv.kinds(n), 20.0):
        fail_with_logs(procs, f"no resume after safe: {srv.kinds(n)}")

    # A second failure exceeds max_task_retries (1): latched escalation, ERROR diagnostic.
    n = len(srv.events)
    srv.script["monitor"].append("failed")
    if not ros.spin_until(lambda: ("escalate", "monitor") in srv.kinds(n), 20.0):
        fail_with_logs(procs, f"no escalation: {srv.kinds(n)}")
    esc = next(e for _, e in srv.events[n:] if e.kind == "escalate")
    assert esc.escalated and esc.reason.startswith("task failed 2 times")
    if not ros.spin_until(lambda: srv.diag.get("level") == 2, 20.0):
        fail_with_logs(procs, f"no ERROR diagnostic: {srv.diag}")
    assert esc.reason in srv.diag["message"]
    asked = sum(srv.queries.values())
    ros.spin_for(1.0)
    assert sum(srv.queries.values()) == asked  # latched: nothing is asked
    assert srv.diag.get("level") == 2  # still latched

    def acknowledge(note="", sign=True):
        req = OperatorCommand.Request(robot_id=rid, command="acknowledge", note=note)
        return srv.call(ros, srv.ack, sign_as_operator(srv.fleet, req, "acknowledge") if sign else req)

    unsigned = acknowledge(sign=False)  # from any node on the domain: refused, nothing cleared
    assert not unsigned.accepted and unsigned.reason.startswith("unauthenticated_missing"), unsigned.reason
    assert srv.diag.get("level") == 2
    ack = acknowledge("cleared by the test")
    assert ack.accepted and ack.cleared == esc.reason
    if not ros.spin_until(lambda: srv.diag.get("level") != 2 and ("acknowledged", "operator") in srv.kinds(n), 20.0):
        fail_with_logs(procs, f"the escalation did not clear: {srv.diag} {srv.kinds(n)}")
    again = acknowledge()
    assert not again.accepted and again.reason == "not_escalated"
    # Asking resumes after the acknowledgement.
    if not ros.spin_until(lambda: sum(srv.queries.values()) > asked, 20.0):
        fail_with_logs(procs, "no queries after the acknowledgement")

    # An answer the server did not sign is dropped and counted: no hold follows the forged "unsafe".
    n = len(srv.events)
    srv.script["safety"].append(FORGED)
    if not ros.spin_until(lambda: srv.client_status.get("pipeline", {}).get("answers_refused", 0) >= 1, 20.0):
        fail_with_logs(procs, f"the forged answer was not refused: {srv.client_status.get('pipeline')}")
    assert ("hold", "safety") not in srv.kinds(n)
