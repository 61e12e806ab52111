"""policy_server: serves the pi0 engine to every registered robot over ROS 2.

ROS I/O only; the logic is physai_ros.serving.core.ServingCore.
  service  /policy_server/register_robot  (physai_ros_interfaces/RegisterRobot)
  sub      /<ns>/observation               (Observation, reliable), one per registered robot
  pub      /<ns>/action_chunk              (ActionChunk, reliable), answers and refusals
  pub      /<ns>/observation_refresh       (std_msgs/UInt64, reliable): resend this round fresh
  pub      /diagnostics                    (diagnostic_msgs/DiagnosticArray, 1 Hz)
Parameters: fleet_file (default: the embedded config/fleet.yaml).
Inference runs in serving.runner's threads (one per engine instance, so instances compute
concurrently); DDS callbacks never wait for the engine.
"""
from __future__ import annotations

import threading

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from physai_ros_interfaces.msg import ActionChunk, Observation
from physai_ros_interfaces.srv import RegisterRobot
from rclpy.node import Node
from std_msgs.msg import UInt64

from physai_ros.ros.spin import run_node
from physai_ros.ros.qos import ACTION_CHUNK_TOPIC, reliable_qos
from physai_ros.serving.config import load_fleet
from physai_ros.serving.factory import build_core, profile_local_engines
from physai_ros.serving.runner import ServingRunner
from physai_ros.serving.topics import OBSERVATION_TOPIC, REFRESH_TOPIC, REGISTER_SERVICE
from physai_ros.serving.ros_msgs import (chunk_to_msg, observation_from_msg,
                                         registration_from_request)



