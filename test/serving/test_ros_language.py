"""The language stream over real DDS between real processes: policy_server with the
trained sim checkpoint, two simulated robots with their clients and controllers, a watcher on
/<ns>/text and /diagnostics, and operator questions through /policy_server/ask_robot."""
from collections import defaultdict

import pytest
import yaml

from physai_ros.config.fleet import default_fleet_path, fleet_dir
from physai_ros.fleet import plan as fleet_plan
from physai_ros.protocol.chunk import HOLD_ENGINE_INSTANCE
from physai_ros.protocol.text import ASK_SERVICE

from auth_rig import sign_as_operator
from serving_ros_harness import Watcher, running_fleet

pytestmark = [pytest.mark.ros, pytest.mark.slow]

STARTUP_S = 90
QUESTION = "what is the current subtask?"


def _fleet_doc():
    doc = yaml.safe_load(default_fleet_path().read_text())
    doc["robots"] = doc["robots"][:2]
    doc["server"]["language"] = {"queries_per_s": 0.2, "query_burst": 2, "max_pending_per_robot": 1}
    doc["tasks"]["reach_goal"].pop("language", None)  # robot_1 speaks only when asked
    doc["tasks"]["pick_place"]["language"] = {"question": QUESTION, "every_rounds": 2, "max_tokens": 8,
                                              "tokens_per_frame": 4, "min_action_rate_hz": 0.5}
    for t in ("pick_place", "reach_goal"):
        doc["tasks"][t]["slo_ms"] = 5000
        doc["tasks"][t]["max_consecutive_slo_violation"] = 100
    return doc


class TextWatcher(Watcher):
    def __init__(self, cfg, robots):
        from diagnostic_msgs.msg import DiagnosticArray
        from physai_ros_interfaces.msg import RobotText
        from physai_ros_interfaces.srv import AskRobot

        from physai_ros.ros.qos import reliable_qos

        super().__init__(robots)
        self.cfg = cfg
        self.texts = defaultdict(list)  # ns -> [RobotText]
        self.diag = {}
        for ns in robots:
            self.node.create_subscription(RobotText, f"/{ns}/text", lambda m, ns=ns: self._text(ns, m),
                                          reliable_qos(100))
        self.node.create_subscription(DiagnosticArray, "/diagnostics", self._diag, 10)
        self.ask_client = self.node.create_client(AskRobot, ASK_SERVICE)
        self.AskRobot = AskRobot

    def _text(self, ns, m):
        with self.lock:
            self.texts[ns].append(m)

    def _diag(self, m):
        with self.lock:
            for s in m.status:
                self.diag[s.name] = {kv.key: kv.value for kv in s.values}

    def ask(self, robot_id, question, max_tokens=0, operator="operator"):
        """Signed by `operator` of the fleet's keystore, as `physai-fleet operator ask` does."""
        req = self.AskRobot.Request(robot_id=robot_id, question=question, max_tokens=max_tokens)
        return self.ask_call(sign_as_operator(self.cfg, req, "ask", operator))

    def ask_call(self, req):
        return self.call(self.ask_client, req)


@pytest.fixture(scope="module")
def fleet_env(tmp_path_factory):
    with running_fleet(tmp_path_factory.mktemp("lang"), _fleet_doc(),
                       lambda cfg: TextWatcher(cfg, [r.namespace for r in cfg.robots]),
                       lambda cfg: fleet_plan.fleet_plan(cfg, controller=True)) as env:
        yield env


def _done(texts):
    return [t for t in texts if t.done]


def test_a_task_s_question_is_answered_on_the_robot_s_text_topic(fleet_env):
    cfg, fleet, w = fleet_env
    w.wait(lambda: len(_done(w.texts["robot_0"])) >= 2, STARTUP_S,
           "two finished texts on /robot_0/text\n" + fleet.log("policy_server"))
    with w.lock:
        texts = list(w.texts["robot_0"])
        assert not w.texts["robot_1"]  # reach_goal has no question and nobody asked robot_1 yet
    by_id = defaultdict(list)
    for t in texts:
        by_id[t.request_id].append(t)
    for rid, ups in by_id.items():
        if not ups[-1].done:
            continue
        assert [u.seq for u in ups] == sorted(u.seq for u in ups)
        assert all(u.question == QUESTION and u.source == "task" and u.robot_id == "robot_0" for u in ups)
        assert ups[-1].reason in ("eos", "budget") and len(ups[-1].tokens) <= 8
        assert all(len(u.auth) > 0 for u in ups)  # signed by the server (the fleet runs secure)
        assert len({u.round_id for u in ups}) == 1
    # Actions keep flowing to both robots while text is decoded.
    w.wait(lambda: all(sum(c.status == 0 and c.engine_instance != HOLD_ENGINE_INSTANCE for c in w.chunks[ns]) >= 3
                       for ns in ("robot_0", "robot_1")), 60, "3 served chunks for each robot")


