"""fleet.yaml: one description of the server, the tasks and the robots (ROSA Figure 3 spirit).

Loading validates everything up front so that a typo fails at start-up with the key's full path
and what was expected, instead of surfacing later as a confusing runtime error in one process.
This module holds the tasks, the robots and the file as a whole; the `server:` section is
config.server, the validation helpers config_fields.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

from physai_ros.install_paths import PACKAGE_URL_PREFIX, default_fleet_file, resolve_package_url
from physai_ros.pipeline.config import PIPELINE_KEYS, TaskLevel, TaskPipelineConfig, first_pipeline_key, \
    parse_task_pipeline
from physai_ros.protocol.topics import JOINT_STATES_TOPIC, WRENCH_TOPIC
from physai_ros.security.config import SecurityConfig

from physai_ros.config.chunk_merge import ChunkMergeConfig, parse_chunk_merge
from physai_ros.config.factory import FactoryConfig, parse_factory
from physai_ros.config.language import TaskLanguageConfig, parse_task_language
from physai_ros.config.server import ServerConfig, parse_server
from physai_ros.config_fields import (FleetConfigError, integer, join_key, mapping, no_unknown, number, required,
                            string, strings)

PACKAGE_PREFIX = PACKAGE_URL_PREFIX
FALLBACKS = ("hold", "stop_and_resend", "use_last_plan")
ESCALATIONS = ("stop_and_call_human",)
BUILTIN_HORIZON_POLICIES = ("static", "confidence")
CAMERA_FORMATS = ("raw", "compressed")  # sensor_msgs/Image | sensor_msgs/CompressedImage
TASK_MODES = ("chunked", "streaming")  # ActionChunk answers | TrajectorySegment stream


@dataclass(frozen=True)
class TaskConfig:
    name: str
    prompt: str
    action_rate_hz: float
    horizon_policy: str
    horizon_params: tuple[float, ...]
    slo_ms: float
    fallback: str
    max_consecutive_slo_violation: int
    on_max_violation: str
    trigger_margin_s: float
    mode: str = "chunked"  # "streaming": TrajectorySegments from the server's streams
    # Misses within this long of the robot's first request run the fallback but do not count
    # toward max_consecutive_slo_violation (control/deadline.py).
    slo_startup_grace_s: float = 60.0
    segment_rate_hz: float = 60.0  # streaming: TrajectorySegment messages per second (at most)
    # How consecutive chunks join: off (replace) | crossfade | rtc (config.chunk_merge, docs/rtc.md).
    chunk_merge: ChunkMergeConfig = ChunkMergeConfig()
    # The language stream (config.language): what its robots are asked; None: nothing.
    language: TaskLanguageConfig | None = None
    # The task pipeline (pipeline.config, docs/pipelines.md): System 2, safety, monitor, retry
    # and violation policies; None: System 1 only (a task without the pipeline keys).
    pipeline: TaskPipelineConfig | None = None

    @property
    def action_period_s(self) -> float:
        return 1.0 / self.action_rate_hz


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


@dataclass(frozen=True)
class FleetConfig:
    server: ServerConfig
    tasks: Mapping[str, TaskConfig]
    robots: tuple[RobotConfig, ...]
    source: str
    security: SecurityConfig = SecurityConfig()
    # The cluster to plan a factory schedule for (config.factory, docs/factory.md).
    factory: FactoryConfig | None = None

    def robot(self, robot_id: str) -> RobotConfig:
        for r in self.robots:
            if r.id == robot_id:
                return r
        raise KeyError(robot_id)

    def resolve_robot(self, robot_id: str) -> RobotConfig:
        """A listed robot, or robot_<k> beyond the list as with_num_robots(k + 1) makes it."""
        try:
            return self.robot(robot_id)
        except KeyError:
            k = robot_id.rpartition("_")[2]
            if robot_id.startswith("robot_") and k.isdigit():
                return self.with_num_robots(int(k) + 1).robot(robot_id)
            raise KeyError(f"robot {robot_id!r} is not in {self.source}") from None

    def with_checkpoint(self, path: str | Path) -> "FleetConfig":
        """server.model.checkpoint replaced (physai-fleet --checkpoint), the preset dropped. A
        relative path is taken from the working directory, not the fleet file's: it was typed
        on a command line."""
        path = str(path)
        if not path.startswith(PACKAGE_PREFIX):
            path = str(Path(path).expanduser().resolve())
        model = _replace(self.server.model, checkpoint=path, preset=None)
        return _replace(self, server=_replace(self.server, model=model))

    def with_num_robots(self, n: int) -> "FleetConfig":
        """The first n robots; beyond the listed ones, clones of the last entry (robot_<k>)."""
        if n < 1:
            raise FleetConfigError(f"num_robots: expected an integer >= 1, got {n}")
        robots = list(self.robots[:n])
        template = self.robots[-1]
        k = len(robots)
        used = {r.id for r in robots}
        while len(robots) < n:
            rid = f"robot_{k}"
            k += 1
            if rid in used:
                continue
            used.add(rid)
            robots.append(_replace(template, id=rid, namespace=rid))
        return FleetConfig(self.server, self.tasks, tuple(robots), self.source, self.security)


def _replace(obj: Any, **kw: Any) -> Any:
    from dataclasses import replace

    return replace(obj, **kw)


def resolve_package_path(path: str, base_dir: Path | None = None) -> Path:
    """`package://physai_ros/<rel>` -> the installed file (physai_ros.install_paths: the same
    rule for a source checkout, a colcon install and a pip install); other relative paths are
    relative to the yaml."""
    if path.startswith(PACKAGE_PREFIX):
        return resolve_package_url(path)
    p = Path(path).expanduser()
    if not p.is_absolute() and base_dir is not None:
        p = base_dir / p
    return p


def default_fleet_path() -> Path:
    return default_fleet_file()


def _parse_horizon(v: Any, path: str) -> tuple[str, tuple[float, ...]]:
    v = mapping(v, path)
    no_unknown(v, {"name", "params"}, path)
    name = string(required(v, "name", path), join_key(path, "name"))
    if name not in BUILTIN_HORIZON_POLICIES and ":" not in name:
        raise FleetConfigError(
            f"{path}.name: expected 'static', 'confidence' or 'package.module:Class', got {name!r}")
    params = v.get("params", [])
    if not isinstance(params, list) or not all(
            isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in params):
        raise FleetConfigError(f"{path}.params: expected a list of finite numbers, got {params!r}")
    if name == "static" and (len(params) != 1 or params[0] < 1 or params[0] != int(params[0])):
        raise FleetConfigError(f"{path}.params: static expects [H] with integer H >= 1, got {params!r}")
    if name == "confidence" and (len(params) != 2 or params[0] < 0 or params[1] < 1):
        raise FleetConfigError(
            f"{path}.params: confidence expects [t >= 0, H_min >= 1], got {params!r}")
    return name, tuple(float(x) for x in params)


def _parse_task(name: str, d: Any) -> TaskConfig:
    path = f"tasks.{name}"
    d = mapping(d, path)
    no_unknown(d, {"prompt", "action_rate_hz", "horizon_policy", "slo_ms", "fallback",
                    "max_consecutive_slo_violation", "on_max_violation", "trigger_margin_s", "mode",
                    "segment_rate_hz", "chunk_merge", "language", "slo_startup_grace_s", *PIPELINE_KEYS}, path)
    hp, hparams = _parse_horizon(required(d, "horizon_policy", path), join_key(path, "horizon_policy"))
    mode = string(d.get("mode", "chunked"), join_key(path, "mode"), TASK_MODES)
    # System 1's prompt, SLO, fallback and violation policy: at task level, or (a task with a
    # pipeline) in its pipeline keys, or both when equal (pipeline.config, docs/pipelines.md).
    level = TaskLevel(
        prompt=string(d["prompt"], join_key(path, "prompt")) if "prompt" in d else None,
        slo_ms=number(d["slo_ms"], join_key(path, "slo_ms")) if "slo_ms" in d else None,
        fallback=string(d["fallback"], join_key(path, "fallback"), FALLBACKS) if "fallback" in d else None,
        max_consecutive_slo_violation=integer(d["max_consecutive_slo_violation"],
                                              join_key(path, "max_consecutive_slo_violation"), 1)
        if "max_consecutive_slo_violation" in d else None,
        on_max_violation=string(d["on_max_violation"], join_key(path, "on_max_violation"), ESCALATIONS)
        if "on_max_violation" in d else None)
    pipeline = parse_task_pipeline(d, path, level)
    if pipeline is None:
        required(d, "prompt", path)
        required(d, "slo_ms", path)
        s1_prompt, s1_slo = level.prompt, level.slo_ms
        s1_fallback = level.fallback or "hold"
        max_viol = level.max_consecutive_slo_violation or 3
        on_viol = level.on_max_violation or "stop_and_call_human"
    else:
        if mode == "streaming":
            raise FleetConfigError(
                f"{join_key(path, first_pipeline_key(d))}: a streaming task cannot have a pipeline (the streaming "
                "action expert keeps no prefix cache for text and takes no subgoal prompts); use mode: chunked "
                "(docs/pipelines.md)")
        s1_prompt, s1_slo, s1_fallback = pipeline.system1.prompt, pipeline.system1.slo_ms, pipeline.system1.fallback
        max_viol, on_viol = pipeline.max_consecutive_slo_violation, pipeline.on_max_violation
    return TaskConfig(
        name=name,
        prompt=s1_prompt,
        action_rate_hz=number(d.get("action_rate_hz", 50.0), join_key(path, "action_rate_hz")),
        horizon_policy=hp,
        horizon_params=hparams,
        slo_ms=s1_slo,
        fallback=s1_fallback,
        max_consecutive_slo_violation=max_viol,
        on_max_violation=on_viol,
        trigger_margin_s=number(d.get("trigger_margin_s", 0.02), join_key(path, "trigger_margin_s"),
                              allow_zero=True),
        mode=mode,
        slo_startup_grace_s=number(d.get("slo_startup_grace_s", 60.0), join_key(path, "slo_startup_grace_s"),
                                   allow_zero=True),
        segment_rate_hz=number(d.get("segment_rate_hz", 60.0), join_key(path, "segment_rate_hz")),
        chunk_merge=parse_chunk_merge(d.get("chunk_merge"), join_key(path, "chunk_merge")),
        language=parse_task_language(d.get("language"), join_key(path, "language")),
        pipeline=pipeline,
    )


_ROBOT_KEYS = {"id", "namespace", "task", "cameras", "image_height", "image_width", "wrench_topic",
               "joint_states_topic", "joints", "control_rate_hz", "simulated", "sim", "camera_format"}


def _parse_robot(i: int, d: Any, tasks: Mapping[str, TaskConfig]) -> RobotConfig:
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


def parse_fleet(doc: Any, source: str = "<memory>") -> FleetConfig:
    doc = mapping(doc, "<root>")
    no_unknown(doc, {"server", "tasks", "robots", "monitoring", "security", "factory"}, "")
    _check_monitoring(doc.get("monitoring"))
    server = parse_server(required(doc, "server", ""))
    tasks_doc = mapping(required(doc, "tasks", ""), "tasks")
    if not tasks_doc:
        raise FleetConfigError("tasks: expected at least one task")
    tasks = {str(k): _parse_task(str(k), v) for k, v in tasks_doc.items()}
    robots_doc = required(doc, "robots", "")
    if not isinstance(robots_doc, list) or not robots_doc:
        raise FleetConfigError(f"robots: expected a non-empty list, got {robots_doc!r}")
    robots = tuple(_parse_robot(i, r, tasks) for i, r in enumerate(robots_doc))
    seen: dict[str, int] = {}
    for i, r in enumerate(robots):
        for key, val in (("id", r.id), ("namespace", r.namespace)):
            tag = f"{key}:{val}"
            if tag in seen:
                raise FleetConfigError(
                    f"robots[{i}].{key}: expected unique values, {val!r} repeats robots[{seen[tag]}]")
            seen[tag] = i
    return FleetConfig(server=server, tasks=tasks, robots=robots, source=source,
                       security=parse_security(doc.get("security")),
                       factory=parse_factory(doc.get("factory"), set(tasks)))


def parse_security(d: Any) -> SecurityConfig:
    """fleet.yaml's `security:` block (physai_ros.security.config); absent: the auto keystore."""
    if d is None:
        return SecurityConfig()
    d = mapping(d, "security")
    no_unknown(d, {"keystore", "server_identity", "max_skew_s", "sros2_enclaves", "insecure"}, "security")
    flags = {}
    for key in ("sros2_enclaves", "insecure"):
        v = d.get(key, False)
        if not isinstance(v, bool):
            raise FleetConfigError(f"security.{key}: expected true or false, got {v!r}")
        flags[key] = v
    keystore = string(d.get("keystore", "auto"), "security.keystore")
    if not keystore:
        raise FleetConfigError("security.keystore: expected 'auto' or a keystore directory, got ''")
    server_identity = string(d.get("server_identity", "policy_server"), "security.server_identity")
    sec = SecurityConfig(keystore, server_identity, number(d.get("max_skew_s", 30.0), "security.max_skew_s"),
                         **flags)
    try:
        sec.server  # the name must be a valid identity
    except ValueError as e:
        raise FleetConfigError(f"security.server_identity: {e}") from None
    return sec


