"""fleet.yaml's robots: each robot's id and namespace, its task, its cameras (sizes, names, raw or
compressed) and the topics its nodes read."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from physai_ros.config.task import TaskConfig
from physai_ros.config_fields import (FleetConfigError, integer, join_key, mapping, no_unknown, number, required,
                                      string, strings)
from physai_ros.protocol.topics import JOINT_STATES_TOPIC, WRENCH_TOPIC, camera_topic

CAMERA_FORMATS = ("raw", "compressed")  # sensor_msgs/Image | sensor_msgs/CompressedImage


@dataclass(frozen=True)
class RobotConfig:
    id: str
    namespace: str
    task: TaskConfig
    camera_topics: tuple[str, ...]
    image_height: int
    image_width: int
    wrench_topic: str
    joint_states_topic: str
    joints: tuple[str, ...]
    control_rate_hz: float
    simulated: bool
    sim: Mapping[str, Any] = field(default_factory=dict)
    camera_format: str = "raw"
    # (height, width) of each camera when they differ (`cameras: [{topic, height, width}, ...]`);
    # empty: every camera is image_height x image_width.
    camera_sizes: tuple[tuple[int, int], ...] = ()
    # The checkpoint image feature each camera feeds (`cameras: [{topic, feature}]`); (): in order.
    camera_features: tuple[str, ...] = ()

    @property
    def num_views(self) -> int:
        return len(self.camera_topics)

    def camera_size(self, i: int) -> tuple[int, int]:
        return self.camera_sizes[i] if self.camera_sizes else (self.image_height, self.image_width)


_ROBOT_KEYS = {"id", "namespace", "task", "cameras", "image_height", "image_width", "wrench_topic",
               "joint_states_topic", "joints", "control_rate_hz", "simulated", "sim", "camera_format"}


def parse_robot(i: int, d: Any, tasks: Mapping[str, TaskConfig]) -> RobotConfig:
    path = f"robots[{i}]"
    d = mapping(d, path)
    no_unknown(d, _ROBOT_KEYS, path)
    rid = string(required(d, "id", path), join_key(path, "id"))
    if not rid.replace("_", "a").isalnum() or rid[0].isdigit():
        raise FleetConfigError(
            f"{path}.id: expected letters, digits and '_' not starting with a digit "
            f"(it becomes a ROS namespace), got {rid!r}")
    task_name = string(required(d, "task", path), join_key(path, "task"))
    if task_name not in tasks:
        raise FleetConfigError(f"{path}.task: expected one of {sorted(tasks)}, got {task_name!r}")
    ns = string(d.get("namespace", rid), join_key(path, "namespace")).strip("/")
    sim = d.get("sim", {})
    sim = dict(mapping(sim, join_key(path, "sim")))
    joints = strings(required(d, "joints", path), join_key(path, "joints"), 1)
    if d.get("simulated", True):
        n = sim.get("num_joints", 4)
        want = tuple(f"joint_{k}" for k in range(int(n))) + ("gripper",) if isinstance(n, int) else None
        if joints != want:
            raise FleetConfigError(
                f"{path}.joints: a simulated arm with sim.num_joints={n} has joints {list(want or [])}, "
                f"got {list(joints)}")
    camera_format = string(d.get("camera_format", "raw"), join_key(path, "camera_format"), CAMERA_FORMATS)
    if camera_format == "compressed" and d.get("simulated", True):
        raise FleetConfigError(
            f"{path}.camera_format: 'compressed' needs simulated: false (sim_robot publishes raw "
            f"sensor_msgs/Image only)")
    image_height = integer(d.get("image_height", 224), join_key(path, "image_height"), 1)
    image_width = integer(d.get("image_width", 224), join_key(path, "image_width"), 1)
    topics, sizes, features = _cameras(required(d, "cameras", path), join_key(path, "cameras"),
                                       (image_height, image_width))
    if d.get("simulated", True):
        # sim_robot publishes camera_topic(i): another name would leave the client with no frames.
        want_topics = tuple(camera_topic(i) for i in range(len(topics)))
        if topics != want_topics:
            raise FleetConfigError(f"{path}.cameras: a simulated robot publishes {list(want_topics)}, "
                                   f"got {list(topics)}")
    return RobotConfig(
        id=rid,
        namespace=ns,
        task=tasks[task_name],
        camera_topics=topics,
        image_height=image_height,
        image_width=image_width,
        camera_sizes=() if all(hw == (image_height, image_width) for hw in sizes) else sizes,
        camera_features=features,
        wrench_topic=string(d.get("wrench_topic", WRENCH_TOPIC), join_key(path, "wrench_topic")),
        joint_states_topic=string(d.get("joint_states_topic", JOINT_STATES_TOPIC),
                                join_key(path, "joint_states_topic")),
        joints=joints,
        control_rate_hz=number(d.get("control_rate_hz", 480.0), join_key(path, "control_rate_hz")),
        simulated=bool(d.get("simulated", True)),
        sim=sim,
        camera_format=camera_format,
    )


def _cameras(v: Any, path: str, default: tuple[int, int]
             ) -> tuple[tuple[str, ...], tuple[tuple[int, int], ...], tuple[str, ...]]:
    """`cameras:` (1..3, unique topics): topic strings, or {topic, height, width, feature} for a
    camera of its own size (height and width default to the robot's image_height / image_width)
    and the checkpoint image feature it feeds (every camera names one, or none does)."""
    if not isinstance(v, list):
        strings(v, path, 1, 3)  # raises its "expected a list of non-empty strings"
    topics, sizes, features = [], [], []
    for i, cam in enumerate(v):
        key = f"{path}[{i}]"
        if not isinstance(cam, dict):
            topics.append(cam)  # strings() below says what is wrong with a non-string
            sizes.append(default)
            continue
        no_unknown(cam, {"topic", "height", "width", "feature"}, key)
        topics.append(string(required(cam, "topic", key), join_key(key, "topic")))
        sizes.append((integer(cam.get("height", default[0]), join_key(key, "height"), 1),
                      integer(cam.get("width", default[1]), join_key(key, "width"), 1)))
        if "feature" in cam:
            features.append(string(cam["feature"], join_key(key, "feature")))
    if features and len(features) != len(v):
        raise FleetConfigError(f"{path}: name the checkpoint feature of every camera or of none "
                               f"({len(features)} of {len(v)} have `feature`)")
    return strings(topics, path, 1, 3), tuple(sizes), tuple(features)
