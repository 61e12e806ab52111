"""An in-test node for the streaming fleet: records segments, the controller's commands,
client status and the server's streaming diagnostics, and plays a robot's force sensor.
Client status, the node's thread and wait() are the serving tests' (serving_ros_harness)."""
from __future__ import annotations

import collections
import time

import numpy as np

from physai_lab.stream_trace import command_grid, segment_grid

from serving_ros_harness import StatusWatcher

GRID_HZ = 480.0


def _sec(t):
    return t.sec + t.nanosec * 1e-9


class StreamWatcher(StatusWatcher):
    def __init__(self, robots, wrench_ns=None, wrench_topic="test_wrench", wrench_hz=240.0):
        from diagnostic_msgs.msg import DiagnosticArray
        from geometry_msgs.msg import WrenchStamped
        from physai_ros_interfaces.msg import TrajectorySegment
        from trajectory_msgs.msg import JointTrajectory

        from physai_ros.ros.qos import reliable_qos, sensor_data_qos

        super().__init__("streaming_test_watcher", robots, spin_timeout_s=0.02)
        self.segments = collections.defaultdict(list)  # ns -> [(received, msg, GridNodes)]
        self.commands = collections.defaultdict(lambda: collections.deque(maxlen=20000))  # ns -> [(received, GridNodes)]
        self.streaming_diag = {}
        self.wrench = [0.0] * 6
        self.wrench_log = []  # (stamp, wrench) of each published sample
        for ns in robots:
            self.node.create_subscription(TrajectorySegment, f"/{ns}/trajectory_segment",
                                          lambda m, ns=ns: self._segment(ns, m), reliable_qos(200))
            self.node.create_subscription(JointTrajectory, f"/{ns}/joint_trajectory",
                                          lambda m, ns=ns: self._command(ns, m), reliable_qos(200))
        self.node.create_subscription(DiagnosticArray, "/diagnostics", self._diag, reliable_qos(50))
        if wrench_ns is not None:
            self._wmsg = WrenchStamped()
            self._wpub = self.node.create_publisher(WrenchStamped, f"/{wrench_ns}/{wrench_topic}", sensor_data_qos())
            self.node.create_timer(1.0 / wrench_hz, self._publish_wrench)

    def _publish_wrench(self):
        now = time.time()
        w = self._wmsg
        w.header.stamp.sec, w.header.stamp.nanosec = int(now), int((now % 1) * 1e9)
        f = self.wrench
        w.wrench.force.x, w.wrench.force.y, w.wrench.force.z = f[0], f[1], f[2]
        w.wrench.torque.x, w.wrench.torque.y, w.wrench.torque.z = f[3], f[4], f[5]
        self._wpub.publish(w)
        with self.lock:
            self.wrench_log.append((_sec(w.header.stamp), tuple(f)))

    def _segment(self, ns, m):
        pos = np.asarray(m.positions, dtype=np.float32).reshape(m.num_nodes, m.dim)
        g = segment_grid(_sec(m.start_time), m.dt, pos, list(m.committed), GRID_HZ)
        with self.lock:
            self.segments[ns].append((time.time(), m, g))

    def _command(self, ns, m):
        g = command_grid(_sec(m.header.stamp), [_sec(p.time_from_start) for p in m.points],
                         [list(p.positions) for p in m.points], GRID_HZ)
        with self.lock:
            self.commands[ns].append((time.time(), g))

    def _diag(self, m):
        for st in m.status:
            if st.name.endswith("streaming") and st.name.startswith("policy_server"):
                with self.lock:
                    self.streaming_diag = {kv.key: kv.value for kv in st.values}
                    self.streaming_diag["message"] = st.message

    def detail(self) -> str:
        return (f"{super().detail()}; streaming={self.streaming_diag}; "
                f"segments={ {k: len(v) for k, v in self.segments.items()} }")
