"""Test helper process: a node that gets stuck in its main thread, where no budget reaches it:
in close() (as a join on a thread stuck in a C call would) or in a timer callback that blocks
until the process ends (stuck_in:=callback: however long the tests before the stop take).
run_node's watchdog must still end the process with exit code 0 EXIT_DEADLINE_S after the first
signal, and at once on a second one.

Run: python -m ros_stuck_node --ros-args -p stuck_in:=close|callback  (test/ros on PYTHONPATH).
Prints "ready" once spinning, and a line when it gets stuck in a callback.
"""
import sys
import time

from rclpy.node import Node

from physai_ros.ros.spin import run_node


class Stuck(Node):
    def __init__(self):
        super().__init__("stuck")
        self.stuck_in = self.declare_parameter("stuck_in", "close").value
        self.ticks = 0
        self.create_timer(0.1, self._tick)
        print("ready", flush=True)

    def _tick(self) -> None:
        self.ticks += 1
        if self.stuck_in == "callback" and self.ticks == 3:
            print("callback: blocking until the process ends", flush=True)
            time.sleep(3600.0)

    def close(self, timeout_s: float) -> None:
        if self.stuck_in == "close":
            print(f"close: given {timeout_s:.2f} s, blocking for 60 s", flush=True)
            time.sleep(60.0)


if __name__ == "__main__":
    sys.exit(run_node(Stuck))
