"""A recording node for the network-fault tests, run as its own process inside a namespace.

The test process cannot join the namespaces' DDS domain itself (Fast DDS reads its transport
settings once per process, and other tests in the same pytest process may have set them up
for loopback already), so it starts this probe where it needs eyes and reads the JSON lines the
probe appends to --out, each stamped with the wall clock `t` (one clock for every namespace of
the machine):

  {"kind": "chunk", "ns", "robot", "round", "status", "error", "engine", "stamp", "t"}
  {"kind": "status", "ns", "data": <client_status JSON>, "t"}
  {"kind": "info", "ns", "executing", "accepted", "rejected", "dry", "t"}   (ExecutionInfo)
  {"kind": "obs", "ns", "round", "stamp", "refresh", "t"}                 (Observation)
  {"kind": "diag", "name", "level", "message", "values": {...}, "t"}      (/diagnostics)
  {"kind": "sent", "robot", "round", "t"} / {"kind": "registered", "accepted", "reason", "t"}

With --robot ID --fleet FILE it also plays that fleet robot in a closed loop, without a
simulator: registers (again every 2 s, like robot_client), sends round r with a grey frame,
waits for its chunk (or --answer-timeout), and sends r+2 after --period.
"""
from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--chunks", default="", help="namespaces whose action_chunk to record")
    ap.add_argument("--status", default="", help="namespaces whose client_status to record")
    ap.add_argument("--info", default="", help="namespaces whose execution_info to record")
    ap.add_argument("--obs", default="", help="namespaces whose observations to record (round, stamp)")
    ap.add_argument("--diag", action="store_true", help="record /diagnostics")
    ap.add_argument("--robot", default="")
    ap.add_argument("--fleet", default="")
    ap.add_argument("--period", type=float, default=0.05)
    ap.add_argument("--answer-timeout", type=float, default=6.0)
    a = ap.parse_args(argv)

    import rclpy
    from diagnostic_msgs.msg import DiagnosticArray
    from physai_ros_interfaces.msg import ActionChunk, ExecutionInfo, Observation
    from rclpy.executors import SingleThreadedExecutor
    from std_msgs.msg import String

    from physai_ros.protocol.chunk import HOLD_ENGINE_INSTANCE
    from physai_ros.ros.qos import reliable_qos, sensor_data_qos

    rclpy.init()
    node = rclpy.create_node("netns_probe")
    out = open(a.out, "a", buffering=1)
    lock = threading.Lock()
    answered: dict[int, int] = {}  # round -> status, for the closed loop

    def write(rec: dict) -> None:
        rec["t"] = time.time()
        with lock:
            out.write(json.dumps(rec) + "\n")

    def on_chunk(ns, m):
        stamp = m.header.stamp.sec + m.header.stamp.nanosec * 1e-9
        write({"kind": "chunk", "ns": ns, "robot": m.robot_id, "round": int(m.round_id),
               "status": int(m.status), "error": m.error[:200], "engine": m.engine_instance,
               "stamp": stamp, "horizon": int(m.horizon)})
        if a.robot and m.robot_id == a.robot and m.engine_instance != HOLD_ENGINE_INSTANCE:
            with lock:
                answered[int(m.round_id)] = int(m.status)

    def on_diag(arr):
        for st in arr.status:
            level = st.level[0] if isinstance(st.level, (bytes, bytearray)) else int(st.level)
            write({"kind": "diag", "name": st.name, "level": level, "message": st.message[:300],
                   "values": {kv.key: kv.value for kv in st.values}})

    for ns in filter(None, a.chunks.split(",")):
        node.create_subscription(ActionChunk, f"/{ns}/action_chunk", lambda m, ns=ns: on_chunk(ns, m),
                                 reliable_qos(100))
    for ns in filter(None, a.status.split(",")):
        node.create_subscription(String, f"/{ns}/client_status",
                                 lambda m, ns=ns: write({"kind": "status", "ns": ns, "data": json.loads(m.data)}),
                                 reliable_qos())
    for ns in filter(None, a.info.split(",")):
        node.create_subscription(
            ExecutionInfo, f"/{ns}/execution_info",
            lambda m, ns=ns: write({"kind": "info", "ns": ns, "executing": int(m.executing_round_id),
                                    "accepted": int(m.chunks_accepted), "rejected": int(m.chunks_rejected),
                                    "dry": bool(m.buffer_dry)}),
            sensor_data_qos(10))
    for ns in filter(None, a.obs.split(",")):
        node.create_subscription(
            Observation, f"/{ns}/observation",
            lambda m, ns=ns: write({"kind": "obs", "ns": ns, "round": int(m.round_id), "refresh": bool(m.refresh),
                                    "stamp": m.header.stamp.sec + m.header.stamp.nanosec * 1e-9}),
            reliable_qos(100))
    if a.diag:
        node.create_subscription(DiagnosticArray, "/diagnostics", on_diag, reliable_qos(50))

    stop = threading.Event()
    loop = None
    if a.robot:
        loop = threading.Thread(target=_closed_loop, args=(node, a, write, answered, lock, stop), daemon=True)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    if loop is not None:
        loop.start()
    try:
        while rclpy.ok():
            executor.spin_once(timeout_sec=0.05)
    except KeyboardInterrupt:
        pass
    finally:
        stop.set()
        out.close()
        rclpy.try_shutdown()
    return 0


