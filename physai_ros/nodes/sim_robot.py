"""sim_robot: one simulated arm cell (physai_ros.sim) on ROS topics.

Publishes camera_<i>/image_raw (Image rgb8, sensor-data QoS), wrench (WrenchStamped, sensor-data
QoS), joint_states (JointState, reliable) and task_status (std_msgs/String JSON, reliable,
transient local; sim.runtime.TaskStatus, with the ground-truth subtask and scene of sim.narration a
robot's text is checked against, sent at once when the subtask changes); follows joint_trajectory (JointTrajectory, reliable). /diagnostics through the
monitoring Updater: "<ns>/sim_robot: wrench rate", "joint_states rate", "camera rate",
"commands", "episode". Every SimRobotConfig field is a parameter (fleet.yaml `sim:`), including
the task-pipeline events (intruder_rate_per_min, intruder_duration_s, drop_prob, knock_prob; all off by
default) and task place_in_order; task_status then carries their ground truth (intruder, progress,
failure, subgoal, objects, held; docs/sim_events.md). Service reset_episode (ResetEpisode): ends
the episode at the next tick and starts the next one (a pipeline monitor's "failed" -> retry,
SimRobotRuntime.request_reset); the reply carries the new episode's number. Run:
  python -m physai_ros.nodes.sim_robot --ros-args -r __ns:=/robot_0 -p task:=reach -p num_views:=2
"""
from __future__ import annotations

import os
import sys

from geometry_msgs.msg import WrenchStamped
from physai_ros_interfaces.srv import ResetEpisode
from rclpy.node import Node
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import String
from trajectory_msgs.msg import JointTrajectory

from physai_ros.monitoring.config import load_monitoring
from physai_ros.monitoring.robot_health import CommandHealth, episode_status
from physai_ros.protocol import topics
from physai_ros.ros import qos
from physai_ros.ros.codecs.joint_trajectory import TrajectoryMessageError, msg_to_plan
from physai_ros.ros.diagnostics_updater import FrequencyStatus, FrequencyStatusParam, Updater
from physai_ros.ros.image import make_bridge
from physai_ros.ros.spin import run_node
from physai_ros.ros.time_conv import now_sec, time_from_sec
from physai_ros.sim.runtime import SimRobotConfig, SimRobotRuntime

# Fast DDS' default shared-memory segment (512 KiB) drops most frames above this size.
_LARGE_IMAGE_BYTES = 300_000


def config_from_node(node: Node) -> SimRobotConfig:
    defaults = SimRobotConfig()
    values = {}
    for name, default in vars(defaults).items():
        values[name] = node.declare_parameter(name, default).value
    if not values["robot_id"] or values["robot_id"] == defaults.robot_id:
        ns = node.get_namespace().strip("/")
        values["robot_id"] = ns or defaults.robot_id
    return SimRobotConfig(**values)


