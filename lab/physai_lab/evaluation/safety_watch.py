"""What a robot's arm does while a person is in its cell, watched over ROS (the safety-stop test
and bench/safety_stop.py): the sim's ground truth of intruders (task_status), the sim's own joint
states, and optionally the safety component itself answered from that ground truth (a perfect
safety checker: "unsafe" while a person is in the cell), signed with the server's key on the real
component topics, so the robot side cannot tell it from the policy server.

All times are this process's monotonic clock at reception; the arm's motion is its joint path
(rad, summed over the arm's joints, the gripper left out)."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import numpy as np

SETTLE_S = 0.15  # the sim's joints come to rest after a stop command (its PD tracking)
STILL = 0.01  # rad of joint path: less than this after a moment, and the arm is at rest
BIN_S = 0.1  # the arm moves in a bin of this length when its path there exceeds MOVING_BIN
MOVING_BIN = 0.003
AT_REST_S = 0.3  # a visit's stop counts when the arm then stays at rest at least this long in it


@dataclass(frozen=True)
class Intrusion:
    entry: float
    leave: float
    moving_at_entry: bool
    stop_after_s: float | None  # entry -> the arm at rest for the rest of the visit (None: not at
    # rest for the visit's last AT_REST_S)
    moved_rad: float  # joint path during the visit
    moving_share: float  # share of the visit's 0.1 s bins in which the arm moved


class SafetyWatch:
    def __init__(self, node, rid: str, server_auth=None):
        """server_auth: answer the robot's safety questions from the ground truth, signed with it
        (physai_ros.security ServerAuth); None: only watch."""
        from physai_ros_interfaces.msg import ComponentAnswer, ComponentQuery
        from sensor_msgs.msg import JointState
        from std_msgs.msg import String

        from physai_ros.ros.qos import latched_qos, reliable_qos

        self.node, self.auth = node, server_auth
        self.lock = threading.Lock()
        self.answering = server_auth is not None
        self.intruder = False
        self.entries: list[float] = []
        self.exits: list[float] = []
        self.answers: list[tuple[float, str]] = []
        self.joints: list[tuple[float, np.ndarray]] = []
        ns = f"/{rid}"
        node.create_subscription(String, f"{ns}/task_status", self._status, latched_qos())
        node.create_subscription(JointState, f"{ns}/joint_states", self._joints, reliable_qos(200))
        if server_auth is not None:
            self._answer_type = ComponentAnswer
            node.create_subscription(ComponentQuery, f"{ns}/component_query", self._query, reliable_qos(50))
            self.pub = node.create_publisher(ComponentAnswer, f"{ns}/component_answer", reliable_qos(50))

    def _status(self, m):
        from physai_ros.sim.runtime import TaskStatus

        present = TaskStatus.from_json(m.data).intruder
        with self.lock:
            if present and not self.intruder:
                self.entries.append(time.monotonic())
            elif self.intruder and not present:
                self.exits.append(time.monotonic())
            self.intruder = present

    def _joints(self, m):
        with self.lock:
            self.joints.append((time.monotonic(), np.asarray(m.position[:-1], dtype=float)))

    def _query(self, msg):
        from physai_ros.ros.message_digest import digest
        from physai_ros.security.endpoints import COMPONENT_ANSWER

        with self.lock:
            if not self.answering or msg.component != "safety":
                return
            text = "unsafe" if self.intruder else "safe"
            self.answers.append((time.monotonic(), text))
        a = self._answer_type(robot_id=msg.robot_id, query_id=msg.query_id, component=msg.component, text=text,
                              backend="ground_truth")
        a.header.stamp = self.node.get_clock().now().to_msg()
        a.auth = self.auth.sign(COMPONENT_ANSWER, digest(a))
        self.pub.publish(a)

    # ---- the arm ------------------------------------------------------------------------------

    def _points(self, t0: float, t1: float) -> list[tuple[float, np.ndarray]]:
        with self.lock:
            return [(t, q) for t, q in self.joints if t0 <= t <= t1]

    def path(self, t0: float, t1: float) -> float:
        pts = [q for _, q in self._points(t0, t1)]
        return float(sum(np.abs(b - a).sum() for a, b in zip(pts, pts[1:])))

    def moving(self, window_s: float = 0.5, threshold: float = 0.02) -> bool:
        now = time.monotonic()
        return self.path(now - window_s, now) > threshold

    def stopped_at(self, t0: float, t1: float) -> float | None:
        """When the arm came to rest after t0 (until t1): the first sample after which it moves
        less than STILL in total; None when it never does."""
        pts = self._points(t0, t1)
        rest = 0.0
        for k in range(len(pts) - 1, 0, -1):
            rest += float(np.abs(pts[k][1] - pts[k - 1][1]).sum())
            if rest > STILL:
                return pts[k][0]
        return pts[0][0] if pts else None

    def moving_share(self, t0: float, t1: float) -> float:
        bins = max(1, int((t1 - t0) / BIN_S))
        return sum(self.path(t0 + k * BIN_S, t0 + (k + 1) * BIN_S) > MOVING_BIN for k in range(bins)) / bins

    def intrusions(self, since: float = 0.0) -> list[Intrusion]:
        """Every finished visit that began after `since`."""
        with self.lock:
            visits = [(e, x) for e, x in zip(self.entries, self.exits) if e >= since]
        out = []
        for entry, leave in visits:
            stop = self.stopped_at(entry, leave)
            out.append(Intrusion(entry, leave, self.path(entry - 0.5, entry) > 0.02,
                                 None if stop is None or leave - stop < AT_REST_S else stop - entry,
                                 self.path(entry, leave), self.moving_share(entry, leave)))
        return out
