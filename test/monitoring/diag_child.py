"""Child process for test_ros_glue.py: a real node using the Updater (through the import switch)
and a MetricsPublisher, publishing over DDS until terminated.

Metric sequence, after the test's subscriber has matched: robot_0/burst is set BATCH times in
each of three timer callbacks (0..BATCH-1, BATCH..2*BATCH-1, ...), the last callback then sets
FINAL. A flush runs between callbacks at most, so only the last value of a callback can ever be
published, whatever the machine's load. The "metric topics" diagnostic task reports the board's
counters, with done=1 when the sequence ended.
"""
import math
import signal
import sys

import rclpy
from rclpy.executors import SingleThreadedExecutor
from rclpy.signals import SignalHandlerOptions

from physai_ros.monitoring.thresholds import MetricsTask, Thresholds
from physai_ros.monitoring.metrics import MetricsPublisher
from physai_ros.monitoring.window import SlidingWindow
from physai_ros.ros.diagnostics_updater import BACKEND, FrequencyStatus, FrequencyStatusParam, Updater

FINAL = 12345.0
BATCH = 100
BURST = 3 * BATCH


def main() -> int:
    stop = False

    def on_signal(signum, frame):
        nonlocal stop
        stop = True

    rclpy.init(args=sys.argv, signal_handler_options=SignalHandlerOptions.NO)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    node = rclpy.create_node("diag_child")
    updater = Updater(node, period=1.0)
    updater.setHardwareID("test_host")

    latency = SlidingWindow(span_s=60.0)
    for k in range(100):
        latency.add(0.0, 100.0 if k < 98 else 400.0)  # p99 lands above the error threshold
    thresholds = Thresholds.from_config({"latency_ms_p99": {"warn": 150, "error": 300}})
    updater.add(MetricsTask("robot_0 latency", lambda: {
        "latency_ms_p50": latency.percentile(50, 0.0), "latency_ms_p99": latency.percentile(99, 0.0),
        "samples": latency.count(0.0)}, thresholds))
    ticks = FrequencyStatus(FrequencyStatusParam({"min": 0.5, "max": 10_000.0}), "ticks")
    updater.add(ticks)

    def broken(stat):
        raise RuntimeError("sensor unplugged")

    updater.add("broken", broken)

    metrics = MetricsPublisher(node, period_s=0.1)
    state = {"phase": 0, "i": 0}
    updater.add(MetricsTask("metric topics", lambda: {
        "accepted": metrics.accepted, "published": metrics.published, "done": int(state["phase"] == 3),
        "refused_non_finite": metrics.refused["non_finite"], "refused_bad_name": metrics.refused["bad_name"]}))

    def step():
        ticks.tick()
        if state["phase"] == 0:  # create the topics, then wait for the test's subscriber
            metrics.set("robot_0", "burst", -1.0)
            metrics.set(None, "robots", 1)
            metrics.set("robot_0", "latency", math.nan)  # refused, counted
            metrics.set("robot 0", "latency", 1.0)  # refused, counted
            state["phase"] = 1
        elif state["phase"] == 1:
            pub = metrics.publishers.get("/robot_0/metrics/burst")
            if pub is not None and pub.get_subscription_count() > 0:
                state["phase"] = 2
        elif state["phase"] == 2:
            for _ in range(BATCH):
                metrics.set("robot_0", "burst", float(state["i"]))
                state["i"] += 1
            if state["i"] == BURST:
                metrics.set("robot_0", "burst", FINAL)
                metrics.set(None, "robots", 2)
                state["phase"] = 3

    node.create_timer(0.02, step)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    print(f"diag_child: backend {BACKEND}", flush=True)
    while not stop and rclpy.ok():
        executor.spin_once(timeout_sec=0.1)
    node.destroy_node()
    rclpy.try_shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
