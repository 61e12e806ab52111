"""Real processes over real DDS for the serving tests: start a fleet plan, watch its topics.
The streaming tests build on these too (test/streaming_ros/streaming_ros_harness.py)."""
from __future__ import annotations

import contextlib
import json
import threading
from collections import defaultdict

import yaml

from physai_ros.config.fleet import load_fleet
from physai_ros.fleet.processes import start_process, stop_processes

from ros_rig import SpunNode, log_of, wait_for


class Fleet:
    """Processes of a plan, killed in teardown whatever happens."""

    def __init__(self, log_dir):
        self.log_dir = str(log_dir)
        self.procs: dict[str, object] = {}

    def start(self, spec):
        self.procs[spec.name] = start_process(spec, self.log_dir)

    def stop(self, name):
        stop_processes([self.procs.pop(name)])

    def stop_all(self):
        stop_processes(list(self.procs.values()))
        self.procs.clear()

    def log(self, name):
        return log_of(self.log_dir, name)


@contextlib.contextmanager
def running_fleet(directory, doc: dict, make_watcher, specs):
    """Writes `doc` to directory/fleet.yaml and loads it, starts make_watcher(cfg) (first, so it
    sees every message) and the processes specs(cfg); yields (cfg, fleet, watcher). Everything is
    stopped on the way out, whatever happened."""
    path = directory / "fleet.yaml"
    path.write_text(yaml.safe_dump(doc))
    cfg = load_fleet(path)
    fleet = Fleet(directory / "logs")
    watcher = None
    try:
        watcher = make_watcher(cfg)
        for spec in specs(cfg):
            fleet.start(spec)
        yield cfg, fleet, watcher
    finally:
        if watcher is not None:
            watcher.close()
        fleet.stop_all()


class StatusWatcher:
    """An in-test node (spun in a thread) recording each robot's client_status; subclasses
    subscribe more topics and write what they record under `lock`."""

    def __init__(self, name: str, robots, spin_timeout_s: float = 0.05):
        from std_msgs.msg import String

        from physai_ros.ros.qos import reliable_qos

        self.lock = threading.Lock()
        self.status = {}  # ns -> dict
        self.robots = list(robots)
        self.spun = SpunNode(name, spin_timeout_s=spin_timeout_s)
        self.node = self.spun.node
        for ns in robots:
            self.node.create_subscription(String, f"/{ns}/client_status",
                                          lambda m, ns=ns: self._status(ns, m), reliable_qos())

    def _status(self, ns, m):
        with self.lock:
            self.status[ns] = json.loads(m.data)

    def detail(self) -> str:
        """What a failed wait reports (called under the lock). For a robot whose status never
        came: how many client_status publishers this node's graph knows of (0: its client is
        down or was never discovered; 1: discovered, yet nothing delivered)."""
        silent = {ns: self.node.count_publishers(f"/{ns}/client_status")
                  for ns in self.robots if ns not in self.status}
        return f"status={self.status}" + (f"; no status yet from {silent} (publishers seen)" if silent else "")

    def wait(self, pred, timeout, what):
        return wait_for(pred, timeout, what, self.detail, lock=self.lock)

    def call(self, client, request, timeout: float = 30.0):
        """A service call answered through this node's spin thread (the test thread waits)."""
        done = threading.Event()
        fut = client.call_async(request)
        fut.add_done_callback(lambda _: done.set())
        assert done.wait(timeout), f"no answer from {client.service_name} within {timeout:g} s"
        return fut.result()

    def close(self):
        self.spun.close()


class Watcher(StatusWatcher):
    """Records what flows on the serving topics."""

    def __init__(self, robots):
        from physai_ros_interfaces.msg import ActionChunk, Observation

        from physai_ros.ros.qos import reliable_qos

        super().__init__("serving_test_watcher", robots)
        self.obs = defaultdict(list)  # ns -> [(robot_id, round_id, stamp_ns, prompt, n_images, refresh)]
        self.chunks = defaultdict(list)  # ns -> [ActionChunk]
        for ns in robots:
            self.node.create_subscription(Observation, f"/{ns}/observation",
                                          lambda m, ns=ns: self._obs(ns, m), reliable_qos(100))
            self.node.create_subscription(ActionChunk, f"/{ns}/action_chunk",
                                          lambda m, ns=ns: self._chunk(ns, m), reliable_qos(100))

    def _obs(self, ns, m):
        stamp = m.header.stamp.sec * 10**9 + m.header.stamp.nanosec
        with self.lock:
            self.obs[ns].append((m.robot_id, m.round_id, stamp, m.prompt, len(m.images), m.refresh))

    def _chunk(self, ns, m):
        with self.lock:
            self.chunks[ns].append(m)
