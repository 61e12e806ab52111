"""The ROS glue over real DDS: a child process publishes /diagnostics (Updater) and metric
topics (MetricsPublisher); this process subscribes like rqt_robot_monitor and rqt_plot would."""
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
import rclpy
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from std_msgs.msg import Float64

from diag_child import BATCH, BURST, FINAL
from machine_load import Deadline

pytestmark = [pytest.mark.ros]
TIMEOUT_S = 90  # process start, imports and discovery on a loaded 2-core machine


class Listener:
    def __init__(self):
        # Its own context: nothing shared with (or shut down by) another test of the process.
        self.context = Context()
        rclpy.init(context=self.context)
        self.node = rclpy.create_node("monitoring_test_listener", context=self.context)
        self.lock = threading.Lock()
        self.arrays: list[DiagnosticArray] = []
        self.values: dict[str, list[float]] = {"/robot_0/metrics/burst": [], "/fleet/metrics/robots": []}
        self.node.create_subscription(DiagnosticArray, "/diagnostics", self._diag, 50)
        for topic in self.values:
            self.node.create_subscription(Float64, topic, lambda m, t=topic: self._val(t, m), 1000)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self._stop = False
        self.thread = threading.Thread(target=self._spin, daemon=True)
        self.thread.start()

    def _spin(self):
        while not self._stop:
            self.executor.spin_once(timeout_sec=0.05)

    def _diag(self, msg):
        with self.lock:
            self.arrays.append(msg)

    def _val(self, topic, msg):
        with self.lock:
            self.values[topic].append(msg.data)

    def latest(self, name):
        with self.lock:
            for arr in reversed(self.arrays):
                for st in arr.status:
                    if st.name == name:
                        return st
        return None

    def close(self):
        self._stop = True
        self.thread.join(timeout=2)
        self.executor.shutdown()
        self.node.destroy_node()
        rclpy.try_shutdown(context=self.context)


def _values(st: DiagnosticStatus) -> dict:
    return {kv.key: kv.value for kv in st.values}


@pytest.fixture(scope="module")
def child_and_listener(tmp_path_factory):
    listener = Listener()
    log = open(tmp_path_factory.mktemp("child") / "diag_child.log", "w+")
    # in a robot's namespace: status names carry it, metric topics are absolute and do not
    proc = subprocess.Popen([sys.executable, os.path.join(os.path.dirname(__file__), "diag_child.py"),
                             "--ros-args", "-r", "__ns:=/robot_7"],
                            stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ))
    try:
        deadline = Deadline(TIMEOUT_S)
        while not deadline.expired() and proc.poll() is None:
            st = listener.latest("robot_7/diag_child: metric topics")
            with listener.lock:
                got_final = FINAL in listener.values["/robot_0/metrics/burst"]
                arrays = len(listener.arrays)
            if st is not None and _values(st).get("done") == "1" and got_final and arrays >= 3:
                break
            time.sleep(0.1)
        yield proc, listener, log
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        listener.close()
        log.close()


def _log(log):
    log.flush()
    log.seek(0)
    return log.read()


def test_diagnostic_array_follows_ros_conventions(child_and_listener):
    proc, listener, log = child_and_listener
    assert proc.poll() is None, f"child exited early:\n{_log(log)}"
    lat = listener.latest("robot_7/diag_child: robot_0 latency")
    assert lat is not None, f"no diagnostics seen; child log:\n{_log(log)}"
    assert lat.hardware_id == "test_host"
    assert lat.level == DiagnosticStatus.ERROR
    assert lat.message.startswith("latency_ms_p99 ") and "> error 300" in lat.message
    assert _values(lat)["latency_ms_p50"] == "100" and _values(lat)["samples"] == "100"
    ticks = listener.latest("robot_7/diag_child: ticks")
    assert ticks.level == DiagnosticStatus.OK and ticks.message == "Desired frequency met"
    assert int(_values(ticks)["Events since startup"]) > 0
    broken = listener.latest("robot_7/diag_child: broken")
    assert broken.level == DiagnosticStatus.ERROR and "sensor unplugged" in broken.message
    with listener.lock:  # other nodes in this ROS domain may publish /diagnostics too
        arrays = [a for a in listener.arrays if any(st.name.startswith("robot_7/diag_child: ") for st in a.status)]
    # one array per update with every task in it, stamped with increasing times
    assert len(arrays) >= 2
    assert all(len(a.status) == 4 for a in arrays)
    stamps = [a.header.stamp.sec + a.header.stamp.nanosec * 1e-9 for a in arrays]
    assert stamps == sorted(stamps) and stamps[-1] > stamps[0]


def test_metric_topics_are_rate_limited_and_keep_the_newest_value(child_and_listener):
    proc, listener, log = child_and_listener
    st = listener.latest("robot_7/diag_child: metric topics")
    assert st is not None and _values(st)["done"] == "1", f"child did not finish:\n{_log(log)}"
    with listener.lock:
        burst = list(listener.values["/robot_0/metrics/burst"])
        robots = list(listener.values["/fleet/metrics/robots"])
    assert burst[-1] == FINAL and robots[-1] == 2.0  # the newest value always goes out
    # 301 values were set in three callbacks: only the newest value at each flush went out
    assert set(burst) <= {-1.0, BATCH - 1.0, 2 * BATCH - 1.0, FINAL}
    assert burst == sorted(burst)
    v = _values(st)
    assert int(v["accepted"]) >= BURST + 3
    assert v["refused_non_finite"] == "1" and v["refused_bad_name"] == "1"
