"""Checks on what robots send, with a named reason for every refusal and per-robot counters.

A refusal is answered (a REFUSED chunk carrying the reason) and counted; it never raises out of
the server, and one robot's bad input changes nothing in another robot's state.
"""
from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass

import numpy as np

from physai_ros.protocol.observation import ENCODINGS, ObservationData
from physai_ros.protocol.registration import RobotRegistration

# Refusal reasons (stable names: they appear in diagnostics and in the refused chunk's error).
UNKNOWN_ROBOT = "unknown_robot"
WRONG_TASK = "wrong_task"
NUM_VIEWS = "num_views"
IMAGE_SIZE = "image_size"
IMAGE_ENCODING = "image_encoding"
IMAGE_DATA = "image_data"
STATE_DIM = "state_dim"
NON_FINITE = "non_finite"
STALE = "stale_timestamp"
FUTURE = "future_timestamp"
ROUND_ID = "round_id_not_increasing"
HORIZON_POLICY = "horizon_policy"
REASONS = (UNKNOWN_ROBOT, WRONG_TASK, NUM_VIEWS, IMAGE_SIZE, IMAGE_ENCODING, IMAGE_DATA, STATE_DIM,
           NON_FINITE, STALE, FUTURE, ROUND_ID, HORIZON_POLICY)

# Registration refusals.
BAD_REGISTRATION = "bad_registration"

# The server builds topics from robot_namespace; rclpy raises on an invalid name (and that
# exception ended the server process), so the name is checked here, with ROS's token rules.
_NS_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
MAX_NAMESPACE_LEN = 200  # leaves room for "/observation_refresh" under ROS's 255-character limit
MAX_SESSION_LEN = 64
# Refusals of ids nobody registered are counted per claimed id up to this many ids, then under
# UNKNOWN_OTHER: a sender inventing ids must not grow the server's memory or its diagnostics.
MAX_UNKNOWN_IDS = 32
UNKNOWN_OTHER = "<other unknown>"


@dataclass(frozen=True)
class Refusal:
    reason: str
    detail: str

    def __str__(self) -> str:
        return f"{self.reason}: {self.detail}"


@dataclass(frozen=True)
class ModelLimits:
    max_views: int
    max_state_dim: int
    max_action_dim: int
    # A LeRobot checkpoint's cameras (its VISUAL input features, in its order); (): any views.
    cameras: tuple[str, ...] = ()


IMAGE_FEATURE_PREFIX = "observation.images."


def camera_slots(named: tuple[str, ...], num_views: int, cameras: tuple[str, ...]) -> tuple[int, ...] | str:
    """Which of the checkpoint's `cameras` each view feeds (view i -> slot), or why they do not
    match. Every camera of the checkpoint gets exactly one view: a camera named that the
    checkpoint lacks, one of its cameras no view feeds, or an unnamed set of another size is an
    error (LeRobot would ignore the extra one and pad the missing one: a policy run blind on a
    camera it was trained with). Names may drop the `observation.images.` prefix."""
    if not cameras:
        return tuple(range(num_views))
    have = ", ".join(cameras)
    if not named:
        if num_views != len(cameras):
            return (f"{num_views} camera(s), the checkpoint has {len(cameras)} ({have}): name the feature each "
                    "camera feeds (fleet.yaml cameras: [{topic, feature}])")
        return tuple(range(num_views))
    full = tuple(n if n.startswith(IMAGE_FEATURE_PREFIX) else IMAGE_FEATURE_PREFIX + n for n in named)
    if len(full) != num_views:
        return f"{len(full)} camera feature(s) for {num_views} view(s)"
    unknown = [n for n in full if n not in cameras]
    if unknown:
        return f"camera feature {unknown[0]!r} is not one of the checkpoint's ({have})"
    if len(set(full)) != len(full):
        return f"camera features {list(named)}: each camera feeds a different feature"
    missing = [c for c in cameras if c not in full]
    if missing:
        return f"no camera feeds the checkpoint's {', '.join(missing)} (it has {have})"
    return tuple(cameras.index(n) for n in full)


