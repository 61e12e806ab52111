"""Pipeline components served over real DDS by a real policy_server process: the tiny
preset's own backbone (`model: vla`) answers a registered robot's ComponentQuery on
/<ns>/component_answer, signed; hostile or careless queries are refused with reasons or dropped,
counted on /diagnostics, and never take the server down. The codec is checked first, in process."""
import array
import threading
from collections import defaultdict

import numpy as np
import pytest

from physai_ros.fleet import plan as fleet_plan
from physai_ros.protocol.component import COMPONENT_ANSWER_TOPIC, COMPONENT_QUERY_TOPIC, ComponentAnswerData

from component_helpers import IMAGE_HW, PROMPT, fleet_doc, images, request
from machine_load import Deadline
from serving_ros_harness import StatusWatcher, running_fleet

STARTUP_S = 120  # process start, torch import, tiny engine build on a loaded 2-core machine
ANSWER_S = 60


# ---- the codec (no processes) ------------------------------------------------------------------

def test_the_codec_round_trips_and_reads_views_without_copies():
    from sensor_msgs.msg import Image

    from physai_ros.ros.codecs.component import (answer_from_msg, answer_to_msg, backend_answer, query_from_msg,
                                                 query_to_msg)

    req = request("r0", "monitor", 12, views=2, max_tokens=7)
    msg = query_to_msg(req)
    assert [im.encoding for im in msg.images] == ["rgb8", "rgb8"] and msg.query_id == 12
    back = query_from_msg(msg)
    assert (back.query_id, back.task_id, back.robot_id, back.component) == (12, "inspect", "r0", "monitor")
    q = back.query
    assert (q.question, q.task_prompt, q.max_tokens) == (req.query.question, PROMPT, 7)
    assert all(np.array_equal(a, b) for a, b in zip(q.images, req.query.images))
    assert np.array_equal(q.state, req.query.state)
    assert np.shares_memory(q.images[0], np.frombuffer(msg.images[0].data, np.uint8))  # a view, no copy
    # bgr8 and mono8 as serving's preprocessing reads them; a short buffer is named.
    rgb = images(1)[0]
    bgr = Image(height=32, width=32, encoding="bgr8", step=96)
    bgr.data = array.array("B", rgb[..., ::-1].tobytes())
    mono = Image(height=32, width=32, encoding="mono8", step=32)
    mono.data = array.array("B", rgb[..., 0].tobytes())
    msg.images = [bgr, mono]
    q = query_from_msg(msg).query
    assert np.array_equal(q.images[0], rgb) and np.array_equal(q.images[1], np.repeat(rgb[..., :1], 3, axis=2))
    short = Image(height=32, width=32, encoding="rgb8", step=96)
    short.data = array.array("B", bytes(100))
    msg.images = [short]
    with pytest.raises(ValueError, match=r"images\[0\]: 100 bytes"):
        query_from_msg(msg)
    msg.images = [Image(height=2, width=2, encoding="yuv422", step=4)]
    with pytest.raises(ValueError, match="encoding 'yuv422'"):
        query_from_msg(msg)
    # No state: None for the backend (a pi0 model reads none from a question).
    msg = query_to_msg(request(state=None))
    assert query_from_msg(msg).query.state is None
    a = ComponentAnswerData("r0", 12, "monitor", text="done", tokens=2, latency_ms=3.5, queue_ms=1.0,
                            backend="vla_backbone/own", stamp=5.0)
    assert answer_from_msg(answer_to_msg(a)) == a
    b = backend_answer(a)
    assert (b.text, b.error, b.tokens, b.ok) == ("done", "", 2, True)


def test_the_robot_and_server_endpoints_tag_and_sign_component_messages():
    from auth_rig import RobotKeys, server_auth

    from physai_ros.security.endpoints import COMPONENT_ANSWER
    from physai_ros.security.handshake import AuthError

    robot, server = RobotKeys("r0"), server_auth()
    with pytest.raises(AuthError):
        robot.auth.tag_component_query(b"d" * 32)  # no session yet
    grant, key = server.register("r0", b"r" * 32, robot.auth.proof(b"r" * 32))
    server.start_session("r0", key)
    robot.auth.on_grant(grant)
    tag = robot.auth.tag_component_query(b"q" * 32)
    server.check_component_query("r0", b"q" * 32, tag)
    with pytest.raises(AuthError):
        server.check_component_query("r0", b"q" * 32, tag)  # replayed
    with pytest.raises(AuthError):  # an observation's tag is not a component query's
        server.check_observation("r0", b"o" * 32, robot.auth.tag_component_query(b"o" * 32))
    robot.auth.check_component_answer(b"a" * 32, server.sign(COMPONENT_ANSWER, b"a" * 32))
    with pytest.raises(AuthError):
        robot.auth.check_component_answer(b"a" * 32, server.sign(b"chunk", b"a" * 32))


