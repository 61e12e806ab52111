"""A `ros2 topic echo` stand-in for where ros2cli is not installed (as with the PyPI wheels):
prints /diagnostics as rqt_robot_monitor groups it, or the values of metric topics.

    python -m physai_ros.nodes.echo diagnostics [--filter robot_0] [--seconds 5] [--values]
    python -m physai_ros.nodes.echo metrics /robot_0/metrics/latency_ms_p99 /fleet/metrics/queue_depth

`diagnostics` collects the statuses for --seconds and prints the newest of each, worst first
(level, name, message, and with --values the key/values); `metrics` prints every Float64 it
receives with the topic and the receive time. Exit code 0 when something arrived, 1 otherwise.
"""
from __future__ import annotations

import argparse
import sys
import time

from physai_ros.monitoring.status_text import format_statuses, level_int
from physai_ros.protocol.topics import DIAGNOSTICS_TOPIC
from physai_ros.ros.qos import reliable_qos


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="physai_ros.nodes.echo", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    d = sub.add_parser("diagnostics")
    d.add_argument("--filter", default="", help="only statuses whose name contains this")
    d.add_argument("--seconds", type=float, default=3.0)
    d.add_argument("--values", action="store_true")
    m = sub.add_parser("metrics")
    m.add_argument("topics", nargs="+")
    m.add_argument("--seconds", type=float, default=3.0)
    args = ap.parse_args(argv)

    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    rclpy.init()
    node = rclpy.create_node("physai_echo")
    got: dict = {}
    if args.what == "diagnostics":
        from diagnostic_msgs.msg import DiagnosticArray

        def on_diag(arr):
            for st in arr.status:
                if args.filter in st.name:
                    got[st.name] = (level_int(st.level), st.message, [(kv.key, kv.value) for kv in st.values])
        node.create_subscription(DiagnosticArray, DIAGNOSTICS_TOPIC, on_diag, reliable_qos(100))
    else:
        from std_msgs.msg import Float64

        def on_value(topic, msg):
            got[topic] = msg.data
            print(f"{time.time():.3f} {topic} {msg.data:.6g}", flush=True)
        for topic in args.topics:
            node.create_subscription(Float64, topic, lambda msg, t=topic: on_value(t, msg), reliable_qos())
    ex = SingleThreadedExecutor()
    ex.add_node(node)
    end = time.monotonic() + args.seconds
    try:
        while time.monotonic() < end:
            ex.spin_once(timeout_sec=0.1)
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
    if args.what == "diagnostics":
        print(format_statuses(got, args.values) if got else "no /diagnostics received", flush=True)
    return 0 if got else 1


if __name__ == "__main__":
    sys.exit(main())
