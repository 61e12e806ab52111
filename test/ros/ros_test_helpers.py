"""Helpers for the ROS tests (imported by test/ros/conftest.py and the tests)."""
from __future__ import annotations

import time

import pytest
import rclpy
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor

from physai_ros.fleet.processes import ProcessGroup

from machine_load import Deadline


class RosHarness:
    def __init__(self, name: str):
        self.context = Context()
        rclpy.init(context=self.context)
        self.node = rclpy.create_node(name, context=self.context)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)

    def spin_for(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.executor.spin_once(timeout_sec=0.01)

    def spin_until(self, predicate, timeout: float, every=None, period: float = 0.2) -> bool:
        """Spin until predicate() holds or the deadline passes; calls every() each period (e.g. to
        re-publish while discovery completes). timeout is for an idle machine: it stretches with
        the measured slowdown (machine_load.Deadline)."""
        deadline = Deadline(timeout)
        next_call = 0.0
        while not deadline.expired():
            if every is not None and time.monotonic() >= next_call:
                every()
                next_call = time.monotonic() + period
            self.executor.spin_once(timeout_sec=0.01)
            if predicate():
                return True
        return bool(predicate())

    def close(self) -> None:
        self.executor.shutdown(timeout_sec=1.0)
        self.node.destroy_node()
        rclpy.try_shutdown(context=self.context)




def fail_with_logs(group: ProcessGroup, message: str) -> None:
    logs = "\n".join(f"--- {p.spec.name} (rc={p.popen.poll()})\n{group.log_tail(p.spec.name, 30)}"
                     for p in group.procs)
    pytest.fail(f"{message}\n{logs}")
