"""What every ROS test rig needs: an in-test node spun on its own thread, and a bounded wait.

test/ is on sys.path (pytest puts the directory of test/conftest.py there), so any test folder
can `from ros_rig import SpunNode, wait_for`.
"""
from __future__ import annotations

import contextlib
import os
import threading
import time

import rclpy
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor


class SpunNode:
    """An rclpy node whose callbacks run on a daemon thread (SingleThreadedExecutor), so a test
    can block in waits while messages keep arriving.

    own_context=True gives the node its own rclpy Context, shut down by close(): nothing is
    shared with the other nodes of the pytest process. Otherwise it uses the default context
    (initialised if needed), which stays up for the next test."""

    def __init__(self, name: str, own_context: bool = False, spin_timeout_s: float = 0.05):
        if own_context:
            self.context = Context()
            rclpy.init(context=self.context)
        else:
            if not rclpy.ok():
                rclpy.init()
            self.context = None
        self._own_context = own_context
        self.node = rclpy.create_node(name, context=self.context)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self._spin_timeout_s = spin_timeout_s
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._spin, daemon=True)
        self.thread.start()

    def _spin(self):
        while not self._stop.is_set() and self.executor.context.ok():
            try:
                self.executor.spin_once(timeout_sec=self._spin_timeout_s)
            except Exception:
                # close() tearing the executor down under a spin_once is expected; anything else
                # would otherwise go unseen in a daemon thread.
                if not self._stop.is_set():
                    raise

    def close(self):
        self._stop.set()
        self.thread.join(timeout=5)
        try:
            self.executor.shutdown(timeout_sec=1.0)
            self.node.destroy_node()
        finally:
            if self._own_context:
                rclpy.try_shutdown(context=self.context)


def wait_for(pred, timeout: float, what: str, detail=None, *, lock=None, check=None, poll_s: float = 0.05):
    """Polls pred() until it returns something truthy, and returns that.

    lock: held around pred() (and detail()) when the predicate reads state that callbacks write.
    check: called between polls; it raises to end the wait early (a process that must live died).
    detail: called on time-out; its text goes into the AssertionError after the first line."""
    guard = lock if lock is not None else contextlib.nullcontext()
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        with guard:
            got = pred()
        if got:
            return got
        if check is not None:
            check()
        time.sleep(poll_s)
    with guard:
        extra = "" if detail is None else f"\n{detail()}"
    raise AssertionError(f"timed out after {timeout} s waiting for {what}{extra}")


def log_of(log_dir, name: str) -> str:
    """The output of process `name` (a ProcessSpec.name) started with fleet.plan.start."""
    path = os.path.join(str(log_dir), name.replace("/", "__") + ".log")
    return open(path, errors="replace").read() if os.path.exists(path) else ""
