"""diagnostics_aggregator: the fleet's /diagnostics as the tree rqt_robot_monitor shows, for
machines without ROS's C++ diagnostic_aggregator (the PyPI wheels have none). A thin adapter over
physai_ros.monitoring.aggregation.

  sub  /diagnostics (DiagnosticArray): every node's statuses
  pub  /diagnostics_agg (DiagnosticArray, 1 Hz): the whole tree, a status per level
       /diagnostics_toplevel_state (DiagnosticStatus, 1 Hz): the worst of it
Parameters: stale_s (5.0: a status not updated for that long is STALE), publish_hz (1.0).
physai-fleet starts it; the launch file does unless told diagnostics_aggregator:=false (a ROS
machine with the C++ aggregator runs that one with config/diagnostics_analyzers.yaml instead).

    python -m physai_ros.nodes.diagnostics_aggregator
"""
from __future__ import annotations

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.node import Node

from physai_ros.monitoring.aggregation import DiagnosticsAggregator, Status, top_level
from physai_ros.monitoring.diagnostics import level_byte
from physai_ros.monitoring.status_text import level_int
from physai_ros.protocol.topics import DIAGNOSTICS_AGG_TOPIC, DIAGNOSTICS_TOPIC, DIAGNOSTICS_TOPLEVEL_TOPIC
from physai_ros.ros.qos import reliable_qos
from physai_ros.ros.spin import run_node


def _to_msg(st: Status) -> DiagnosticStatus:
    return DiagnosticStatus(level=level_byte(st.level), name=st.name, message=st.message,
                            hardware_id=st.hardware_id,
                            values=[KeyValue(key=k, value=v) for k, v in st.values])


class DiagnosticsAggregatorNode(Node):
    def __init__(self, **node_kwargs):
        super().__init__("diagnostics_aggregator", **node_kwargs)
        stale_s = float(self.declare_parameter("stale_s", 5.0).value)
        hz = float(self.declare_parameter("publish_hz", 1.0).value)
        self.aggregator = DiagnosticsAggregator(stale_s)
        self.create_subscription(DiagnosticArray, DIAGNOSTICS_TOPIC, self._on_diagnostics, reliable_qos(100))
        self.agg_pub = self.create_publisher(DiagnosticArray, DIAGNOSTICS_AGG_TOPIC, reliable_qos(1))
        self.top_pub = self.create_publisher(DiagnosticStatus, DIAGNOSTICS_TOPLEVEL_TOPIC, reliable_qos(1))
        self.create_timer(1.0 / hz, self._publish)

    def _on_diagnostics(self, arr: DiagnosticArray) -> None:
        self.aggregator.update(Status(st.name, level_int(st.level), st.message, st.hardware_id,
                                      tuple((kv.key, kv.value) for kv in st.values)) for st in arr.status)

    def _publish(self) -> None:
        tree = self.aggregator.aggregate()
        msg = DiagnosticArray(status=[_to_msg(s) for s in tree])
        msg.header.stamp = self.get_clock().now().to_msg()
        self.agg_pub.publish(msg)
        self.top_pub.publish(_to_msg(top_level(tree)))


def main(argv: list[str] | None = None) -> int:
    return run_node(DiagnosticsAggregatorNode, argv)


if __name__ == "__main__":
    raise SystemExit(main())
