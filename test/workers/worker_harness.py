"""A real engine_worker process and an in-test node to talk to it (spun in a thread)."""
from __future__ import annotations

import os
import threading
import time

import rclpy
from rclpy.executors import SingleThreadedExecutor

from physai_ros.serving import fleet_plan

# Process start-up (imports, engine build, profile measurement, discovery) on a loaded 2-core box.
STARTUP_S = 90


def worker_spec(instance_id: str, **params) -> fleet_plan.ProcessSpec:
    p = {"instance_id": instance_id, "preset": "tiny", "seed": 7, "max_batch": 3,
         "profile_reps": 1, "profile_views": 1, "profile_tokens": 8, "heartbeat_period_s": 0.2}
    p.update(params)
    return fleet_plan.ProcessSpec(f"engine_worker_{instance_id}", "engine_worker",
                                  "physai_ros.nodes.engine_worker", "", p)


def log_of(log_dir, name: str) -> str:
    """The output of process `name` (a ProcessSpec.name) started with fleet_plan.start."""
    path = os.path.join(str(log_dir), name.replace("/", "__") + ".log")
    return open(path, errors="replace").read() if os.path.exists(path) else ""


class SpunNode:
    def __init__(self, name: str):
        if not rclpy.ok():
            rclpy.init()
        self.node = rclpy.create_node(name)
        self.executor = SingleThreadedExecutor()
        self.executor.add_node(self.node)
        self._stop = False
        self.thread = threading.Thread(target=self._spin, daemon=True)
        self.thread.start()

    def _spin(self):
        while not self._stop and rclpy.ok():
            self.executor.spin_once(timeout_sec=0.05)

    def close(self):
        self._stop = True
        self.thread.join(timeout=2)
        self.executor.shutdown()
        self.node.destroy_node()


def wait_for(pred, timeout: float, what: str, detail=lambda: "") -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}\n{detail()}")