def _closed_loop(node, a, write, answered, lock, stop) -> None:
    import numpy as np
    from physai_ros_interfaces.msg import Observation
    from physai_ros_interfaces.srv import RegisterRobot

    from physai_ros.protocol.observation import ImageData, ObservationData
    from physai_ros.ros.codecs.observation import observation_to_msg
    from physai_ros.ros.codecs.registration import registration_to_request, result_from_response
    from physai_ros.ros.qos import reliable_qos
    from physai_ros.client.robot_client import RobotClientCore
    from physai_ros.config.fleet import load_fleet

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # test/: the auth rig
    from auth_rig import RobotKeys

    fleet = load_fleet(a.fleet)
    robot = fleet.resolve_robot(a.robot)
    keys = RobotKeys(robot.id, fleet)  # the probe speaks for its robot as a client would
    reg_core = RobotClientCore(robot)
    pub = node.create_publisher(Observation, f"/{robot.namespace}/observation", reliable_qos(10))
    client = node.create_client(RegisterRobot, "/policy_server/register_robot")
    h, w = robot.image_height, robot.image_width
    frame = ImageData(h, w, "rgb8", w * 3, bytes([128]) * (h * w * 3))
    state = np.zeros(len(robot.joints), np.float32)
    r, last_reg, fut = 0, 0.0, None
    registered = False

    def on_reg(f):
        nonlocal registered
        try:
            res = result_from_response(keys.response(f.result()))
        except Exception as e:  # noqa: BLE001 - record and retry
            write({"kind": "registered", "accepted": False, "reason": f"call failed: {e}"})
            return
        registered = registered or res.accepted
        write({"kind": "registered", "accepted": res.accepted, "reason": res.reason})

    while not stop.is_set():
        now = time.monotonic()
        if now - last_reg > 2.0 and client.service_is_ready() and (fut is None or fut.done() or now - last_reg > 5):
            reg_core.round_id = r
            fut = client.call_async(keys.request(registration_to_request(reg_core.registration())))
            fut.add_done_callback(on_reg)
            last_reg = now
        if not registered or pub.get_subscription_count() == 0:
            time.sleep(0.05)
            continue
        r += 2
        obs = ObservationData(
            robot_id=robot.id, task_id=robot.task.name, round_id=r, stamp=time.time(), images=(frame,) * robot.num_views,
            state=state, wrench=np.zeros(6, np.float32), wrench_stamp=0.0, prompt=robot.task.prompt,
            exec_phase_start=0.0, actions_remaining=0, control_period=robot.task.action_period_s,
            horizon_policy=robot.task.horizon_policy, horizon_params=robot.task.horizon_params)
        pub.publish(keys.observation(observation_to_msg(obs)))
        write({"kind": "sent", "robot": robot.id, "round": r})
        end = time.monotonic() + a.answer_timeout
        while not stop.is_set() and time.monotonic() < end:
            with lock:
                if r in answered:
                    break
            time.sleep(0.005)
        stop.wait(a.period)


class ProbeLog:
    """The test's side: the records a probe has written so far (read incrementally)."""

    def __init__(self, path):
        self.path = str(path)
        self._pos = 0
        self._tail = ""
        self.records: list[dict] = []

    def read(self) -> list[dict]:
        try:
            with open(self.path) as f:
                f.seek(self._pos)
                data = f.read()
                self._pos = f.tell()
        except FileNotFoundError:
            return self.records
        lines = (self._tail + data).split("\n")
        self._tail = lines.pop()  # a line still being written
        self.records.extend(json.loads(line) for line in lines if line.strip())
        return self.records

    def chunks(self, since: float = 0.0, **match) -> list[dict]:
        return [r for r in self.read() if r["kind"] == "chunk" and r["t"] >= since
                and all(r.get(k) == v for k, v in match.items())]

    def diag(self, name: str) -> dict | None:
        """The newest /diagnostics status called `name`."""
        for r in reversed(self.read()):
            if r["kind"] == "diag" and r["name"] == name:
                return r
        return None


if __name__ == "__main__":
    sys.exit(main())
