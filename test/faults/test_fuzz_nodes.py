"""Bad input thrown at real nodes over real DDS (issue 8, "Bad input").

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

from fuzz_rig import CTL_JOINTS, JOINTS, Rig, image, now_s, observation, registration, stamp  # noqa: E402

from physai_ros.fleet_processes import ProcessSpec  # noqa: E402

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
            resp = r.register(registration(rid), timeout=90.0)  # warm-up on a loaded machine
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
    """The well-formed robot got new OK answers during the test, only for rounds it sent."""
    rig.wait(lambda: len(rig.good_answered()) >= answered_before + 2, 60.0,
             "the well-formed robot's chunks after the fuzz")
    assert rig.good_problems() == []
    rig.assert_alive("after the fuzz")


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
    """(defect, build(round_id) -> Observation, expected refusal reason or None for an unknown
    robot, which has no topic to be answered on and is only counted)."""
    kind = draw(st.sampled_from([
        "unknown_robot", "empty_robot", "wrong_task", "num_views", "image_size", "huge_image",
        "image_encoding", "short_data", "small_step", "state_dim", "state_non_finite",
        "wrench_non_finite", "horizon_non_finite", "stale", "zero_stamp", "future",
        "repeated_round", "horizon_policy"]))
    age = draw(st.floats(0.0, 1.0))

    def build(rnd):
        return observation("fuzz", rnd, now_s() - age)

    if kind == "unknown_robot":
        rid = "ghost_" + draw(st.text("abcdefghijklmnopqrstuvwxyz0123456789_", min_size=1, max_size=8))
        return kind, lambda rnd: observation(rid, rnd), None, rid
    if kind == "empty_robot":
        return kind, lambda rnd: observation("", rnd), None, ""
    if kind == "wrong_task":
        task = draw(st.text(max_size=10).filter(lambda s: s != "pick_place"))
        return kind, lambda rnd: _with(build(rnd), task_id=task), "wrong_task", "fuzz"
    if kind == "num_views":
        n = draw(st.sampled_from([0, 2, 3, 4]))
        return kind, lambda rnd: _with(build(rnd), images=[image() for _ in range(n)]), "num_views", "fuzz"
    if kind == "image_size":
        h, w = draw(st.tuples(st.integers(0, 64), st.integers(0, 64)).filter(lambda s: s != (32, 32)))
        return kind, lambda rnd: _with(build(rnd), images=[image(h, w)]), "image_size", "fuzz"
    if kind == "huge_image":
        # ~0.5-1 MB, within what a reliable topic carries without an SHM profile
        h, w = draw(st.sampled_from([(480, 640), (300, 400), (600, 500)]))
        return kind, lambda rnd: _with(build(rnd), images=[image(h, w)]), "image_size", "fuzz"
    if kind == "image_encoding":
        enc = draw(BAD_ENCODINGS)
        return kind, lambda rnd: _with(build(rnd), images=[image(encoding=enc)]), "image_encoding", "fuzz"
    if kind == "short_data":
        n = draw(st.integers(0, 32 * 96 - 1))
        return kind, lambda rnd: _with(build(rnd), images=[image(nbytes=n)]), "image_data", "fuzz"
    if kind == "small_step":
        step = draw(st.integers(0, 95))
        return kind, lambda rnd: _with(build(rnd), images=[image(step=step)]), "image_data", "fuzz"
    if kind == "state_dim":
        n = draw(st.integers(0, 40).filter(lambda n: n != len(JOINTS)))
        return kind, lambda rnd: _with(build(rnd), state=array.array("f", [0.5] * n)), "state_dim", "fuzz"
    if kind == "state_non_finite":
        vals = draw(st.lists(FINITE, min_size=len(JOINTS), max_size=len(JOINTS)))
        vals[draw(st.integers(0, len(JOINTS) - 1))] = draw(NON_FINITE)
        return kind, lambda rnd: _with(build(rnd), state=array.array("f", vals)), "non_finite", "fuzz"
    if kind == "wrench_non_finite":
        axis = draw(st.sampled_from(["force.x", "force.y", "force.z", "torque.x", "torque.y", "torque.z"]))
        bad = draw(NON_FINITE)

        def wrench(rnd):
            m = build(rnd)
            part, comp = axis.split(".")
            setattr(getattr(m.wrench, part), comp, bad)
            return m
        return kind, wrench, "non_finite", "fuzz"
    if kind == "horizon_non_finite":
        bad = draw(NON_FINITE)
        return kind, lambda rnd: _with(build(rnd), horizon_policy="static",
                                       horizon_params=array.array("f", [bad])), "non_finite", "fuzz"
    if kind == "stale":
        old = draw(st.floats(2.5, 1e6))
        return kind, lambda rnd: observation("fuzz", rnd, now_s() - old), "stale_timestamp", "fuzz"
    if kind == "zero_stamp":
        return kind, lambda rnd: observation("fuzz", rnd, 0.0), "stale_timestamp", "fuzz"
    if kind == "future":
        ahead = draw(st.floats(1.0, 1e6))
        return kind, lambda rnd: observation("fuzz", rnd, now_s() + ahead), "future_timestamp", "fuzz"
    if kind == "repeated_round":
        old_round = draw(st.integers(0, last_round))
        return kind, lambda rnd: observation("fuzz", old_round), "round_id_not_increasing", "fuzz"
    name = draw(st.text(max_size=16).filter(lambda s: s not in ("", "static", "confidence") and ":" not in s))
    return kind, lambda rnd: _with(build(rnd), horizon_policy=name), "horizon_policy", "fuzz"


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
    unknown: Counter = Counter()
    next_round = [2000]

    @settings(FUZZ, max_examples=40)
    @given(case=bad_observation(1010))
    def fuzz(case):
        kind, build, reason, counted_as = case
        rnd = next_round[0]
        next_round[0] += 1
        msg = build(rnd)
        with rig.lock:
            seen = len(rig.chunks["fuzz"])
        rig.obs_pub["fuzz"].publish(msg)
        if reason is None:
            unknown[counted_as] += 1
            return
        expected[reason] += 1
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
        ghosts = all(int(rig.server_counts(g).get("refused.unknown_robot", 0)) >= n
                     for g, n in unknown.items())
        return (+got == +expected and ghosts) and got
    rig.wait(counted, 10.0, f"server counters to show {dict(expected)} and unknown robots {dict(unknown)} "
                            f"(have {rig.server_counts('fuzz')})")
    # Nothing the fuzz robot sent after its two valid rounds was served.
    assert [c.round_id for c in rig.chunks["fuzz"] if c.status == 0] == [1000, 1010]
    assert_good_robot_still_served(rig, answered_before)


# ---- action chunks to the trajectory controller -------------------------------------------

@st.composite
def bad_chunk(draw):
    kind = draw(st.sampled_from([
        "wrong_robot", "status_error", "status_refused", "count_mismatch", "no_actions",
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
    if kind in ("status_error", "status_refused"):
        return _chunk("ctl", rnd, t, acts, status=1 if kind == "status_error" else 2,
                      error="engine failed"), "malformed_message"
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
        "joint_names", "state_dim", "action_dim", "control_period", "last_round_id", "camera_topics"]),
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


def test_non_finite_wrench_to_the_client_is_refused_and_the_client_recovers(rig):
    """A robot_client forwards its newest wrench sample; NaN/inf samples must end as counted
    non_finite refusals of those rounds (not a crash, not a stuck client), and the client must be
    served again once the sensor is sane."""
    import json

    from std_msgs.msg import String

    status = {}

    def on_status(m):
        with rig.lock:
            status.update(json.loads(m.data))
    rig.node.create_subscription(String, "/cl/client_status", on_status, 10)
    rig.procs.start(ProcessSpec("robot_client", "physai_ros.nodes.robot_client", "cl",
                                {"fleet_file": rig.fleet_file, "robot_id": "cl"}))
    feed = SensorFeed(rig)
    answered_before = len(rig.good_answered())

    def ok_chunks():
        return [c for c in rig.chunks["cl"] if c.status == 0]

    def nonfinite_refusals():
        return [c for c in rig.chunks["cl"] if c.status == 2 and c.error.startswith("non_finite:")]
    try:
        rig.wait(ok_chunks, 60.0, "the robot client's first served round")

        @settings(FUZZ, max_examples=8)
        @given(axis=st.integers(0, 5), bad=NON_FINITE, rest=st.lists(FINITE, min_size=6, max_size=6))
        def fuzz(axis, bad, rest):
            with rig.lock:
                refused, ok = len(nonfinite_refusals()), len(ok_chunks())
            w = list(rest)
            w[axis] = bad
            feed.wrench = w
            rig.wait(lambda: len(nonfinite_refusals()) > refused, REPLY_TIMEOUT_S,
                     f"a non_finite refusal for wrench {w}")
            feed.wrench = list(rest)
            rig.wait(lambda: len(ok_chunks()) > ok, REPLY_TIMEOUT_S, "the client served again")

        fuzz()
        with rig.lock:
            refused = len(nonfinite_refusals())
        rig.wait(lambda: int(rig.server_counts("cl").get("refused.non_finite", 0)) == refused, 10.0,
                 f"server refused.non_finite for cl == {refused} ({rig.server_counts('cl')})")
        rig.wait(lambda: status.get("refused", 0) >= refused and status.get("state") != "stopped" and status,
                 10.0, f"client_status counting {refused} refusals ({status})")
    finally:
        feed.close()
    assert_good_robot_still_served(rig, answered_before)