# ---- a real server ------------------------------------------------------------------------------

class ComponentRig(StatusWatcher):
    """Speaks for the fleet's robots on their component topics (keys made before the server
    starts, so the auto keystore has them), records answers and the server's diagnostics."""

    def __init__(self, cfg):
        from diagnostic_msgs.msg import DiagnosticArray
        from physai_ros_interfaces.msg import ComponentAnswer, ComponentQuery
        from physai_ros_interfaces.srv import RegisterRobot

        from auth_rig import RobotKeys
        from physai_ros.ros.qos import reliable_qos

        robots = [r.namespace for r in cfg.robots]
        super().__init__("component_test_rig", robots)
        self.cfg = cfg
        self.keys = {r.id: RobotKeys(r.id, cfg) for r in cfg.robots}
        self.answers = defaultdict(list)  # ns -> [ComponentAnswer]
        self.diag = {}
        self.pubs = {}
        for ns in robots:
            self.node.create_subscription(ComponentAnswer, f"/{ns}/{COMPONENT_ANSWER_TOPIC}",
                                          lambda m, ns=ns: self._answer(ns, m), reliable_qos(50))
            self.pubs[ns] = self.node.create_publisher(ComponentQuery, f"/{ns}/{COMPONENT_QUERY_TOPIC}",
                                                       reliable_qos(10))
        self.node.create_subscription(DiagnosticArray, "/diagnostics", self._diag, 10)
        self.register_client = self.node.create_client(RegisterRobot, "/policy_server/register_robot")

    def _answer(self, ns, m):
        with self.lock:
            self.answers[ns].append(m)

    def _diag(self, m):
        with self.lock:
            for s in m.status:
                self.diag[s.name] = {kv.key: kv.value for kv in s.values}

    def detail(self):
        return f"answers={ {ns: [(a.query_id, a.error) for a in v] for ns, v in self.answers.items()} }"

    def register(self, robot_id):
        from physai_ros.ros.codecs.registration import registration_to_request
        from physai_ros.client.robot_client import RobotClientCore

        deadline = Deadline(STARTUP_S)
        while not deadline.expired():
            if not self.register_client.wait_for_service(timeout_sec=1.0):
                continue
            req = self.keys[robot_id].request(
                registration_to_request(RobotClientCore(self.cfg.robot(robot_id)).registration()))
            done = threading.Event()
            fut = self.register_client.call_async(req)
            fut.add_done_callback(lambda _: done.set())
            if done.wait(10.0):
                resp = self.keys[robot_id].response(fut.result())
                assert resp.accepted, resp.reason
                return
            self.register_client.remove_pending_request(fut)
        raise AssertionError(f"{robot_id} could not register")

    def send(self, ns, req, tag_as=None, msg_images=None):
        """Publish req on /<ns>/component_query, tagged with tag_as's session (None: unsigned)."""
        from physai_ros.ros.codecs.component import query_to_msg
        from physai_ros.ros.message_digest import digest

        msg = query_to_msg(req, msg_images)
        if tag_as is not None:
            msg.auth = self.keys[tag_as].auth.tag_component_query(digest(msg))
        self.pubs[ns].publish(msg)

    def answer(self, ns, query_id, robot_id=None):
        found = [a for a in self.answers[ns] if a.query_id == query_id and (robot_id is None or a.robot_id == robot_id)]
        return found[0] if found else None


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    doc = fleet_doc(insecure=False)
    # Kairos's memory dispatcher on, with room for the tests' questions: fleet.yaml's keys reach the node.
    doc["server"]["components"] = {"kv_budget_mb": 1.0}
    with running_fleet(tmp_path_factory.mktemp("components"), doc, ComponentRig,
                       lambda cfg: [fleet_plan.server_spec(cfg)]) as env:
        cfg, fleet, rig = env
        rig.register("r0")
        # Discovery: the server's query subscription and answer publisher matched the rig's.
        rig.wait(lambda: rig.pubs["r0"].get_subscription_count() > 0
                 and rig.node.count_publishers(f"/r0/{COMPONENT_ANSWER_TOPIC}") > 0, STARTUP_S,
                 "the server's component topics\n" + fleet.log("policy_server"))
        yield env