class SimRobotNode(Node):
    def __init__(self) -> None:
        super().__init__("sim_robot")
        self.cfg = config_from_node(self)
        self.rt = SimRobotRuntime(self.cfg)
        self.bridges = [make_bridge() for _ in range(self.cfg.num_views)]
        self.cam_pubs = [self.create_publisher(Image, topics.camera_topic(i), qos.sensor_data_qos())
                         for i in range(self.cfg.num_views)]
        self.wrench_pub = self.create_publisher(WrenchStamped, topics.WRENCH_TOPIC, qos.sensor_data_qos())
        self.js_pub = self.create_publisher(JointState, topics.JOINT_STATES_TOPIC, qos.reliable_qos())
        self.status_pub = self.create_publisher(String, topics.TASK_STATUS_TOPIC, qos.latched_qos())
        self.create_subscription(JointTrajectory, topics.JOINT_TRAJECTORY_TOPIC, self._on_trajectory,
                                 qos.reliable_qos())
        self.create_service(ResetEpisode, topics.RESET_EPISODE_SERVICE, self._on_reset_episode)
        self.bad_trajectories = 0
        self.trajectories_received = 0
        self._setup_diagnostics()
        self._wrench = WrenchStamped()
        self._wrench.header.frame_id = f"{self.cfg.robot_id}/wrist"
        self._js = JointState()
        self._js.name = list(self.rt.joint_names)
        frame_bytes = self.cfg.image_width * self.cfg.image_height * 3
        if frame_bytes > _LARGE_IMAGE_BYTES and not os.environ.get("FASTDDS_DEFAULT_PROFILES_FILE"):
            self.get_logger().warning(
                f"{frame_bytes}-byte images exceed Fast DDS' default shared-memory segment; set "
                "FASTDDS_DEFAULT_PROFILES_FILE=config/fastdds_shm.xml or frames will be lost")
        self.timer = self.create_timer(1.0 / self.cfg.physics_rate_hz, self._tick)
        task = self.rt.world.task
        order = f" (order: {', then '.join(task.object_names)})" if task.reads_prompt else ""
        self.get_logger().info(
            f"sim robot {self.cfg.robot_id}: task {self.cfg.task}{order}, {self.cfg.num_joints} joints + gripper, "
            f"{self.cfg.num_views} view(s) {self.cfg.image_width}x{self.cfg.image_height}"
            + (f" (views {self.cfg.view_sizes})" if self.cfg.view_sizes else "") + f", seed {self.cfg.seed}")

    def _setup_diagnostics(self) -> None:
        self._last_bad_trajectory = ""
        # Levels from fleet.yaml's monitoring block (parameter fleet_file; the embedded one by default).
        mon = load_monitoring(self.declare_parameter("fleet_file", "").value or None)
        self.updater = Updater(self, period=mon.diagnostics_period_s)
        self.updater.setHardwareID(self.cfg.robot_id)
        self.freq = {}
        for stream, rate in (("wrench", self.cfg.physics_rate_hz), ("joint_states", self.cfg.joint_state_rate_hz),
                             ("camera", self.cfg.camera_rate_hz)):
            self.freq[stream] = FrequencyStatus(FrequencyStatusParam({"min": rate, "max": rate}, mon.rate_tolerance, 5),
                                                f"{stream} rate")
            self.updater.add(self.freq[stream])
        health = CommandHealth()
        self.updater.add("commands", lambda stat: health.run(
            stat, self.trajectories_received, self.bad_trajectories + self.rt.follower.rejected,
            self.rt.follower.last_error or self._last_bad_trajectory))
        self.updater.add("episode", lambda stat: episode_status(stat, vars(self.rt.status())))

    def _on_trajectory(self, msg: JointTrajectory) -> None:
        self.trajectories_received += 1
        try:
            plan = msg_to_plan(msg, now_sec(self))
        except TrajectoryMessageError as exc:
            self.bad_trajectories += 1
            self._last_bad_trajectory = str(exc)
            self.get_logger().warning(f"rejected joint_trajectory ({self.bad_trajectories} so far): {exc}",
                                      throttle_duration_sec=2.0)
            return
        if not self.rt.on_plan(plan):
            self.get_logger().warning(f"rejected joint_trajectory: {self.rt.follower.last_error}",
                                      throttle_duration_sec=2.0)

    def _on_reset_episode(self, request, response):
        """The episode ends at the next tick (request_reset); its successor is the one after the
        current (a second request before that tick names the same one)."""
        self.rt.request_reset()
        response.accepted = True
        response.episode = int(self.rt.world.episode) + 1
        self.get_logger().info(f"episode reset requested ({request.reason or 'no reason given'}): "
                               f"episode {response.episode} next")
        return response

    def _tick(self) -> None:
        now = now_sec(self)
        out = self.rt.tick(now)
        stamp = time_from_sec(now)
        w = self._wrench
        for t_sample, sample in out.wrench_samples:
            w.header.stamp = time_from_sec(t_sample)
            f, t = sample[:3], sample[3:]
            w.wrench.force.x, w.wrench.force.y, w.wrench.force.z = float(f[0]), float(f[1]), float(f[2])
            w.wrench.torque.x, w.wrench.torque.y, w.wrench.torque.z = float(t[0]), float(t[1]), float(t[2])
            self.wrench_pub.publish(w)
            self.freq["wrench"].tick()
        if out.joint_state is not None:
            js = self._js
            js.header.stamp = stamp
            js.position = [float(v) for v in out.joint_state[0]]
            js.velocity = [float(v) for v in out.joint_state[1]]
            self.js_pub.publish(js)
            self.freq["joint_states"].tick()
        if out.images is not None:
            for i, (img, pub, bridge) in enumerate(zip(out.images, self.cam_pubs, self.bridges)):
                msg = bridge.cv2_to_imgmsg(img, "rgb8")
                msg.header.stamp = stamp
                msg.header.frame_id = f"{self.cfg.robot_id}/camera_{i}"
                pub.publish(msg)
            self.freq["camera"].tick()
        if out.status is not None:
            self.status_pub.publish(String(data=out.status.to_json()))


def main(args: list[str] | None = None) -> int:
    return run_node(SimRobotNode, args)


if __name__ == "__main__":
    sys.exit(main())