class PolicyServerNode(Node):
    def __init__(self):
        super().__init__("policy_server")
        fleet_file = self.declare_parameter("fleet_file", "").value or None
        self.fleet = load_fleet(fleet_file)
        # Remote engine proxies publish and subscribe through this node: its executor delivers
        # their results while the worker thread waits in infer().
        self.core = build_core(self.fleet, node=self)
        # Measuring the profile runs every batch size once unmeasured first: it is the warm-up.
        profiled = profile_local_engines(self.core, self.fleet)
        warm_s = max(profiled.values()) if profiled else self.core.warm_up()
        self._robots: dict[str, tuple] = {}  # namespace -> (sub, chunk pub, refresh pub)
        self._pubs_by_robot: dict[str, tuple] = {}
        self._pub_lock = threading.Lock()
        self.create_service(RegisterRobot, REGISTER_SERVICE, self._on_register)
        self._diag = self.create_publisher(DiagnosticArray, "/diagnostics", reliable_qos())
        self.create_timer(1.0, self._publish_diagnostics)
        # Known robots get their topics now, so DDS discovery is done before the first chunk
        # (a reliable, volatile publisher drops what it sends before a subscriber matches).
        for robot in self.fleet.robots:
            self._ensure_topics(robot.id, robot.namespace)
        self._stop = threading.Event()
        self._runner = ServingRunner(self.core, self._publish_chunks, self._publish_refresh,
                                     self.get_logger().error).start()
        self.get_logger().info(
            f"serving {self.fleet.server.model.preset or self.fleet.server.model.checkpoint} with "
            f"{len(self.core.engines)} engine instance(s), scheduler {self.fleet.server.scheduler}, "
            f"instance {self.core.instance_id} (warm-up {warm_s * 1e3:.0f} ms"
            + (", profiles " + "; ".join(
                f"{iid}: " + " ".join(f"{b}:{t * 1e3:.0f}ms" for b, t in self.core.engines[iid].profile.to_pairs())
                for iid in profiled) if profiled else "") + ")")

    # ---- registration and per-robot topics ----------------------------------------------

    def _on_register(self, request, response):
        try:
            reg = registration_from_request(request)
            res = self.core.register(reg)
        except Exception as e:  # a malformed request must not take the service down
            response.accepted, response.reason = False, f"bad_registration: {e}"
            response.server_instance = self.core.instance_id
            return response
        response.accepted, response.reason, response.server_instance = (
            res.accepted, res.reason, res.server_instance)
        if res.accepted:
            self._ensure_topics(reg.robot_id, reg.robot_namespace)
        else:
            self.get_logger().warning(f"refused registration of {reg.robot_id!r}: {res.reason}")
        return response

    def _ensure_topics(self, robot_id: str, namespace: str) -> None:
        ns = "/" + namespace.strip("/") if namespace.strip("/") else ""
        with self._pub_lock:
            if ns not in self._robots:
                chunk_pub = self.create_publisher(ActionChunk, f"{ns}/{ACTION_CHUNK_TOPIC}",
                                                  reliable_qos())
                refresh_pub = self.create_publisher(UInt64, f"{ns}/{REFRESH_TOPIC}", reliable_qos())
                sub = self.create_subscription(Observation, f"{ns}/{OBSERVATION_TOPIC}",
                                               self._on_observation, reliable_qos())
                self._robots[ns] = (sub, chunk_pub, refresh_pub)
            self._pubs_by_robot[robot_id] = self._robots[ns]

    def _on_observation(self, msg: Observation) -> None:
        try:
            obs = observation_from_msg(msg)
        except Exception as e:
            self.get_logger().warning(f"unreadable observation from {msg.robot_id!r}: {e}")
            return
        for chunk in self.core.submit(obs):
            self._publish(chunk)

    def _publish(self, chunk) -> None:
        with self._pub_lock:
            pubs = self._pubs_by_robot.get(chunk.robot_id)
        if pubs is None:
            # Unknown robot: nowhere to answer on; the refusal is still counted by the core.
            return
        try:
            pubs[1].publish(chunk_to_msg(chunk))
        except Exception as e:  # shutting down (context gone) or a broken message
            if not self._stop.is_set():
                self.get_logger().error(f"publishing a chunk for {chunk.robot_id} failed: {e}")

    # ---- inference: serving.runner's threads call these -----------------------------------

    def _publish_chunks(self, chunks) -> None:
        for chunk in chunks:
            self._publish(chunk)

    def _publish_refresh(self, robot_id: str, round_id: int) -> None:
        with self._pub_lock:
            pubs = self._pubs_by_robot.get(robot_id)
        if pubs is not None and not self._stop.is_set():
            pubs[2].publish(UInt64(data=int(round_id)))

    def _publish_diagnostics(self) -> None:
        arr = DiagnosticArray()
        arr.header.stamp = self.get_clock().now().to_msg()
        for rid, d in self.core.diagnostics().items():
            st = DiagnosticStatus()
            st.name = f"policy_server: {rid}"
            st.hardware_id = rid
            st.level = DiagnosticStatus.WARN if d["refused_total"] or d["errors"] else DiagnosticStatus.OK
            st.message = (f"{d['rounds']} rounds, {d['refused_total']} refused"
                          + (f" ({', '.join(f'{k}={v}' for k, v in sorted(d['refused'].items()))})"
                             if d["refused"] else ""))
            st.values = [KeyValue(key=k, value=str(v)) for k, v in d.items() if k != "refused"]
            st.values += [KeyValue(key=f"refused.{k}", value=str(v)) for k, v in d["refused"].items()]
            arr.status.append(st)
        for iid, d in self.core.engine_diagnostics().items():
            st = DiagnosticStatus()
            st.name = f"policy_server: engine {iid}"
            st.hardware_id = iid
            st.level = DiagnosticStatus.OK if d.get("alive") else DiagnosticStatus.ERROR
            st.message = "alive" if d.get("alive") else f"not alive: {d.get('why_not_alive', '')}"
            st.values = [KeyValue(key=k, value=str(v)) for k, v in d.items()]
            arr.status.append(st)
        self._diag.publish(arr)

    def close(self) -> None:
        """Called by run_node before destroy_node: stop the worker while publishers still exist."""
        self._stop.set()
        self._runner.stop(timeout=5.0)


def main(argv: list[str] | None = None) -> int:
    # run_node: clean exit on SIGINT and SIGTERM (spin_once loop; see physai_ros.ros.spin).
    return run_node(PolicyServerNode, argv)


if __name__ == "__main__":
    raise SystemExit(main())