def _checked(rig, a):
    """The answer is signed by the server (the fleet runs secure)."""
    from physai_ros.ros.message_digest import digest

    rig.keys[a.robot_id].auth.check_component_answer(digest(a), a.auth)
    return a


def test_a_registered_robot_s_query_is_answered_by_the_served_backbone(server):
    cfg, fleet, rig = server
    rig.send("r0", request("r0", "safety", 1, max_tokens=4), tag_as="r0")
    a = rig.wait(lambda: rig.answer("r0", 1), ANSWER_S, "the answer to query 1\n" + fleet.log("policy_server"))
    _checked(rig, a)
    assert (a.robot_id, a.component) == ("r0", "safety")
    # A random tiny model says something or stops at once; either way a well-formed answer.
    assert a.error == "" and 1 <= a.tokens <= 4 and a.backend.startswith("vla_backbone/"), (a.error, a.tokens)
    assert a.latency_ms > 0 and a.queue_ms >= 0
    # Admitted by the K/V it would hold, within the fleet's budget, on /diagnostics.
    rig.wait(lambda: int(rig.diag.get("policy_server: pipeline", {}).get("memory.admitted", 0)) >= 1, 30,
             "the memory dispatcher's counters")
    d = dict(rig.diag["policy_server: pipeline"])
    assert float(d["memory.kv_budget_mb"]) == 1.0 and 0 < float(d["memory.peak_mb.vla"]) <= 1.0, d


def test_hostile_queries_are_refused_or_dropped_counted_and_the_server_keeps_answering(server):
    from sensor_msgs.msg import Image

    cfg, fleet, rig = server
    # Another robot's id on r0's topic: dropped unanswered (no trustworthy address), counted.
    rig.send("r0", request("r1", "safety", 100, views=2), tag_as="r0")
    # No session tag: dropped, counted as unauthenticated.
    rig.send("r0", request("r0", "safety", 101))
    # The wrong number of views, a component its task lacks, an unreadable image: refused with reasons.
    rig.send("r0", request("r0", "safety", 102, views=2), tag_as="r0")
    rig.send("r0", request("r0", "planner", 103), tag_as="r0")
    broken = Image(height=IMAGE_HW[0], width=IMAGE_HW[1], encoding="rgb8", step=IMAGE_HW[1] * 3)
    broken.data = array.array("B", bytes(10))
    rig.send("r0", request("r0", "monitor", 104), tag_as="r0", msg_images=[broken])
    # And a good one after all of them.
    rig.send("r0", request("r0", "monitor", 105, question="ongoing, done, or failed?", max_tokens=3), tag_as="r0")
    rig.wait(lambda: all(rig.answer("r0", q) for q in (102, 103, 104, 105)), ANSWER_S,
             "answers to 102..105\n" + fleet.log("policy_server"))
    with rig.lock:
        got = {q: _checked(rig, rig.answer("r0", q)) for q in (102, 103, 104, 105)}
        assert rig.answer("r0", 100) is None and rig.answer("r0", 101) is None
    assert got[102].error.startswith("bad_images: 2 images, registered 1")
    assert got[103].error.startswith("unknown_component: ")
    assert got[104].error.startswith("unreadable: ValueError: images[0]: 10 bytes")
    assert got[105].error == "" and got[105].component == "monitor"
    rig.wait(lambda: int(rig.diag.get("policy_server: pipeline", {}).get("refused.robot_id_mismatch", 0)) >= 1
             and int(rig.diag["policy_server: pipeline"].get("answered", 0)) >= 2, 30, "the pipeline diagnostics")
    with rig.lock:
        d = dict(rig.diag["policy_server: pipeline"])
    assert sum(int(v) for k, v in d.items() if k.startswith("refused.unauthenticated_")) >= 1, d
    assert int(d["refused.bad_images"]) >= 1 and int(d["refused.unknown_component"]) >= 1
    assert int(d["refused.unreadable"]) >= 1 and float(d["safety.latency_ms_p50"]) > 0
    assert fleet.procs["policy_server"].poll() is None  # alive
