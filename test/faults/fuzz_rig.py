"""A real policy_server and trajectory_controller, and an in-test node that talks to them.

The test process plays two robots of a three-robot fleet: `good`, a well-formed robot served in a
closed loop by a background thread (its own round ids, one request outstanding at a time), and
`fuzz`, registered properly but then fed malformed input. It also drives a controller process
in the namespace `ctl`. The third robot, `cl`, is a real robot_client process (started by the
test that needs it) fed camera frames, joint states and wrench samples by the test. Every wait is bounded; processes are killed in teardown.
"""
from __future__ import annotations

import array
import threading
import time

from physai_ros.fleet.processes import ProcessSpec
from physai_ros.ros.qos import reliable_qos

from auth_rig import ServerKeys
from process_rig import ProcessRig

IMAGE_HW = (32, 32)  # small frames: the fuzz is about the checks, not the letterbox cost
MAX_AGE_S = 10.0  # server.max_observation_age_s; the stale fuzz sends older stamps than this
JOINTS = ["joint_0", "joint_1", "joint_2", "joint_3", "gripper"]
CTL_JOINTS = ["j0", "j1", "j2", "j3"]

FLEET_YAML = """
server:
  model: {{preset: tiny, tokenizer: package://physai_ros/assets/tokenizer.json, max_token_len: 48}}
  device: cpu
  engine_instances: 1
  max_batch: 8
  scheduler: fifo
  profile: false                # start-up profiling measures nothing the fuzz needs
  # The well-formed robot's frames must never be refused as stale: a CI run on a busy machine had
  # one 2.1 s old at the server with a 2 s limit (and every later test then failed on it).
  max_observation_age_s: {max_age_s}
tasks:
  pick_place:
    prompt: "pick up the cube and place it on the goal"
    action_rate_hz: 10
    horizon_policy: {{name: static, params: [8]}}
    slo_ms: 10000                 # the fuzz is about refusals: a loaded machine must not stop the client
    fallback: hold
    max_consecutive_slo_violation: 100
    on_max_violation: stop_and_call_human
robots:
{robots}
monitoring:
  rate_tolerance: 0.25
  thresholds:
    latency_ms_p99: {{warn: 0.001, error: 1000000}}   # any served round makes the server's robot status WARN
    camera_hz: {{warn_below: 1000, error_below: 500}} # the test's 20 Hz feed makes the client's status ERROR
"""
ROBOT_YAML = """  - id: {id}
    task: pick_place
    sim: {{task: pick_and_place, num_joints: 4, seed: 0}}
    cameras: [camera_0/image_raw]
    image_height: {h}
    image_width: {w}
    joints: [{joints}]
    control_rate_hz: 480
    simulated: true
"""


def write_fleet(path) -> str:
    robots = "".join(ROBOT_YAML.format(id=r, h=IMAGE_HW[0], w=IMAGE_HW[1], joints=", ".join(JOINTS))
                     for r in ("good", "fuzz", "cl"))
    path.write_text(FLEET_YAML.format(robots=robots, max_age_s=MAX_AGE_S))
    return str(path)


def now_s() -> float:
    return time.time()


def stamp(msg_time, t: float) -> None:
    ns = int(round(t * 1e9))
    msg_time.sec, msg_time.nanosec = ns // 10**9, ns % 10**9


def image(h=IMAGE_HW[0], w=IMAGE_HW[1], encoding="rgb8", channels=3, step=None, nbytes=None):
    from sensor_msgs.msg import Image

    m = Image()
    m.height, m.width, m.encoding = h, w, encoding
    m.step = w * channels if step is None else step
    n = h * m.step if nbytes is None else nbytes
    m.data = array.array("B", bytes(n))
    return m


def observation(robot_id: str, round_id: int, t: float | None = None, **over):
    from physai_ros_interfaces.msg import Observation

    m = Observation()
    stamp(m.header.stamp, now_s() if t is None else t)
    m.robot_id, m.task_id, m.round_id = robot_id, "pick_place", round_id
    m.images = [image()]
    m.state = array.array("f", [0.0] * len(JOINTS))
    m.control_period = 0.1
    for k, v in over.items():
        setattr(m, k, v)
    return m


def registration(robot_id: str, **over):
    from physai_ros_interfaces.srv import RegisterRobot

    r = RegisterRobot.Request()
    r.robot_id, r.task_id, r.robot_namespace = robot_id, "pick_place", "/" + robot_id
    r.prompt = "pick up the cube and place it on the goal"
    r.camera_topics = ["camera_0/image_raw"]
    r.num_views, r.image_height, r.image_width = 1, IMAGE_HW[0], IMAGE_HW[1]
    r.joint_names = list(JOINTS)
    r.state_dim = r.action_dim = len(JOINTS)
    r.control_period = 0.1
    for k, v in over.items():
        setattr(r, k, v)
    return r


class SigningPublisher:
    """A publisher that signs (`sign(msg) -> msg`) what it publishes."""

    def __init__(self, pub, sign):
        self.pub, self.sign = pub, sign

    def publish(self, msg) -> None:
        self.pub.publish(self.sign(msg))

    def get_subscription_count(self) -> int:
        return self.pub.get_subscription_count()