def check_registration(reg: RobotRegistration, limits: ModelLimits) -> Refusal | None:
    def bad(detail: str) -> Refusal:
        return Refusal(BAD_REGISTRATION, detail)

    if not reg.robot_id:
        return bad("robot_id is empty")
    if not reg.prompt.strip():
        return bad("prompt is empty")
    ns = reg.robot_namespace.strip("/")
    if len(ns) > MAX_NAMESPACE_LEN or (ns and not all(_NS_TOKEN.match(t) for t in ns.split("/"))):
        return bad(f"robot_namespace {reg.robot_namespace[:60]!r} is not a ROS namespace "
                   f"(tokens of [A-Za-z0-9_] not starting with a digit, <= {MAX_NAMESPACE_LEN} chars)")
    if not 1 <= reg.num_views <= limits.max_views:
        return bad(f"num_views={reg.num_views}, the model takes 1..{limits.max_views}")
    if reg.image_height < 1 or reg.image_width < 1:
        return bad(f"image size {reg.image_height}x{reg.image_width} is empty")
    slots = camera_slots(reg.camera_features, reg.num_views, limits.cameras)
    if isinstance(slots, str):
        return bad(slots)
    if reg.view_sizes and len(reg.view_sizes) != reg.num_views:
        return bad(f"{len(reg.view_sizes)} view sizes for num_views={reg.num_views}")
    if any(h < 1 or w < 1 for h, w in reg.view_sizes):
        return bad(f"view sizes {list(reg.view_sizes)}: a view is empty")
    if not 1 <= reg.state_dim <= limits.max_state_dim:
        return bad(f"state_dim={reg.state_dim}, the model takes 1..{limits.max_state_dim}")
    if not 1 <= reg.action_dim <= limits.max_action_dim:
        return bad(f"action_dim={reg.action_dim}, the model takes 1..{limits.max_action_dim}")
    if len(reg.joint_names) != reg.action_dim:
        return bad(f"{len(reg.joint_names)} joint names for action_dim={reg.action_dim}")
    if not (math.isfinite(reg.control_period) and reg.control_period > 0):
        return bad(f"control_period={reg.control_period} must be > 0")
    if len(reg.client_session) > MAX_SESSION_LEN or not reg.client_session.isprintable():
        return bad(f"client_session {reg.client_session[:40]!r} is not a printable id of <= {MAX_SESSION_LEN} chars")
    return None


def _horizon_ok(name: str, params: tuple[float, ...], allowed: frozenset[str] = frozenset()) -> str | None:
    if name == "" or name is None:
        return None  # the task's configured policy applies
    if name == "static":
        if len(params) != 1 or params[0] < 1:
            return f"static expects [H >= 1], got {list(params)}"
        return None
    if name == "confidence":
        if len(params) != 2 or params[0] < 0 or params[1] < 1:
            return f"confidence expects [t >= 0, H_min >= 1], got {list(params)}"
        return None
    if ":" in name:
        # Importing and calling a class the robot names would let any robot run any callable in
        # the server (os:abort); only classes the operator put in fleet.yaml may be named.
        if name in allowed:
            return None  # resolved (and failures reported) by the horizon policy loader
        return (f"policy class {name!r} is not configured for any task in fleet.yaml "
                f"(allowed: {sorted(allowed) or 'none'})")
    return f"unknown policy {name!r}; expected 'static', 'confidence' or 'package.module:Class'"


