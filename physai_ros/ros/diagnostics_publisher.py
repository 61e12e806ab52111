"""Our rclpy Updater: runs the tasks of a DiagnosticTaskVector every `period` seconds on the
given node's timer and publishes one diagnostic_msgs/DiagnosticArray on /diagnostics.

Thin on purpose: everything but the message conversion and the timer is in
physai_ros.monitoring.diagnostics. Use it through diagnostics_updater.py, which prefers ROS's
diagnostic_updater when that is installed.
"""
from __future__ import annotations

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.node import Node

from physai_ros.monitoring.diagnostics import DiagnosticStatusWrapper, DiagnosticTaskVector, level_byte
from physai_ros.protocol.topics import DIAGNOSTICS_TOPIC


def to_msg(stat: DiagnosticStatusWrapper) -> DiagnosticStatus:
    return DiagnosticStatus(level=level_byte(stat.level), name=stat.name, message=stat.message,
                            hardware_id=stat.hardware_id,
                            values=[KeyValue(key=k, value=v) for k, v in stat.values])


class Updater(DiagnosticTaskVector):
    """Same call shape as diagnostic_updater.Updater(node, period): add(), setHardwareID(),
    update()/force_update(); publishing starts by itself on the node's timer."""

    def __init__(self, node: Node, period: float = 1.0):
        super().__init__()
        if not period > 0:
            raise ValueError(f"diagnostics period must be positive, got {period!r}")
        self.node = node
        self.period = float(period)
        self.hwid = ""
        self.publisher = node.create_publisher(DiagnosticArray, DIAGNOSTICS_TOPIC, 10)
        self.timer = node.create_timer(self.period, self.update)
        self.published = 0

    def setHardwareID(self, hwid: str) -> None:
        self.hwid = str(hwid)

    def statuses(self) -> list[DiagnosticStatusWrapper]:
        # Fully qualified, as the C++ updater does: "robot_0/trajectory_controller: buffer", so
        # the same node in every robot's namespace stays apart in rqt_robot_monitor.
        return self.run_tasks(self.node.get_fully_qualified_name().lstrip("/"), self.hwid)

    def update(self) -> None:
        self.force_update()

    def force_update(self) -> None:
        arr = DiagnosticArray()
        arr.header.stamp = self.node.get_clock().now().to_msg()
        arr.status = [to_msg(s) for s in self.statuses()]
        self.publisher.publish(arr)
        self.published += 1

    def destroy(self) -> None:
        self.node.destroy_timer(self.timer)
        self.node.destroy_publisher(self.publisher)