def _check_monitoring(d: Any) -> None:
    # The nodes read this block themselves (monitoring.config.load_monitoring); checking it here
    # makes a bad threshold fail at start-up with the rest of the file's errors.
    from physai_ros.monitoring.config import MonitoringConfig

    try:
        MonitoringConfig.from_dict(d)
    except ValueError as e:
        raise FleetConfigError(str(e) if str(e).startswith("monitoring") else f"monitoring: {e}") from None


def load_fleet(path: str | Path | None = None) -> FleetConfig:
    p = Path(path) if path is not None else default_fleet_path()
    try:
        text = p.read_text()
    except OSError as e:
        raise FleetConfigError(f"cannot read fleet file {str(p)!r}: {e.strerror}") from e
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise FleetConfigError(f"fleet file {str(p)!r} is not valid YAML: {e}") from e
    return parse_fleet(copy.deepcopy(doc), source=str(p.resolve()))


def fleet_dir(cfg: FleetConfig) -> Path | None:
    """The directory relative paths in the fleet file are relative to (None for a fleet built
    in memory, whose source is "<...>")."""
    return Path(cfg.source).parent if cfg.source and not cfg.source.startswith("<") else None


def tokenizer_path(cfg: FleetConfig) -> Path:
    return resolve_package_path(cfg.server.model.tokenizer, fleet_dir(cfg))
