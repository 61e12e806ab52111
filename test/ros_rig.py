"""What every ROS test rig needs: an in-test node spun on its own thread, and a bounded wait
whose deadline stretches with the machine's measured slowdown (test/machine_load.py).

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

from machine_load import Deadline


class SpunNode:
    """An rclpy node whose callbacks run on a daemon thread (SingleThreadedExecutor), so a test
    can block in waits while messages keep arriving.

    The node has its own rclpy Context, shut down by close(): nothing is shared with the other
    nodes of the pytest process. (A shared default context, once shut down by one failing test,
    cannot be initialised again in the process, and every later test errored with "Context.init()
    must only be called once".)"""

    def __init__(self, name: str, spin_timeout_s: float = 0.05):
        self.context = Context()
        rclpy.init(context=self.context)
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
            rclpy.try_shutdown(context=self.context)


def wait_for(pred, timeout: float, what: str, detail=None, *, lock=None, check=None, poll_s: float = 0.05):
    """Polls pred() until it returns something truthy, and returns that.

    timeout: what the step needs on an idle machine, with margin; the wait stretches it by the
    machine's measured slowdown (machine_load.Deadline), so a busy machine gets longer.

    lock: held around pred() (and detail()) when the predicate reads state that callbacks write.
    check: called between polls; it raises to end the wait early (a process that must live died).
    detail: called on time-out; its text goes into the AssertionError after the first line."""
    guard = lock if lock is not None else contextlib.nullcontext()
    deadline = Deadline(timeout)
    while True:
        with guard:
            got = pred()
        if got:
            return got
        if deadline.expired():
            break
        if check is not None:
            check()
        time.sleep(poll_s)
    with guard:
        extra = "" if detail is None else f"\n{detail()}"
    raise AssertionError(f"timed out after {deadline.describe()} waiting for {what}{extra}")


def log_of(log_dir, name: str) -> str:
    """The output of process `name` (a ProcessSpec.name) started with fleet.plan.start."""
    path = os.path.join(str(log_dir), name.replace("/", "__") + ".log")
    return open(path, errors="replace").read() if os.path.exists(path) else ""
