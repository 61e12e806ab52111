"""Real processes for the fault tests, and an in-test ROS node that records what they say.

ProcessRig starts nodes as separate processes (physai_ros.fleet.processes.ProcessGroup), can
SIGKILL one, and spins one in-test node (own rclpy Context) in a thread. Every wait is bounded
and fails at once, with the processes' log tails, when a process that must live has died.
"""
from __future__ import annotations

import os
import signal
import threading
import time
from collections import defaultdict

from physai_ros.fleet.processes import ProcessGroup, ProcessSpec
from physai_ros.ros.codecs.observation import observation_to_msg
from physai_ros.ros.qos import reliable_qos

from faults import fault_fleet
from ros_rig import SpunNode, wait_for
from machine_load import Deadline

# Process start-up (imports, DDS discovery, engine build) on a loaded 2-core machine.
STARTUP_S = 120


def server_spec(name: str, fleet_file: str, env: dict | None = None) -> ProcessSpec:
    return ProcessSpec(name, "physai_ros.nodes.policy_server", "", {"fleet_file": fleet_file},
                       env=dict(env or {}))


class ProcessRig:
    poll_s = 0.02  # how often wait() polls

    def __init__(self, log_dir, node_name: str = "fault_test"):
        from diagnostic_msgs.msg import DiagnosticArray

        self.procs = ProcessGroup(log_dir)
        self.killed: set[str] = set()  # killed on purpose: their exit is not a failure
        self.lock = threading.RLock()  # predicates of wait() may call helpers that lock too
        self.diag: dict[str, dict[str, str]] = {}  # status name -> latest values
        self.diag_status: dict[str, tuple[int, str]] = {}  # status name -> latest (level, message)
        self._spun = SpunNode(node_name)
        self.node = self._spun.node
        self.node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diag, reliable_qos(50))

    # ---- processes ----------------------------------------------------------------------

    def start(self, spec: ProcessSpec):
        return self.procs.start(spec)

    def kill(self, name: str) -> None:
        """SIGKILL: no clean shutdown, no goodbye to DDS (as a crash or a power cut)."""
        for p in self.procs.procs:
            if p.spec.name == name and p.popen.poll() is None:
                self.killed.add(name)
                os.killpg(p.popen.pid, signal.SIGKILL)
                p.popen.wait(timeout=10)

    def assert_alive(self, when: str = "") -> None:
        dead = [d for d in self.procs.exited() if d[0] not in self.killed]
        if dead:
            raise AssertionError(f"process died {when}: {dead}\n{self.logs()}")

    def logs(self, lines: int = 30) -> str:
        return "\n".join(f"--- {p.spec.name} (rc={p.popen.poll()})\n{self.procs.log_tail(p.spec.name, lines)}"
                         for p in self.procs.procs)

    # ---- recording ----------------------------------------------------------------------

    def _on_diag(self, arr):
        with self.lock:
            for st in arr.status:
                self.diag[st.name] = {kv.key: kv.value for kv in st.values}
                lvl = st.level[0] if isinstance(st.level, (bytes, bytearray)) else int(st.level)
                self.diag_status[st.name] = (lvl, st.message)

    @property
    def diag_level(self) -> dict[str, int]:
        """Status name -> latest level."""
        with self.lock:
            return {name: lvl for name, (lvl, _) in self.diag_status.items()}

    def status(self, name: str) -> dict[str, str]:
        """A copy of the latest values of one /diagnostics status ({} until it arrives)."""
        with self.lock:
            return dict(self.diag.get(name, {}))

    def record(self, msg_type, topic: str, qos=None, stamp_arrival: bool = True) -> list:
        """Subscribe `topic`; returns the list that (arrival time, msg) pairs are appended to."""
        out: list = []

        def cb(m):
            with self.lock:
                out.append((time.monotonic(), m) if stamp_arrival else m)
        self.node.create_subscription(msg_type, topic, cb, qos or reliable_qos(100))
        return out

    def stacks_and_logs(self) -> str:
        """On a time-out: every live node process writes its threads' stacks into its log first
        (SIGUSR1, faulthandler: physai_ros.ros.spin), so a hang says where it is. Only node
        processes: SIGUSR1 would kill a process without that handler."""
        asked = False
        for p in self.procs.procs:
            if p.popen.poll() is None and p.spec.module.startswith("physai_ros.nodes."):
                try:
                    os.kill(p.popen.pid, signal.SIGUSR1)
                    asked = True
                except ProcessLookupError:
                    pass
        if asked:
            time.sleep(1.0)  # the dump is written by a C handler at once; the log file is not synced
        return self.logs(lines=80)

    def wait(self, pred, timeout: float, what: str):
        """pred() under the lock until truthy (returned); fails early when a process died."""
        return wait_for(pred, timeout, what, self.stacks_and_logs, lock=self.lock,
                        check=lambda: self.assert_alive(f"waiting for {what}"), poll_s=self.poll_s)

    def keys(self, robot_id: str):
        """The test speaks for `robot_id` as its client would (auth_rig.RobotKeys, one per id)."""
        from auth_rig import RobotKeys

        store = self.__dict__.setdefault("_keys", {})
        if robot_id not in store:
            store[robot_id] = RobotKeys(robot_id, getattr(self, "fleet", None))
        return store[robot_id]

    def register(self, req, timeout: float = STARTUP_S, sign: bool = True):
        """RegisterRobot through the in-test node (async; the executor spins in its thread).
        A request sent before a (re)started server's service reader matched is lost: resend.
        Signed with the robot's key (sign=False: as a stranger would send it); an accepted
        answer starts the test's session, so `signed_observation` tags what it sends."""
        from physai_ros_interfaces.srv import RegisterRobot

        client = getattr(self, "_register_client", None)
        if client is None:
            client = self._register_client = self.node.create_client(RegisterRobot,
                                                                     "/policy_server/register_robot")
        deadline = Deadline(timeout)
        while not deadline.expired():
            if not client.service_is_ready():
                self.assert_alive("waiting for the registration service")
                time.sleep(0.1)
                continue
            if sign:
                self.keys(req.robot_id).request(req)
            fut = client.call_async(req)
            resend = time.monotonic() + min(deadline.remaining(), 5.0)
            while not fut.done() and time.monotonic() < resend:
                self.assert_alive("during a registration call")
                time.sleep(0.02)
            if fut.done():
                resp = fut.result()
                return self.keys(req.robot_id).response(resp) if sign else resp
            client.remove_pending_request(fut)
        raise AssertionError(f"registration got no answer in {deadline.describe()}\n{self.logs()}")

    def signed_observation(self, msg):
        """An Observation tagged with its robot's session (register it first)."""
        return self.keys(msg.robot_id).observation(msg)

    def close(self):
        try:
            self._spun.close()
        finally:
            self.procs.stop(grace_s=5.0)