class Rig(ProcessRig):
    """The processes plus a spinning in-test node recording what comes back. A server that a
    test crashed counts as `killed` once ensure_server() replaced it."""

    poll_s = 0.01

    def __init__(self, tmp_path):
        from physai_ros_interfaces.msg import ActionChunk, ExecutionInfo, Observation

        super().__init__(tmp_path / "logs", "fuzz_test")
        self.fleet_file = write_fleet(tmp_path / "fleet.yaml")
        self.server_name = "policy_server"
        self.procs.start(ProcessSpec(self.server_name, "physai_ros.nodes.policy_server", "",
                                     {"fleet_file": self.fleet_file}))
        self.procs.start(ProcessSpec("controller", "physai_ros.nodes.trajectory_controller", "ctl",
                                     {"robot_id": "ctl", "joint_names": CTL_JOINTS, "fleet_file": self.fleet_file,
                                      "control_rate_hz": 100.0, "execution_info_rate_hz": 50.0}))
        self.info = None  # latest ExecutionInfo of the controller
        self.info_seq = 0
        n = self.node
        self.chunks = {ns: self.record(ActionChunk, f"/{ns}/action_chunk", stamp_arrival=False)
                       for ns in ("good", "fuzz", "cl")}  # namespace -> [ActionChunk]
        # The test speaks as the robots `good` and `fuzz` (their keys, their sessions) and as
        # the server to the controller: its malformed input is authentic, so what it tests is
        # the validation behind the authentication. raw_* publishers send messages as they are.
        self.raw_obs_pub = {ns: n.create_publisher(Observation, f"/{ns}/observation", reliable_qos(100))
                            for ns in ("good", "fuzz")}
        self.obs_pub = {ns: SigningPublisher(pub, lambda m, ns=ns: self.keys(ns).observation(m))
                        for ns, pub in self.raw_obs_pub.items()}
        self.raw_chunk_pub = n.create_publisher(ActionChunk, "/ctl/action_chunk", reliable_qos(100))
        self.server_keys = ServerKeys()
        self.chunk_pub = SigningPublisher(self.raw_chunk_pub, self.server_keys.chunk)
        n.create_subscription(ExecutionInfo, "/ctl/execution_info", self._on_info, reliable_qos())
        self._stop = threading.Event()  # ends the well-formed robot's loop
        self.good_sent: list[int] = []
        self.good_latency: list[tuple[float, float]] = []  # (monotonic send time, round trip s)
        self.good_thread: threading.Thread | None = None

    def _on_info(self, m):
        with self.lock:
            self.info = m
            self.info_seq += 1

    def ensure_server(self) -> None:
        """After a test crashed the server, start a fresh one so the next test shows its own
        result instead of the same crash again (the crash already failed that test)."""
        if not any(n == self.server_name for n, _ in self.procs.exited()):
            return
        self.killed.add(self.server_name)
        self.server_name = f"policy_server_{len(self.killed) + 1}"
        self.procs.start(ProcessSpec(self.server_name, "physai_ros.nodes.policy_server", "",
                                     {"fleet_file": self.fleet_file}))
        for rid in ("good", "fuzz"):
            resp = self.register(registration(rid), timeout=240.0)
            assert resp.accepted, resp.reason

    def server_counts(self, robot_id: str) -> dict[str, str]:
        with self.lock:
            return dict(self.diag.get(f"policy_server: {robot_id}", {}))

    # ---- the well-formed robot ----------------------------------------------------------

    def start_good_robot(self, period_s: float = 0.2, timeout_s: float = 20.0):
        """Closed loop: send round r, wait for its chunk, pause, send r+2. Runs until close()."""
        def loop():
            r = 2
            while not self._stop.is_set():
                self.good_sent.append(r)
                t0 = time.monotonic()
                self.obs_pub["good"].publish(observation("good", r))
                end = t0 + timeout_s
                while not self._stop.is_set() and time.monotonic() < end:
                    with self.lock:
                        if any(c.round_id == r for c in self.chunks["good"]):
                            self.good_latency.append((t0, time.monotonic() - t0))
                            break
                    time.sleep(0.01)
                r += 2
                self._stop.wait(period_s)

        self.good_thread = threading.Thread(target=loop, daemon=True)
        self.good_thread.start()

    def good_answered(self) -> list[int]:
        with self.lock:
            return [c.round_id for c in self.chunks["good"] if c.status == 0]

    def good_problems(self) -> list[str]:
        """Anything the good robot got that is not an OK answer to a round it sent."""
        sent = set(self.good_sent)
        with self.lock:
            return [f"round {c.round_id} status {c.status} {c.error!r} robot {c.robot_id!r}"
                    for c in self.chunks["good"]
                    if c.status != 0 or c.round_id not in sent or c.robot_id != "good"]

    def close(self):
        self._stop.set()
        if self.good_thread is not None:
            self.good_thread.join(timeout=5)
        super().close()
