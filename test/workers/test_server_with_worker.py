"""End to end: the policy server with the wait-ratio scheduler serves a small simulated fleet
whose only engine instance is a separate engine_worker process, over DDS.

Needs the remote-engine wiring of the serving core (fleet.yaml `server.remote_engines`).
"""
import threading
from collections import defaultdict

import pytest
import yaml

from physai_ros.config.fleet import default_fleet_path, load_fleet
from physai_ros.fleet import plan as fleet_plan
from physai_ros.fleet.processes import start_process, stop_processes
from physai_ros.protocol.chunk import HOLD_ENGINE_INSTANCE

from ros_rig import SpunNode, log_of, wait_for
from worker_harness import STARTUP_S, worker_spec

pytestmark = [pytest.mark.ros, pytest.mark.slow]
WORKER = "fleet_worker"
ROBOTS = ("robot_0", "robot_1")
OK = 0


def _fleet_doc():
    doc = yaml.safe_load(default_fleet_path().read_text())
    doc["robots"] = doc["robots"][:2]  # robot_0: 2 views, pick_place; robot_1: 2 views, reach_goal
    doc["robots"][1]["cameras"] = ["camera_0/image_raw"]
    srv = doc["server"]
    # The worker runs the random tiny model (worker_harness); the server must describe the same.
    srv["model"] = {**{k: v for k, v in srv["model"].items() if k != "checkpoint"}, "preset": "tiny"}
    srv.update(scheduler="wait_ratio", engine_instances=0, max_batch=4,
               remote_engines=[{"instance_id": WORKER, "timeout_s": 10.0}])
    for t in doc["tasks"].values():
        # generous: robots must keep asking through the worker outage on a loaded CI machine
        t.update(slo_ms=5000, max_consecutive_slo_violation=1000)
    return doc


class Watch:
    """Chunks per robot namespace and the server's per-engine diagnostics."""

    def __init__(self):
        from diagnostic_msgs.msg import DiagnosticArray
        from physai_ros_interfaces.msg import ActionChunk

        from physai_ros.ros.qos import reliable_qos

        self.spun = SpunNode("server_with_worker_watch")
        self.lock = threading.Lock()
        self.chunks = defaultdict(list)
        self.engine = {}  # latest engine diagnostics: {"level": int, "message": str, key: value}
        for ns in ROBOTS:
            self.spun.node.create_subscription(ActionChunk, f"/{ns}/action_chunk",
                                               lambda m, ns=ns: self._chunk(ns, m), reliable_qos(100))
        self.spun.node.create_subscription(DiagnosticArray, "/diagnostics", self._diag, reliable_qos(20))

    def _chunk(self, ns, m):
        with self.lock:
            self.chunks[ns].append(m)

    def _diag(self, arr):
        for st in arr.status:
            if st.name == f"policy_server: engine {WORKER}":
                with self.lock:
                    self.engine = {"level": st.level[0] if isinstance(st.level, bytes) else int(st.level),
                                   "message": st.message, **{kv.key: kv.value for kv in st.values}}

    def served(self, ns):
        with self.lock:
            return [c for c in self.chunks[ns] if c.status == OK and c.engine_instance == WORKER]

    def close(self):
        self.spun.close()


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    d = tmp_path_factory.mktemp("server_with_worker")
    path = d / "fleet.yaml"
    path.write_text(yaml.safe_dump(_fleet_doc()))
    cfg = load_fleet(path)
    logs = d / "logs"
    model = cfg.server.model
    wspec = worker_spec(WORKER, preset=model.preset, seed=model.seed, max_batch=4)
    procs = {}
    watch = None
    try:
        watch = Watch()
        procs["worker"] = start_process(wspec, str(logs))
        for spec in fleet_plan.fleet_plan(cfg):
            procs[spec.name] = start_process(spec, str(logs))
        yield cfg, procs, watch, wspec, logs
    finally:
        if watch is not None:
            watch.close()
        stop_processes(list(procs.values()))


def _logs(logs, *names):
    return "\n".join(f"--- {n}\n{log_of(logs, n)[-3000:]}" for n in names)


def test_fleet_is_served_by_the_worker_process(env):
    cfg, procs, w, wspec, logs = env
    wait_for(lambda: all(len(w.served(ns)) >= 5 for ns in ROBOTS), STARTUP_S,
             "5 chunks per robot from the engine worker", lambda: _logs(logs, "policy_server", wspec.name))
    for ns in ROBOTS:
        robot = cfg.robot(ns)
        for c in w.served(ns):
            assert c.robot_id == robot.id and c.task_id == robot.task.name
            assert list(c.joint_names) == list(robot.joints)
            assert c.num_actions * c.action_dim == len(c.actions) and c.action_dim == len(robot.joints)
            assert len(c.confidence) == c.num_actions and 1 <= c.horizon <= c.num_actions
            assert c.inference_ms > 0
    with w.lock:
        # Every chunk an engine produced came from the worker: there is no local engine. (Refusals,
        # e.g. an observation that went stale on a loaded machine, carry no engine instance, and
        # hold chunks come from the robot client.)
        engine_chunks = [c for ns in ROBOTS for c in w.chunks[ns]
                         if c.status != c.STATUS_REFUSED and c.engine_instance != HOLD_ENGINE_INSTANCE]
        assert engine_chunks and all(c.engine_instance == WORKER for c in engine_chunks), \
            sorted({(c.status, c.engine_instance, c.error[:60]) for c in engine_chunks})
    # The engine status is published once a second: the newest one may predate the first batch
    # (a tiny model serves 5 rounds per robot in less than that), so wait for one that counts it.
    wait_for(lambda: w.engine.get("alive") == "True" and int(w.engine.get("batches", 0)) > 0, 10,
             "engine diagnostics counting the worker's batches", lambda: str(w.engine))
    with w.lock:
        assert w.engine["level"] == 0 and w.engine["remote"] == "True"
        assert w.engine["max_batch"] == "4" and w.engine["tier"] == "edge"
        # The profile the scheduler batches by is the one the worker measured (4 points).
        assert w.engine["profile"].count("[") == 5, w.engine["profile"]


def test_worker_death_is_reported_and_a_restarted_worker_serves_again(env):
    cfg, procs, w, wspec, logs = env
    wait_for(lambda: all(len(w.served(ns)) >= 1 for ns in ROBOTS), STARTUP_S, "service")
    stop_processes([procs.pop("worker")])
    wait_for(lambda: w.engine.get("alive") == "False", 20, "the server to report the worker dead",
             lambda: str(w.engine))
    with w.lock:
        assert w.engine["level"] == 2 and "not alive" in w.engine["message"]
    assert procs["policy_server"].poll() is None, "the server keeps running"
    n = {ns: len(w.served(ns)) for ns in ROBOTS}
    procs["worker"] = start_process(wspec, str(logs))
    wait_for(lambda: all(len(w.served(ns)) >= n[ns] + 3 for ns in ROBOTS), STARTUP_S,
             "service from the restarted worker", lambda: _logs(logs, "policy_server", wspec.name))
    wait_for(lambda: w.engine.get("alive") == "True", 10, "the server to report it alive again",
             lambda: str(w.engine))