def wait_quiet(rig: ProcessRig, seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        rig.assert_alive()
        time.sleep(0.05)


def by_round(chunks) -> dict:
    out = defaultdict(list)
    for _, c in chunks:
        out[c.round_id].append(c)
    return out


class ClosedLoop:
    """One robot in the test process: send round r, wait (bounded) for its answer, send r+2."""

    def __init__(self, rig: ProcessRig, rid: str, answer_timeout_s: float = 30.0):
        from physai_ros_interfaces.msg import ActionChunk, Observation

        self.rig, self.rid, self.timeout = rig, rid, answer_timeout_s
        self.pub = rig.node.create_publisher(Observation, f"/{rid}/observation", reliable_qos(100))
        self.chunks = rig.record(ActionChunk, f"/{rid}/action_chunk")
        self.sent: list[int] = []
        self.unanswered: list[int] = []  # rounds given up after the timeout
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> "ClosedLoop":
        self._thread.start()
        return self

    def answered(self, round_id: int) -> bool:
        with self.rig.lock:
            return any(c.round_id == round_id for _, c in self.chunks)

    def _loop(self):
        r = 2
        while not self._stop.is_set():
            with self.rig.lock:
                self.sent.append(r)
            self.pub.publish(self.rig.signed_observation(observation_to_msg(fault_fleet.obs(self.rid, r))))
            end = time.monotonic() + self.timeout
            while not self._stop.is_set() and not self.answered(r):
                if time.monotonic() > end:
                    self.unanswered.append(r)
                    break
                time.sleep(0.005)
            r += 2
            self._stop.wait(0.05)

    def ok(self) -> list:
        return [c for _, c in self.chunks if c.status == 0]  # ActionChunk.STATUS_OK

    def assert_answered_exactly_once(self) -> None:
        """Every round sent was answered once, OK (the newest may still be in flight); hold rig.lock."""
        answers: dict[int, int] = {}
        for _, c in self.chunks:
            answers[c.round_id] = answers.get(c.round_id, 0) + 1
        assert all(n == 1 for n in answers.values()), (self.rid, answers)
        assert self.unanswered == [] and set(self.sent[:-1]) <= set(answers), (self.rid, self.sent, answers)
        assert all(c.status == 0 for _, c in self.chunks), [c.error for _, c in self.chunks if c.status]

    def stop(self):
        self._stop.set()
        self._thread.join(timeout=5)