class ObservationValidator:
    """Stateless checks plus the per-robot round-id memory; counts every refusal by reason."""

    def __init__(self, max_age_s: float, max_future_s: float = 0.5,
                 allowed_policies: frozenset[str] = frozenset()):
        self.max_age_s = max_age_s
        self.max_future_s = max_future_s
        self.allowed_policies = frozenset(allowed_policies)
        self.last_round: dict[str, int] = {}
        self.refused: dict[str, Counter[str]] = {}
        self.accepted: Counter[str] = Counter()

    def reset_robot(self, robot_id: str, last_round_id: int) -> None:
        self.last_round[robot_id] = last_round_id

    def count(self, robot_id: str, refusal: Refusal) -> Refusal:
        self.refused.setdefault(robot_id, Counter())[refusal.reason] += 1
        return refusal

    def check(self, obs: ObservationData, reg: RobotRegistration | None, now: float) -> Refusal | None:
        r = self._check(obs, reg, now)
        if r is not None:
            rid = obs.robot_id
            if reg is None and rid not in self.refused:
                unknown = sum(1 for k in self.refused if k not in self.last_round)
                if unknown >= MAX_UNKNOWN_IDS:
                    rid = UNKNOWN_OTHER
            return self.count(rid, r)
        self.last_round[obs.robot_id] = obs.round_id
        self.accepted[obs.robot_id] += 1
        return None

    def _check(self, obs: ObservationData, reg: RobotRegistration | None, now: float) -> Refusal | None:
        if reg is None:
            return Refusal(UNKNOWN_ROBOT, f"robot {obs.robot_id!r} is not registered")
        if obs.task_id != reg.task_id:
            return Refusal(WRONG_TASK, f"task {obs.task_id!r}, registered {reg.task_id!r}")
        if len(obs.images) != reg.num_views:
            return Refusal(NUM_VIEWS, f"{len(obs.images)} images, registered {reg.num_views}")
        for i, im in enumerate(obs.images):
            if im.encoding not in ENCODINGS:
                return Refusal(IMAGE_ENCODING,
                               f"view {i}: {im.encoding!r}, expected one of {sorted(ENCODINGS)}")
            if (im.height, im.width) != reg.view_size(i):
                return Refusal(IMAGE_SIZE, f"view {i}: {im.height}x{im.width}, registered "
                                           "{}x{}".format(*reg.view_size(i)))
            need = im.height * im.step
            have = len(memoryview(im.data).cast("B")) if not isinstance(im.data, np.ndarray) else im.data.nbytes
            if im.step < im.width * ENCODINGS[im.encoding] or have < need:
                return Refusal(IMAGE_DATA, f"view {i}: {have} bytes with step {im.step}, "
                                           f"need {need} for {im.height}x{im.width} {im.encoding}")
        if obs.state.shape != (reg.state_dim,):
            return Refusal(STATE_DIM, f"{obs.state.shape[0] if obs.state.ndim else 0} values, "
                                      f"registered {reg.state_dim}")
        if not np.all(np.isfinite(obs.state)):
            return Refusal(NON_FINITE, "state has NaN or Inf")
        if not np.all(np.isfinite(obs.wrench)):
            # Our robot_client drops such samples (counted as wrench_dropped) and sends its newest
            # good one, so this only catches clients that do not.
            return Refusal(NON_FINITE, "wrench has NaN or Inf")
        if not all(math.isfinite(x) for x in obs.horizon_params):
            return Refusal(NON_FINITE, "horizon_params has NaN or Inf")
        age = now - obs.stamp
        if obs.stamp <= 0 or age > self.max_age_s:
            return Refusal(STALE, f"captured {age:.3f} s ago, limit {self.max_age_s} s")
        if age < -self.max_future_s:
            return Refusal(FUTURE, f"captured {-age:.3f} s in the future")
        last = self.last_round.get(obs.robot_id, 0)
        # A refresh answers the server's request for a newer observation of the same round.
        if obs.round_id < last or (obs.round_id == last and not obs.refresh):
            return Refusal(ROUND_ID, f"round {obs.round_id} after round {last}")
        bad_h = _horizon_ok(obs.horizon_policy, tuple(obs.horizon_params), self.allowed_policies)
        if bad_h is not None:
            return Refusal(HORIZON_POLICY, bad_h)
        return None

    def refused_total(self, robot_id: str) -> int:
        return sum(self.refused.get(robot_id, Counter()).values())
