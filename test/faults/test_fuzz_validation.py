"""The two server crashes the node fuzz found, pinned down on the pure validation (no ROS).

1. A registration whose robot_namespace is not a valid ROS name was accepted; the node then
   built topics from it, rclpy raised InvalidTopicNameException in the service callback and the
   policy_server process ended (test_fuzz_nodes.py::test_junk_registrations_...).
2. Observation.horizon_policy "pkg.module:Class" from a robot was imported and called by the
   server: "os:abort" ended the process (test_fuzz_nodes.py::test_robot_chosen_horizon_policy_...);
   fixed in the tree by the serving owner (allowed_policies from fleet.yaml).
"""
from __future__ import annotations

import dataclasses
import time

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from rclpy.exceptions import InvalidTopicNameException
from rclpy.validate_full_topic_name import validate_full_topic_name

from physai_ros.protocol.observation import ImageData, ObservationData
from physai_ros.protocol.registration import RobotRegistration
from physai_ros.serving import validation as V

LIMITS = V.ModelLimits(max_views=3, max_state_dim=32, max_action_dim=32)


def reg(namespace: str) -> RobotRegistration:
    return RobotRegistration(
        robot_id="r", task_id="t", robot_namespace=namespace, prompt="p", camera_topics=("c",),
        num_views=1, image_height=8, image_width=8, joint_names=("a", "b"), state_dim=2,
        action_dim=2, control_period=0.1, streaming=False, last_round_id=0)


def _valid_topic(name: str) -> bool:
    try:
        validate_full_topic_name(name)
        return True
    except InvalidTopicNameException:
        return False


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(st.one_of(st.text(max_size=30),
                 st.text("abc_/019.~{} ", max_size=30),
                 st.sampled_from(["x/../y", "a b", "1abc", "//x", "~/x", "{ns}", "a" * 300])))
def test_an_accepted_namespace_always_makes_valid_topic_names(ns):
    """rclpy is the oracle: whatever check_registration accepts, the server can create every
    per-robot topic for it; everything else is refused as bad_registration."""
    refusal = V.check_registration(reg(ns), LIMITS)
    root = "/" + ns.strip("/") if ns.strip("/") else ""
    topics_ok = all(_valid_topic(f"{root}/{t}")
                    for t in ("observation", "action_chunk", "observation_refresh"))
    if refusal is None:
        assert topics_ok, f"accepted namespace {ns!r} cannot name a topic"
    else:
        assert refusal.reason == V.BAD_REGISTRATION


def test_a_client_session_is_a_short_printable_id():
    assert V.check_registration(dataclasses.replace(reg("r"), client_session="3f2a9c" * 2), LIMITS) is None
    for bad in ("x" * (V.MAX_SESSION_LEN + 1), "a\nb", "\x00"):
        refusal = V.check_registration(dataclasses.replace(reg("r"), client_session=bad), LIMITS)
        assert refusal is not None and refusal.reason == V.BAD_REGISTRATION and "client_session" in refusal.detail


def test_ordinary_namespaces_are_still_accepted():
    for ns in ("", "/", "robot_0", "/robot_0", "/fleet_a/robot_1/"):
        assert V.check_registration(reg(ns), LIMITS) is None, ns


def _obs(policy: str, params=()) -> ObservationData:
    now = time.time()
    return ObservationData(
        robot_id="r", task_id="t", round_id=2, stamp=now,
        images=(ImageData(8, 8, "rgb8", 24, bytes(192), None),), state=np.zeros(2, np.float32),
        wrench=np.zeros(6, np.float32), wrench_stamp=now, prompt="", exec_phase_start=0.0,
        actions_remaining=0, control_period=0.1, horizon_policy=policy, horizon_params=tuple(params),
        refresh=False)


def test_robot_named_policy_classes_are_refused_unless_configured():
    # A class that fleet.yaml configures for a task may be named by the robot; nothing else.
    v = V.ObservationValidator(max_age_s=2.0, allowed_policies=frozenset({"physai_ros.engine.horizon:ConfidenceHorizon"}))
    for name in ("os:abort", "builtins:exit", "subprocess:Popen", "physai_ros.engine.horizon:StaticHorizon"):
        r = v.check(_obs(name), reg("r"), time.time())
        assert r is not None and r.reason == V.HORIZON_POLICY, (name, r)
    assert v.check(_obs("physai_ros.engine.horizon:ConfidenceHorizon"), reg("r"), time.time()) is None
    assert v.refused["r"][V.HORIZON_POLICY] == 4


@settings(max_examples=8, deadline=None)
@given(ids=st.lists(st.text(min_size=0, max_size=300).filter(lambda s: s != "r"), min_size=40, max_size=60))
def test_refusals_of_invented_robot_ids_stay_bounded(ids):
    """Unknown robots are counted per claimed id up to MAX_UNKNOWN_IDS ids, then together: a
    sender inventing ids cannot grow the server's memory or its /diagnostics without limit."""
    v = V.ObservationValidator(max_age_s=2.0)
    v.reset_robot("r", 0)
    assert v.check(_obs(""), reg("r"), time.time()) is None  # a registered robot is unaffected
    for rid in ids:
        r = v.check(dataclasses.replace(_obs(""), robot_id=rid), None, time.time())
        assert r is not None and r.reason == V.UNKNOWN_ROBOT
    unknown = [k for k in v.refused if k != "r"]
    assert len(unknown) <= V.MAX_UNKNOWN_IDS + 1
    assert sum(sum(v.refused[k].values()) for k in unknown) == len(ids)
    assert len(set(ids)) <= V.MAX_UNKNOWN_IDS or V.UNKNOWN_OTHER in v.refused
