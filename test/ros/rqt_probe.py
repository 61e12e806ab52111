"""The real rqt_robot_monitor and rqt_plot widgets (the code rqt shows for these plugins, from
test/ros2_tools.py's tools) on the display it is given, watching a running fleet. Not a test:
test_ros2_launch.py runs it under Xvfb and checks what it writes to --out:
  monitor.png, plot.png   the two widgets as drawn
  probe.json              {"tree": {status name: [row text, message]} of the monitor's tree,
                           "curves": {topic: points received}}
It ends when every --expect name is in the tree and every curve has --points points, or after
--seconds (exit 1 then, with what it had).

    python test/ros/rqt_probe.py --out DIR --expect /robot_0/robot_client/client \\
        --plot /robot_0/metrics/latency_ms/data
"""
from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import types
from pathlib import Path


def tree_rows(widget) -> dict:
    rows = {}

    def walk(item):
        for i in range(item.childCount()):
            child = item.child(i)
            rows[getattr(child, "name", child.text(0))] = [child.text(0), child.text(1)]
            walk(child)
    walk(widget.tree_all_devices.invisibleRootItem())
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--expect", action="append", default=[])
    ap.add_argument("--plot", action="append", default=[])
    ap.add_argument("--points", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=60.0)
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    import rclpy
    from python_qt_binding.QtCore import QTimer
    from python_qt_binding.QtWidgets import QApplication
    from rclpy.executors import SingleThreadedExecutor
    from rqt_plot.data_plot import DataPlot
    from rqt_plot.plot_widget import PlotWidget
    from rqt_robot_monitor.robot_monitor import RobotMonitorWidget

    app = QApplication(sys.argv[:1])
    rclpy.init()
    node = rclpy.create_node("rqt_probe")
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    stop = threading.Event()

    def spin():  # rqt spins its node on a thread of its own too
        while not stop.is_set():
            executor.spin_once(timeout_sec=0.05)
    spinner = threading.Thread(target=spin, daemon=True)
    spinner.start()

    monitor = RobotMonitorWidget(types.SimpleNamespace(node=node), "/diagnostics_agg")
    monitor.resize(1000, 1000)
    monitor.show()
    plot = PlotWidget(node)
    data_plot = DataPlot(plot)
    data_plot.set_autoscale(x=DataPlot.SCALE_ALL)  # the whole run in view (rqt's settings dialog offers it)
    data_plot.set_autoscale(y=DataPlot.SCALE_EXTEND | DataPlot.SCALE_VISIBLE)
    plot.switch_data_plot_widget(data_plot)
    plot.resize(900, 600)
    plot.show()

    start = time.monotonic()
    result = {"ok": False}

    def curves() -> dict:
        return {t: len(c["x"]) for t, c in data_plot._curves.items()}  # the plot's own data

    def check():
        # rqt_plot drops a topic it cannot resolve yet (given before discovery found it: an
        # upstream issue); a user then types it into the Topic box again, as this does.
        for topic in args.plot:
            if topic not in plot._rosdata:
                plot.add_topic(topic)
        rows = tree_rows(monitor)
        done = all(name in rows for name in args.expect) and \
            len(curves()) == len(args.plot) and all(n >= args.points for n in curves().values())
        if done or time.monotonic() - start > args.seconds:
            monitor.tree_all_devices.expandAll()
            plot.update_plot()
            app.processEvents()
            monitor.grab().save(str(out / "monitor.png"))
            plot.grab().save(str(out / "plot.png"))
            (out / "probe.json").write_text(json.dumps({"tree": rows, "curves": curves()}, indent=1))
            result["ok"] = done
            app.quit()
    timer = QTimer()
    timer.timeout.connect(check)
    timer.start(250)
    app.exec_()
    stop.set()
    spinner.join(timeout=5)
    monitor.shutdown()
    plot.clean_up_subscribers()
    node.destroy_node()
    rclpy.try_shutdown()
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
