"""Bad input thrown at real nodes over real DDS ("Bad input").

Every malformed message is built from a valid one with one defect, so the reason it must be
refused with is known; the test waits (bounded) for that refusal and, at the end, compares the
server's /diagnostics `refused.<reason>` counters and the controller's ExecutionInfo with what it
sent. Throughout, a well-formed robot served by the same server keeps getting OK chunks for its
own rounds, and no process dies.
"""
from __future__ import annotations

import array
import math
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).parent))

from fuzz_rig import (CTL_JOINTS, JOINTS, MAX_AGE_S, Rig, image, now_s, observation, registration,  # noqa: E402
                      stamp)

from physai_ros.fleet.processes import ProcessSpec  # noqa: E402

# No shrinking: the nodes are stateful (round ids, capture times, counters), so replaying a
# smaller example against them is not the same experiment; the first failing example is reported.
FUZZ = settings(deadline=None, derandomize=True, database=None, phases=[Phase.explicit, Phase.generate],
                report_multiple_bugs=False,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
REPLY_TIMEOUT_S = 15.0  # generous: a loaded 2-core machine; no latency is asserted


@pytest.fixture(scope="module")
def shared_rig(tmp_path_factory):
    r = Rig(tmp_path_factory.mktemp("fuzz"))
    try:
        for rid in ("good", "fuzz"):
            resp = r.register(registration(rid), timeout=240.0)  # start-up on a loaded 2-core machine
            assert resp.accepted, resp.reason
        r.start_good_robot()
        r.wait(lambda: r.good_answered(), 60.0, "the well-formed robot's first chunk")
        yield r
    finally:
        r.close()


@pytest.fixture
def rig(shared_rig):
    shared_rig.ensure_server()
    return shared_rig


def assert_good_robot_still_served(rig, answered_before: int):
    """The well-formed robot got new OK answers during the test, only for rounds it sent. Its
    round-trip latency during the fuzz is printed (a figure, not a threshold: the machine is
    shared), next to its latency before any fuzz."""
    rig.wait(lambda: len(rig.good_answered()) >= answered_before + 2, 60.0,
             "the well-formed robot's chunks after the fuzz")
    assert rig.good_problems() == []
    rig.assert_alive("after the fuzz")
    with rig.lock:
        lat = [x * 1e3 for _, x in rig.good_latency]
    if len(lat) > answered_before:
        import numpy as np

        during, before = np.array(lat[answered_before:]), np.array(lat[:max(1, answered_before)])
        print(f"\nwell-formed robot round trip: before fuzz p50 {np.median(before):.0f} ms (n={before.size}); "
              f"during p50 {np.median(during):.0f} ms, max {during.max():.0f} ms (n={during.size})")


# ---- observations -----------------------------------------------------------------------

FINITE = st.floats(-10, 10, allow_nan=False)
# Control characters (NUL) are left out: rclpy refuses them on the sending side already.
NAME_CHARS = st.characters(codec="utf-8", exclude_categories=["Cs", "Cc"])
NON_FINITE = st.sampled_from([math.nan, math.inf, -math.inf])
BAD_ENCODINGS = st.one_of(st.sampled_from(["", "jpeg", "16UC1", "32FC1", "RGB8", "yuv422", "rgb16"]),
                          st.text(min_size=1, max_size=12).filter(
                              lambda s: s not in ("rgb8", "bgr8", "rgba8", "bgra8", "mono8")))


@st.composite
def bad_observation(draw, last_round: int):
    """(defect, build(round_id) -> Observation, expected refusal reason, answered). A message whose
    robot_id is not the robot of the topic it came on (an unknown id, an empty one, another
    robot's) is refused by the server node as robot_id_mismatch, counted against the topic's
    robot and not answered: the claimed id is no address to answer on."""
    kind = draw(st.sampled_from([
        "unknown_robot", "empty_robot", "other_robot", "wrong_task", "num_views", "image_size", "huge_image",
        "image_encoding", "short_data", "small_step", "state_dim", "state_non_finite",
        "wrench_non_finite", "horizon_non_finite", "stale", "zero_stamp", "future",
        "repeated_round", "horizon_policy"]))
    age = draw(st.floats(0.0, 1.0))

    def build(rnd):
        return observation("fuzz", rnd, now_s() - age)

    if kind == "unknown_robot":
        rid = "ghost_" + draw(st.text(NAME_CHARS, min_size=1, max_size=8))
        return kind, lambda rnd: observation(rid, rnd), "robot_id_mismatch", False
    if kind == "empty_robot":
        return kind, lambda rnd: observation("", rnd), "robot_id_mismatch", False
    if kind == "other_robot":
        # the well-formed robot's id on the fuzz topic: must not be served as `good`
        return kind, lambda rnd: observation("good", rnd), "robot_id_mismatch", False
    if kind == "wrong_task":
        task = draw(st.text(max_size=10).filter(lambda s: s != "pick_place"))
        return kind, lambda rnd: _with(build(rnd), task_id=task), "wrong_task", True
    if kind == "num_views":
        n = draw(st.sampled_from([0, 2, 3, 4]))
        return kind, lambda rnd: _with(build(rnd), images=[image() for _ in range(n)]), "num_views", True
    if kind == "image_size":
        h, w = draw(st.tuples(st.integers(0, 64), st.integers(0, 64)).filter(lambda s: s != (32, 32)))
        return kind, lambda rnd: _with(build(rnd), images=[image(h, w)]), "image_size", True
    if kind == "huge_image":
        # ~0.5-1 MB, within what a reliable topic carries without an SHM profile
        h, w = draw(st.sampled_from([(480, 640), (300, 400), (600, 500)]))
        return kind, lambda rnd: _with(build(rnd), images=[image(h, w)]), "image_size", True
    if kind == "image_encoding":
        enc = draw(BAD_ENCODINGS)
        return kind, lambda rnd: _with(build(rnd), images=[image(encoding=enc)]), "image_encoding", True
    if kind == "short_data":
        n = draw(st.integers(0, 32 * 96 - 1))
        return kind, lambda rnd: _with(build(rnd), images=[image(nbytes=n)]), "image_data", True
    if kind == "small_step":
        step = draw(st.integers(0, 95))
        return kind, lambda rnd: _with(build(rnd), images=[image(step=step)]), "image_data", True
    if kind == "state_dim":
        n = draw(st.integers(0, 40).filter(lambda n: n != len(JOINTS)))
        return kind, lambda rnd: _with(build(rnd), state=array.array("f", [0.5] * n)), "state_dim", True
    if kind == "state_non_finite":
        vals = draw(st.lists(FINITE, min_size=len(JOINTS), max_size=len(JOINTS)))
        vals[draw(st.integers(0, len(JOINTS) - 1))] = draw(NON_FINITE)
        return kind, lambda rnd: _with(build(rnd), state=array.array("f", vals)), "non_finite", True
    if kind == "wrench_non_finite":
        axis = draw(st.sampled_from(["force.x", "force.y", "force.z", "torque.x", "torque.y", "torque.z"]))
        bad = draw(NON_FINITE)

        def wrench(rnd):
            m = build(rnd)
            part, comp = axis.split(".")
            setattr(getattr(m.wrench, part), comp, bad)
            return m
        return kind, wrench, "non_finite", True
    if kind == "horizon_non_finite":
        bad = draw(NON_FINITE)
        return kind, lambda rnd: _with(build(rnd), horizon_policy="static",
                                       horizon_params=array.array("f", [bad])), "non_finite", True
    if kind == "stale":
        old = draw(st.floats(MAX_AGE_S + 0.5, 1e6))
        return kind, lambda rnd: observation("fuzz", rnd, now_s() - old), "stale_timestamp", True
    if kind == "zero_stamp":
        return kind, lambda rnd: observation("fuzz", rnd, 0.0), "stale_timestamp", True
    if kind == "future":
        ahead = draw(st.floats(1.0, 1e6))
        return kind, lambda rnd: observation("fuzz", rnd, now_s() + ahead), "future_timestamp", True
    if kind == "repeated_round":
        old_round = draw(st.integers(0, last_round))
        return kind, lambda rnd: observation("fuzz", old_round), "round_id_not_increasing", True
    name = draw(st.text(max_size=16).filter(lambda s: s not in ("", "static", "confidence") and ":" not in s))
    return kind, lambda rnd: _with(build(rnd), horizon_policy=name), "horizon_policy", True


def _with(msg, **fields):
    for k, v in fields.items():
        setattr(msg, k, v)
    return msg


def test_fuzzed_observations_are_refused_and_counted(rig):
    answered_before = len(rig.good_answered())
    # Two valid rounds with a gap: a skipped round id is legal, and later repeats have a history.
    for rnd in (1000, 1010):
        rig.obs_pub["fuzz"].publish(observation("fuzz", rnd))
        rig.wait(lambda: any(c.round_id == rnd for c in rig.chunks["fuzz"]), REPLY_TIMEOUT_S,
                 f"fuzz robot's valid round {rnd}")
    assert [c.status for c in rig.chunks["fuzz"]] == [0, 0]
    base = {k: int(v) for k, v in rig.wait(lambda: rig.diag.get("policy_server: fuzz"), 10.0,
                                           "server diagnostics for fuzz").items()
            if k.startswith("refused.")}
    expected: Counter = Counter()
    next_round = [2000]

    @settings(FUZZ, max_examples=40)
    @given(case=bad_observation(1010))
    def fuzz(case):
        kind, build, reason, answered = case
        rnd = next_round[0]
        next_round[0] += 1
        msg = build(rnd)
        with rig.lock:
            seen = len(rig.chunks["fuzz"])
        rig.obs_pub["fuzz"].publish(msg)
        expected[reason] += 1
        if not answered:
            return
        reply = rig.wait(lambda: [c for c in rig.chunks["fuzz"][seen:] if c.round_id == msg.round_id
                                  and c.status == 2 and c.error.startswith(reason + ":")],
                         REPLY_TIMEOUT_S, f"{kind}: a REFUSED {reason} reply for round {msg.round_id}")
        assert reply[0].robot_id == "fuzz"

    fuzz()
    # Counters: the server's refused.<reason> totals moved by exactly what was sent.
    def counted():
        d = rig.server_counts("fuzz")
        got = Counter({k[len("refused."):]: int(v) - base.get(k, 0) for k, v in d.items()
                       if k.startswith("refused.")})
        return +got == +expected and got
    rig.wait(counted, 10.0, f"server counters to show {dict(expected)} (have {rig.server_counts('fuzz')})")
    if expected["robot_id_mismatch"]:
        inputs = rig.wait(lambda: rig.diag.get("policy_server: inputs"), 10.0, "the server's inputs status")
        assert inputs["fuzz.last_reason"].startswith("robot_id_mismatch"), inputs
    # Nothing the fuzz robot sent after its two valid rounds was served.
    assert [c.round_id for c in rig.chunks["fuzz"] if c.status == 0] == [1000, 1010]
    assert_good_robot_still_served(rig, answered_before)


# ---- action chunks to the trajectory controller -------------------------------------------

@st.composite
def bad_chunk(draw):
    kind = draw(st.sampled_from([
        "wrong_robot", "unknown_status", "count_mismatch", "no_actions",
        "confidence_mismatch", "wrong_dimension", "unknown_joint", "duplicate_joint", "nan",
        "negative_dt", "huge_dt", "bad_horizon", "stale_round", "time_backwards",
        "capture_in_future"]))
    n = draw(st.integers(1, 12))
    return kind, n, draw(st.data())


def _chunk(robot_id, rnd, t, actions, dt=0.1, names=CTL_JOINTS, horizon=None, status=0, error=""):
    from physai_ros_interfaces.msg import ActionChunk

    m = ActionChunk()
    stamp(m.header.stamp, t)
    m.robot_id, m.task_id, m.round_id, m.status, m.error = robot_id, "pick_place", rnd, status, error
    m.joint_names = list(names)
    m.dt = dt
    m.num_actions, m.action_dim = len(actions), (len(actions[0]) if actions else 0)
    m.actions = array.array("f", [x for row in actions for x in row])
    m.horizon = len(actions) if horizon is None else horizon
    m.engine_instance = "fuzz"
    return m


def build_bad_chunk(kind, n, data, last_round, last_capture):
    """-> (ActionChunk, the reason ExecutionInfo.last_reject_reason must show)."""
    t = now_s()
    acts = [[0.1 * j for j in range(len(CTL_JOINTS))] for _ in range(n)]
    rnd = last_round + 1
    if kind == "wrong_robot":
        other = data.draw(st.text(NAME_CHARS, min_size=1, max_size=8).filter(lambda s: s != "ctl"))
        return _chunk(other, rnd, t, acts), "wrong_robot"
    if kind == "unknown_status":  # 0 ok, 1 error, 2 refused (the client's answers: tested apart)
        return _chunk("ctl", rnd, t, acts, status=data.draw(st.integers(3, 255))), "malformed_message"
    if kind == "count_mismatch":
        m = _chunk("ctl", rnd, t, acts)
        m.num_actions = n + data.draw(st.integers(1, 5))
        return m, "malformed_message"
    if kind == "no_actions":
        return _chunk("ctl", rnd, t, []), "malformed_message"
    if kind == "confidence_mismatch":
        m = _chunk("ctl", rnd, t, acts)
        m.confidence = array.array("f", [1.0] * data.draw(st.integers(1, 20).filter(lambda k: k != n)))
        return m, "malformed_message"
    if kind == "wrong_dimension":
        d = data.draw(st.integers(1, 9).filter(lambda d: d != len(CTL_JOINTS)))
        return _chunk("ctl", rnd, t, [[0.0] * d] * n, names=[]), "wrong_dimension"
    if kind == "unknown_joint":
        names = list(CTL_JOINTS)
        names[data.draw(st.integers(0, 3))] = "elbow_" + data.draw(st.text("xyz", max_size=3))
        return _chunk("ctl", rnd, t, acts, names=names), "unknown_joint"
    if kind == "duplicate_joint":
        names = list(CTL_JOINTS)
        i, j = data.draw(st.lists(st.integers(0, 3), min_size=2, max_size=2, unique=True))
        names[i] = names[j]
        return _chunk("ctl", rnd, t, acts, names=names), "duplicate_joint"
    if kind == "nan":
        acts[data.draw(st.integers(0, n - 1))][data.draw(st.integers(0, 3))] = data.draw(NON_FINITE)
        return _chunk("ctl", rnd, t, acts), "non_finite"
    if kind == "negative_dt":
        return _chunk("ctl", rnd, t, acts, dt=data.draw(st.floats(-10, 0))), "bad_dt"
    if kind == "huge_dt":
        return _chunk("ctl", rnd, t, acts, dt=data.draw(st.one_of(st.floats(1.01, 1e9), NON_FINITE))), "bad_dt"
    if kind == "bad_horizon":
        h = data.draw(st.one_of(st.just(0), st.integers(n + 1, 1000)))
        return _chunk("ctl", rnd, t, acts, horizon=h), "bad_horizon"
    if kind == "stale_round":
        # relative draws only: what hypothesis draws must not depend on the nodes' state
        return _chunk("ctl", max(0, last_round - data.draw(st.integers(0, 50))), t, acts), "stale_round"
    if kind == "time_backwards":
        back = data.draw(st.floats(0.01, 1e5))
        return _chunk("ctl", rnd, max(0.0, last_capture - back), acts), "time_backwards"
    ahead = data.draw(st.floats(5.0, 1e6))
    return _chunk("ctl", rnd, t + ahead, acts), "capture_in_future"


def test_fuzzed_chunks_are_rejected_by_the_controller_and_good_ones_still_run(rig):
    def info():
        with rig.lock:
            return rig.info

    rig.wait(info, 30.0, "the controller's execution_info")
    state = {"round": 0, "capture": 0.0, "n": 0}
    accepted0 = info().chunks_accepted
    rejected0 = info().chunks_rejected
    sent_bad: Counter = Counter()

    def send_good():
        state["round"] += 1
        state["capture"] = now_s()
        rig.chunk_pub.publish(_chunk("ctl", state["round"], state["capture"],
                                     [[0.01 * state["round"]] * len(CTL_JOINTS)] * 20))
        state["n"] += 1
        target = accepted0 + state["n"]
        rig.wait(lambda: rig.info.chunks_accepted >= target and rig.info, REPLY_TIMEOUT_S,
                 f"good chunk round {state['round']} accepted (info: {info()})")

    send_good()  # discovery done, and stale rounds / time going backwards have a reference

    @settings(FUZZ, max_examples=40)
    @given(case=bad_chunk())
    def fuzz(case):
        kind, n, data = case
        msg, reason = build_bad_chunk(kind, n, data, state["round"], state["capture"])
        target = rejected0 + sum(sent_bad.values()) + 1
        sent_bad[reason] += 1
        rig.chunk_pub.publish(msg)
        got = rig.wait(lambda: rig.info.chunks_rejected >= target and rig.info, REPLY_TIMEOUT_S,
                       f"{kind}: rejection {target} as {reason} (info: {info()})")
        assert got.chunks_rejected == target, f"{kind}: {got.chunks_rejected} rejections, expected {target}"
        assert got.last_reject_reason == reason, f"{kind}: {got.last_reject_reason!r}, expected {reason!r}"
        if data.draw(st.booleans()):
            send_good()  # a good chunk between bad ones is still executed

    fuzz()
    send_good()
    # The server's refusals and error answers are the robot client's business: the controller
    # executes neither, counts them apart (its buffer status) and not as rejections.
    buffer_status = "ctl/trajectory_controller: buffer"
    seen0 = rig.wait(lambda: rig.diag.get(buffer_status), 20.0, "the controller's buffer status")
    for status, error in ((2, "stale_timestamp: observation is 3.1 s old"), (1, "engine failed")):
        rig.chunk_pub.publish(_chunk("ctl", state["round"] + 1, now_s(), [[9.0] * len(CTL_JOINTS)] * 5,
                                     status=status, error=error))
    rig.wait(lambda: (d := rig.diag.get(buffer_status))
             and int(d["server_refusals_seen"]) == int(seen0["server_refusals_seen"]) + 1
             and int(d["server_errors_seen"]) == int(seen0["server_errors_seen"]) + 1, 20.0,
             f"the refusal and the error counted apart ({rig.diag.get(buffer_status)})")
    send_good()
    final = info()
    assert final.chunks_accepted == accepted0 + state["n"]
    assert final.chunks_rejected == rejected0 + sum(sent_bad.values())
    assert final.executing_round_id <= state["round"]
    rig.assert_alive("after the chunk fuzz")


# ---- registration requests ----------------------------------------------------------------



@st.composite
def junk_registration(draw):
    """A RegisterRobot request with junk in some fields. robot_id always starts with `junk_` so
    a valid-looking junk request cannot re-register (and redirect) the test's real robots."""
    over = {}
    fields = draw(st.sets(st.sampled_from([
        "task_id", "robot_namespace", "prompt", "num_views", "image_height", "image_width",
        "joint_names", "state_dim", "action_dim", "control_period", "last_round_id", "camera_topics",
        "client_session"]),
        min_size=1))
    u32 = st.integers(0, 2**32 - 1)
    gen = {
        "task_id": st.text(NAME_CHARS, max_size=12),
        "robot_namespace": st.one_of(st.text(NAME_CHARS, max_size=20),
                                     st.sampled_from(["", "/", "//x", "a b", "1abc", "x/../y", "~/x", "/good"])),
        "prompt": st.text(NAME_CHARS, max_size=40),
        "num_views": u32, "image_height": u32, "image_width": u32,
        "joint_names": st.lists(st.text(NAME_CHARS, max_size=8), max_size=12),
        "state_dim": u32, "action_dim": u32,
        "control_period": st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.just(0.0)),
        "last_round_id": st.integers(0, 2**64 - 1),
        "camera_topics": st.lists(st.text(NAME_CHARS, max_size=12), max_size=4),
        "client_session": st.one_of(st.text(max_size=100), st.just("\x00" * 3)),
    }
    for f in fields:
        over[f] = draw(gen[f])
    rid = "junk_" + draw(st.text("abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=8))
    return rid, over


def test_junk_registrations_are_answered_and_the_server_stays_up(rig):
    answered_before = len(rig.good_answered())
    outcomes: Counter = Counter()

    @settings(FUZZ, max_examples=25)
    @given(case=junk_registration())
    # always tried, whatever the generated ones hit: names rclpy cannot build topics from
    @example(case=("junk_ns_space", {"robot_namespace": "a b"}))
    @example(case=("junk_ns_dots", {"robot_namespace": "x/../y"}))
    @example(case=("junk_ns_digit", {"robot_namespace": "1abc"}))
    @example(case=("junk_ns_unicode", {"robot_namespace": "r\u00f6bot"}))
    @example(case=("junk_ns_long", {"robot_namespace": "a" * 300}))
    def fuzz(case):
        rid, over = case
        resp = rig.register(registration(rid, **over))
        outcomes["accepted" if resp.accepted else resp.reason.split(":")[0]] += 1
        assert resp.accepted or resp.reason, f"refusal without a reason for {over}"
        assert resp.server_instance
        rig.assert_alive(f"after registering {rid} with {over}")

    fuzz()
    assert outcomes["bad_registration"] > 0, outcomes
    # Registration refusals are on /diagnostics: a count and the last reason per robot id, with a
    # bounded number of ids (RefusalLog folds the rest into "<other>").
    regs = rig.wait(lambda: (d := rig.diag.get("policy_server: registrations"))
                    and int(d["refused_total"]) >= outcomes["bad_registration"] and d, 10.0,
                    f"the registrations status counting {outcomes['bad_registration']} refusals")
    ids = [k[:-len(".count")] for k in regs if k.endswith(".count")]
    assert 0 < len(ids) <= 32, ids
    other = {i: regs[f"{i}.last_reason"] for i in ids if not regs[f"{i}.last_reason"].startswith("bad_registration")}
    assert not other, other
    assert "junk_ns_space.count" in regs or "<other>.count" in regs, regs
    assert_good_robot_still_served(rig, answered_before)


def test_robot_chosen_horizon_policy_class_cannot_run_arbitrary_callables(rig):
    """horizon_policy 'pkg.module:Class' is imported and called by the server. A robot naming a
    callable that ends the process (os:abort) or the worker thread (builtins:exit raises
    SystemExit) must be refused like any other bad policy, not run."""
    answered_before = len(rig.good_answered())
    for k, name in enumerate(["os:abort", "builtins:exit", "no_such_module_xyz:Thing"]):
        rnd = 50_000 + k
        rig.obs_pub["fuzz"].publish(observation("fuzz", rnd, horizon_policy=name))
        reply = rig.wait(lambda: [c for c in rig.chunks["fuzz"] if c.round_id == rnd], REPLY_TIMEOUT_S,
                         f"an answer to horizon_policy {name!r}")
        assert reply[0].status != 0, f"{name!r} was served"
        time.sleep(0.5)
        rig.assert_alive(f"after horizon_policy {name!r}")
    assert_good_robot_still_served(rig, answered_before)


# ---- wrench samples to a robot client ------------------------------------------------------

class SensorFeed:
    """Camera frames and joint states for the client `cl` (20 Hz, fresh stamps), and its wrench."""

    def __init__(self, rig):
        from geometry_msgs.msg import WrenchStamped
        from sensor_msgs.msg import Image, JointState

        from physai_ros.ros.qos import sensor_data_qos

        self.rig = rig
        self.cam = rig.node.create_publisher(Image, "/cl/camera_0/image_raw", sensor_data_qos())
        self.joints = rig.node.create_publisher(JointState, "/cl/joint_states", sensor_data_qos(10))
        self.wrench_pub = rig.node.create_publisher(WrenchStamped, "/cl/wrench", sensor_data_qos())
        self.wrench = [0.0] * 6
        self._stop = False
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self):
        from geometry_msgs.msg import WrenchStamped
        from sensor_msgs.msg import JointState

        while not self._stop:
            t = now_s()
            frame = image()
            stamp(frame.header.stamp, t)
            js = JointState(name=list(JOINTS), position=[0.1] * len(JOINTS))
            stamp(js.header.stamp, t)
            w = WrenchStamped()
            stamp(w.header.stamp, t)
            (w.wrench.force.x, w.wrench.force.y, w.wrench.force.z,
             w.wrench.torque.x, w.wrench.torque.y, w.wrench.torque.z) = self.wrench
            # wrench first: the next observation the client builds carries this sample
            self.wrench_pub.publish(w)
            self.joints.publish(js)
            self.cam.publish(frame)
            time.sleep(0.05)

    def close(self):
        self._stop = True
        self.thread.join(timeout=2)


def test_non_finite_wrench_samples_are_dropped_by_the_client_and_rounds_keep_being_served(rig):
    """A robot_client drops a NaN/inf wrench sample, counts it (client_status wrench_dropped, and
    its /diagnostics status) and keeps sending its newest good sample: no round is lost to a bad
    force reading, no observation it sends carries a non-finite wrench, and the server refuses
    nothing from it as non_finite."""
    import json

    from physai_ros_interfaces.msg import Observation
    from std_msgs.msg import String

    from physai_ros.ros.qos import reliable_qos

    status = {}
    sent_wrenches = []

    def on_status(m):
        with rig.lock:
            status.update(json.loads(m.data))

    def on_obs(m):
        f, t = m.wrench.force, m.wrench.torque
        with rig.lock:
            sent_wrenches.append((m.round_id, (f.x, f.y, f.z, t.x, t.y, t.z)))
    rig.node.create_subscription(String, "/cl/client_status", on_status, 10)
    rig.node.create_subscription(Observation, "/cl/observation", on_obs, reliable_qos(100))
    rig.procs.start(ProcessSpec("robot_client", "physai_ros.nodes.robot_client", "cl",
                                {"fleet_file": rig.fleet_file, "robot_id": "cl"}))
    feed = SensorFeed(rig)
    answered_before = len(rig.good_answered())

    def ok_chunks():
        return [c for c in rig.chunks["cl"] if c.status == 0]

    def dropped():
        return status.get("wrench_dropped", 0)
    try:
        rig.wait(ok_chunks, 60.0, "the robot client's first served round")

        @settings(FUZZ, max_examples=8)
        @given(axis=st.integers(0, 5), bad=NON_FINITE, rest=st.lists(FINITE, min_size=6, max_size=6))
        def fuzz(axis, bad, rest):
            with rig.lock:
                before, ok = dropped(), len(ok_chunks())
            w = list(rest)
            w[axis] = bad
            feed.wrench = w
            # While only bad samples arrive, the client keeps being served with the last good one.
            rig.wait(lambda: dropped() > before and len(ok_chunks()) > ok, REPLY_TIMEOUT_S,
                     f"wrench {w}: dropped samples counted ({status}) and a round served")
            feed.wrench = list(rest)

        fuzz()
        with rig.lock:
            bad_sent = [(r, w) for r, w in sent_wrenches if not all(math.isfinite(x) for x in w)]
            refused = [c.error for c in rig.chunks["cl"] if c.status == 2 and c.error.startswith("non_finite")]
        assert sent_wrenches and bad_sent == [], bad_sent[:3]
        assert refused == []
        assert int(rig.server_counts("cl").get("refused.non_finite", 0)) == 0
        diag = rig.wait(lambda: (d := rig.diag.get("cl/robot_client: client")) and int(d["wrench_dropped"]) > 0
                        and d, 10.0, "the client's diagnostics counting dropped wrench samples")
        assert diag["last_wrench_drop"].startswith("non-finite"), diag
        # fuzz_rig's fleet file wants >= 500 Hz of camera frames; the feed sends 20 Hz
        level, message = rig.diag_status["cl/robot_client: client"]
        assert level == 2 and "camera_hz" in message and "< error 500" in message, (level, message)
        # (wrench_hz may read 0 here: only NaN samples may have arrived in its 5 s window)
        assert 0 < float(diag["camera_hz"]) <= 30 and float(diag["wrench_hz"]) >= 0, diag
        assert status.get("state") != "stopped", status
    finally:
        feed.close()
    assert_good_robot_still_served(rig, answered_before)


# ---- monitoring: levels from the fleet file's thresholds, metric topics ---------------------

def test_nodes_grade_their_statuses_with_the_fleet_files_monitoring_block(rig):
    """fuzz_rig's fleet file sets rate_tolerance 0.25 and a p99 latency warn limit no served
    round can meet: the controller's rate status shows the 0.25 band, the server's status of the
    well-formed robot turns WARN naming latency_ms_p99, and its numeric topics carry values."""
    from std_msgs.msg import Float64

    got = {}
    rig.node.create_subscription(Float64, "/good/metrics/latency_ms_p99",
                                 lambda m: got.__setitem__("p99", m.data), 10)
    rig.node.create_subscription(Float64, "/fleet/metrics/robots_registered",
                                 lambda m: got.__setitem__("registered", m.data), 10)
    rate = rig.wait(lambda: rig.diag.get("ctl/trajectory_controller: joint_trajectory rate"), 20.0,
                    "the controller's rate status")
    assert float(rate["Minimum acceptable frequency (Hz)"]) == pytest.approx(100.0 * 0.75)
    assert float(rate["Maximum acceptable frequency (Hz)"]) == pytest.approx(100.0 * 1.25)
    level, message = rig.wait(lambda: (lm := rig.diag_status.get("policy_server: good")) and lm[0] == 1 and lm,
                              20.0, f"a WARN status for the well-formed robot ({rig.diag_status.get('policy_server: good')})")
    assert "latency_ms_p99" in message and "> warn 0.001" in message, message
    vals = rig.diag["policy_server: good"]
    assert float(vals["latency_ms_p99"]) > 0 and 0 <= float(vals["slo_meet_rate"]) <= 1, vals
    fleet = rig.wait(lambda: rig.diag.get("policy_server: fleet"), 10.0, "the server's fleet status")
    assert int(fleet["robots_registered"]) >= 2 and "queue_depth" in fleet, fleet
    rig.wait(lambda: got.get("p99", 0) > 0 and got.get("registered", 0) >= 2, 20.0,
             f"/good/metrics/latency_ms_p99 and /fleet/metrics/robots_registered ({got})")


def _auth_variants(good: bytes, data) -> bytes:
    """A signed field gone wrong: truncated, oversized, bit-flipped, another version, garbage."""
    kind = data.draw(st.sampled_from(["empty", "truncated", "oversized", "flipped", "version", "garbage"]))
    if kind == "empty":
        return b""
    if kind == "truncated":
        return good[:data.draw(st.integers(1, len(good) - 1))]
    if kind == "oversized":
        return good + bytes(data.draw(st.integers(1, 4096)))
    if kind == "flipped":
        b = bytearray(good)
        b[data.draw(st.integers(0, len(b) - 1))] ^= 1 << data.draw(st.integers(0, 7))
        return bytes(b)
    if kind == "version":
        return bytes([data.draw(st.integers(2, 255))]) + good[1:]
    return data.draw(st.binary(min_size=1, max_size=200))


def test_fuzzed_signatures_and_macs_are_refused_and_counted(rig):
    """The auth fields themselves under fuzz: chunks to the controller whose signature is
    truncated, oversized, flipped or garbage (or valid for other content) never reach the
    buffer, and are counted as `unauthenticated_*`; observations whose MAC is broken the same
    ways are refused by the server, counted on /diagnostics, and never answered."""
    def info():
        with rig.lock:
            return rig.info

    rig.wait(info, 30.0, "the controller's execution_info")
    accepted0, rejected0 = info().chunks_accepted, info().chunks_rejected
    sent = [0]

    @settings(FUZZ, max_examples=25)
    @given(data=st.data())
    def fuzz_chunk(data):
        rnd = 10_000 + sent[0]
        good = rig.server_keys.chunk(_chunk("ctl", rnd, now_s(), [[0.0] * len(CTL_JOINTS)] * 10))
        msg = _chunk("ctl", rnd, now_s(), [[0.0] * len(CTL_JOINTS)] * 10)
        if data.draw(st.booleans()):
            msg.auth = _auth_variants(bytes(good.auth), data)
        else:  # a valid signature, for other content (one action changed)
            msg.auth = good.auth
            msg.actions[data.draw(st.integers(0, len(msg.actions) - 1))] = 0.5
        sent[0] += 1
        target = rejected0 + sent[0]
        rig.raw_chunk_pub.publish(msg)
        got = rig.wait(lambda: rig.info.chunks_rejected >= target and rig.info, REPLY_TIMEOUT_S,
                       f"rejection {target} (info: {info()})")
        assert got.last_reject_reason.startswith("unauthenticated_"), got.last_reject_reason
        assert got.chunks_accepted == accepted0

    fuzz_chunk()

    answered_before = len(rig.good_answered())
    with rig.lock:
        fuzz_seen = len(rig.chunks["fuzz"])
    base = int((rig.server_counts("fuzz") or {}).get("refused_total", 0))
    count = [0]

    @settings(FUZZ, max_examples=20)
    @given(data=st.data())
    def fuzz_obs(data):
        msg = observation("fuzz", 50_000 + count[0])
        good = rig.keys("fuzz").observation(observation("fuzz", 50_000 + count[0]))
        msg.auth = _auth_variants(bytes(good.auth), data)
        count[0] += 1
        rig.raw_obs_pub["fuzz"].publish(msg)
        # One at a time, each counted before the next: a burst of 20 can overflow the topic's
        # history on a loaded machine (a lost message is DDS's doing, not a refusal to count).
        want = base + count[0]
        rig.wait(lambda: int((rig.server_counts("fuzz") or {}).get("refused_total", 0)) >= want, REPLY_TIMEOUT_S,
                 f"the server counting {count[0]} refused observations of fuzz")

    fuzz_obs()
    counts = rig.server_counts("fuzz")
    assert any(k.startswith("refused.unauthenticated_") for k in counts), counts
    with rig.lock:
        assert len(rig.chunks["fuzz"]) == fuzz_seen  # none was answered
    assert_good_robot_still_served(rig, answered_before)
