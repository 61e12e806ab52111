"""Real processes over real DDS for the serving tests: start a fleet plan, watch its topics."""
from __future__ import annotations

import json
import os
import threading
import time
from collections import defaultdict

import rclpy
from rclpy.executors import SingleThreadedExecutor

from physai_ros.serving import fleet_plan


class Fleet:
    """Processes of a plan, killed in teardown whatever happens."""

    def __init__(self, log_dir):
        self.log_dir = str(log_dir)
        self.procs: dict[str, object] = {}

    def start(self, spec):
        self.procs[spec.name] = fleet_plan.start(spec, self.log_dir)

    def stop(self, name):
        fleet_plan.stop([self.procs.pop(name)])

    def stop_all(self):
        fleet_plan.stop(list(self.procs.values()))
        self.procs.clear()

    def log(self, name):
        path = os.path.join(self.log_dir, name.replace("/", "__") + ".log")
        return open(path, errors="replace").read() if os.path.exists(path) else ""


class Watcher:
    """An in-test node recording what flows on the serving topics (spun in a thread)."""

    def __init__(self, robots):
        from physai_ros_interfaces.msg import ActionChunk, Observation
        from std_msgs.msg import String

        from physai_ros.ros.qos import reliable_qos

        if not rclpy.ok():
            rclpy.init()
        self.node = rclpy.create_node("serving_test_watcher")
        self.lock = threading.Lock()
        self.obs = defaultdict(list)  # ns -> [(robot_id, round_id, stamp_ns, prompt, n_images, refresh)]
        self.chunks = defaultdict(list)  # ns -> [ActionChunk]
        self.status = {}  # ns -> dict
        for ns in robots:
            self.node.create_subscription(Observation, f"/{ns}/observation",
                                          lambda m, ns=ns: self._obs(ns, m), reliable_qos(100))
            self.node.create_subscription(ActionChunk, f"/{ns}/action_chunk",
                                          lambda m, ns=ns: self._chunk(ns, m), reliable_qos(100))
            self.node.create_subscription(String, f"/{ns}/client_status",
                                          lambda m, ns=ns: self._status(ns, m), reliable_qos())
        self.executor = SingleThreadedExecutor()
        self.executor.add_node(self.node)
        self._stop = False
        self.thread = threading.Thread(target=self._spin, daemon=True)
        self.thread.start()

    def _spin(self):
        while not self._stop and rclpy.ok():
            self.executor.spin_once(timeout_sec=0.05)

    def _obs(self, ns, m):
        stamp = m.header.stamp.sec * 10**9 + m.header.stamp.nanosec
        with self.lock:
            self.obs[ns].append((m.robot_id, m.round_id, stamp, m.prompt, len(m.images), m.refresh))

    def _chunk(self, ns, m):
        with self.lock:
            self.chunks[ns].append(m)

    def _status(self, ns, m):
        with self.lock:
            self.status[ns] = json.loads(m.data)

    def wait(self, pred, timeout, what):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            with self.lock:
                if pred():
                    return
            time.sleep(0.05)
        with self.lock:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}; "
                                 f"status={self.status}")

    def close(self):
        self._stop = True
        self.thread.join(timeout=2)
        self.executor.shutdown()
        self.node.destroy_node()