def test_operator_questions_are_answered_or_refused_with_reasons(fleet_env):
    cfg, fleet, w = fleet_env
    assert w.ask_client.wait_for_service(timeout_sec=STARTUP_S)
    ok = w.ask("robot_1", "describe the scene.", max_tokens=5)
    assert ok.accepted, ok.reason
    w.wait(lambda: any(t.request_id == ok.request_id and t.done for t in w.texts["robot_1"]), 60,
           "the answer on /robot_1/text")
    with w.lock:
        answer = [t for t in w.texts["robot_1"] if t.request_id == ok.request_id]
    assert answer[-1].source == "operator" and answer[-1].question == "describe the scene."
    assert len(answer[-1].tokens) <= 5
    # Hostile or careless questions: each refused with its reason, nobody else affected.
    cases = [("ghost", "hello?", "unknown_robot"), ("robot_1", "", "empty"), ("robot_1", "a\x07b", "bad_characters"),
             ("robot_1", "x" * 500, "too_long"), ("robot_1", "ok?", "max_tokens")]
    for robot, q, reason in cases:
        res = w.ask(robot, q, max_tokens=100_000 if reason == "max_tokens" else 0)
        assert not res.accepted and res.reason.startswith(reason), (robot, q, res.reason)
    flood = [w.ask("robot_1", f"question {i}?") for i in range(6)]
    refused = [f.reason.split(":")[0] for f in flood if not f.accepted]
    assert refused and set(refused) <= {"rate", "busy"}
    # Only operators of the fleet may ask: unsigned, signed by a key the fleet does not know, or
    # replayed, a question is refused; one operator's flood leaves another operator's rate alone.
    from physai_ros_interfaces.srv import AskRobot

    from physai_ros.security.keystore import Identity, Keystore
    from physai_ros.security.operator_commands import OperatorSigner
    from physai_ros.ros.message_digest import digest

    stranger_keys = Keystore.init(fleet_dir(cfg) / "stranger_keys")
    stranger_keys.add(Identity("operator", "mallory"))
    forged = AskRobot.Request(robot_id="robot_1", question="stop now.", operator_name="mallory")
    forged.auth = OperatorSigner(stranger_keys, "mallory").sign("ask", digest(forged))
    captured = sign_as_operator(cfg, AskRobot.Request(robot_id="robot_1", question="status?"), "ask")
    unsigned = AskRobot.Request(robot_id="robot_1", question="stop now.", operator_name="operator")
    auth_cases = {"unauthenticated_missing": w.ask_call(unsigned),
                  "unauthenticated_unknown_identity": w.ask_call(forged),
                  "first": w.ask_call(captured), "unauthenticated_replayed": w.ask_call(captured)}
    for reason, res in auth_cases.items():
        if reason != "first":
            assert not res.accepted and res.reason.startswith(reason), (reason, res.reason)
    refused += [r.reason.split(":")[0] for r in auth_cases.values() if not r.accepted]
    other = w.ask("robot_1", "and you?", operator="operator_b")
    assert other.accepted, other.reason
    with w.lock:
        before = {ns: len(w.chunks[ns]) for ns in ("robot_0", "robot_1")}
    w.wait(lambda: all(len(w.chunks[ns]) >= before[ns] + 3 for ns in before), 60, "chunks keep flowing")
    # Diagnostics are published on a timer: the one on hand may predate the flood's refusals, so
    # wait for a status that counts them all rather than reading the first one seen.
    expected_refused = len(cases) - 1 + len(refused)

    def language_status():
        return w.diag.get("policy_server: language", {})

    w.wait(lambda: int(language_status().get("text_questions_refused", -1)) >= expected_refused, 30,
           f"a language diagnostics status counting {expected_refused} refused questions")
    with w.lock:
        d = w.diag["policy_server: language"]
    assert float(d["engine_0.f_min_hz"]) >= 0
