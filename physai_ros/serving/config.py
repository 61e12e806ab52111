"""fleet.yaml: one description of the server, the tasks and the robots (ROSA Figure 3 spirit).

Loading validates everything up front so that a typo fails at start-up with the key's full path
and what was expected, instead of surfacing later as a confusing runtime error in one process.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

from physai_ros.errors import UserInputError
from physai_ros.install_paths import PACKAGE_URL_PREFIX, default_fleet_file, resolve_package_url
from physai_ros.protocol.chunk import HOLD_ENGINE_INSTANCE
from physai_ros.protocol.topics import JOINT_STATES_TOPIC, WRENCH_TOPIC

PACKAGE_PREFIX = PACKAGE_URL_PREFIX
FALLBACKS = ("hold", "stop_and_resend", "use_last_plan")
ESCALATIONS = ("stop_and_call_human",)
BUILTIN_HORIZON_POLICIES = ("static", "confidence")
SCHEDULERS = ("fifo", "autellix", "wait_ratio")
DEVICES = ("cpu", "cuda")
CAMERA_FORMATS = ("raw", "compressed")  # sensor_msgs/Image | sensor_msgs/CompressedImage
TASK_MODES = ("chunked", "streaming")  # ActionChunk answers | TrajectorySegment stream (issue 7)
STREAM_FORCE = ("checkpoint", "random", "none")
STREAM_WHEN_FULL = ("chunked", "refuse")


class FleetConfigError(ValueError, UserInputError):
    """A fleet.yaml problem; the message starts with the offending key path."""


@dataclass(frozen=True)
class ModelConfig:
    preset: str | None
    checkpoint: str | None
    tokenizer: str
    max_token_len: int
    seed: int


@dataclass(frozen=True)
class RemoteEngineConfig:
    """An engine instance in an `engine_worker` process, possibly on another host (reached over
    DDS). Its tier, max_batch and latency profile are the worker's own advertisement."""

    instance_id: str
    timeout_s: float | None  # None: from the advertised profile (physai_ros.ros.remote_engine)
    liveness_timeout_s: float | None  # None: 3 heartbeat periods


@dataclass(frozen=True)
class ProfileConfig:
    """Start-up measurement of each local engine's latency-vs-batch profile
    (physai_ros.workers.profiling): the scheduler's batching cap and placement use it."""

    reps: int = 1            # timed calls per batch size (after one warm-up call)
    max_batch: int = 4       # measure batch sizes 1..min(this, server.max_batch)
    views: int = 2           # camera views of the synthetic inputs
    tokens: int | None = None  # prompt tokens; None: the model's max_token_len


@dataclass(frozen=True)
class StreamingServerConfig:
    """server.streaming: the shared VLM + action-expert streams (realtime-vla section 6). Every
    streaming robot is a slot in the batch of the same two streams, so the rates are the
    server's, not a task's (physai_ros.serving.streaming_service)."""

    slots: int = 1               # robots served in streaming mode at once
    vlm_hz: float = 30.0         # VLM stream (camera rate)
    ae_hz: float = 480.0         # action-expert stream
    action_hz: float = 50.0      # the checkpoint's action rate (token spacing of the window)
    steps_per_token: float | None = None  # AE ticks from noise to final; None: model's num_steps
    force: str = "checkpoint"    # force token: checkpoint (if it has force_proj.*) | random | none
    when_full: str = "chunked"   # no free slot: serve the robot chunked, or refuse it
    timeout_s: float = 2.0       # a robot silent this long loses its slot
    torch_threads: int = 1       # intra-op threads of the streams (tiny ops: 1 is fastest)


@dataclass(frozen=True)
class ServerConfig:
    node_name: str
    model: ModelConfig
    device: str
    engine_instances: int
    max_batch: int
    scheduler: str
    max_observation_age_s: float
    remote_engines: tuple[RemoteEngineConfig, ...] = ()
    # Constructor parameters for make_scheduler(scheduler, **scheduler_params).
    scheduler_params: Mapping[str, Any] = field(default_factory=dict)
    profile: ProfileConfig | None = field(default_factory=ProfileConfig)  # None: flat default
    streaming: StreamingServerConfig = field(default_factory=StreamingServerConfig)
    # Admission and hot standby (ROSA section 3.4.4; physai_ros.serving.core.ServingCore).
    max_robots: int | None = None  # robots registered at once; None: no limit
    robot_idle_release_s: float = 10.0  # a robot silent this long (no observation, no
    #   registration) gives its place up when a new robot needs it
    standby_instances: int = 0  # extra local engines, warm, serving only when an active one dies
    # A robot silent this long (link cut, client dead) is freed at once: registration, queued
    # request, scheduler history (it registers again on return). None: only robot_idle_release_s
    # under capacity pressure. Set it above the clients' 2 s keep-alive re-registration.
    robot_timeout_s: float | None = None


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
    segment_rate_hz: float = 60.0  # streaming: TrajectorySegment messages per second (at most)

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

    @property
    def num_views(self) -> int:
        return len(self.camera_topics)


@dataclass(frozen=True)
class FleetConfig:
    server: ServerConfig
    tasks: Mapping[str, TaskConfig]
    robots: tuple[RobotConfig, ...]
    source: str

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
        return FleetConfig(self.server, self.tasks, tuple(robots), self.source)


def _replace(robot: RobotConfig, **kw: Any) -> RobotConfig:
    from dataclasses import replace

    return replace(robot, **kw)


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


# ---- validation helpers: each names the key path and what it expects -----------------------

def _req(d: Mapping[str, Any], key: str, path: str) -> Any:
    if key not in d:
        raise FleetConfigError(f"{path}.{key}: missing (required)" if path else f"{key}: missing (required)")
    return d[key]


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _mapping(v: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(v, Mapping):
        raise FleetConfigError(f"{path}: expected a mapping, got {type(v).__name__}")
    return v


def _str(v: Any, path: str, choices: tuple[str, ...] | None = None) -> str:
    if not isinstance(v, str) or not v:
        raise FleetConfigError(f"{path}: expected a non-empty string, got {v!r}")
    if choices is not None and v not in choices:
        raise FleetConfigError(f"{path}: expected one of {list(choices)}, got {v!r}")
    return v


def _int(v: Any, path: str, lo: int = 0) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise FleetConfigError(f"{path}: expected an integer >= {lo}, got {v!r}")
    return v


def _pos(v: Any, path: str, allow_zero: bool = False) -> float:
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    if not ok or v < 0 or (v == 0 and not allow_zero):
        what = "a finite number >= 0" if allow_zero else "a finite number > 0"
        raise FleetConfigError(f"{path}: expected {what}, got {v!r}")
    return float(v)


def _strlist(v: Any, path: str, lo: int, hi: int | None = None) -> tuple[str, ...]:
    if not isinstance(v, list) or not all(isinstance(x, str) and x for x in v):
        raise FleetConfigError(f"{path}: expected a list of non-empty strings, got {v!r}")
    if len(v) < lo or (hi is not None and len(v) > hi):
        rng = f"{lo}..{hi}" if hi is not None else f">= {lo}"
        raise FleetConfigError(f"{path}: expected {rng} entries, got {len(v)}")
    if len(set(v)) != len(v):
        raise FleetConfigError(f"{path}: entries must be unique, got {v!r}")
    return tuple(v)


def _no_unknown(d: Mapping[str, Any], allowed: set[str], path: str) -> None:
    extra = sorted(set(d) - allowed)
    if extra:
        raise FleetConfigError(
            f"{_join(path, extra[0])}: unknown key (expected one of {sorted(allowed)})")


def _parse_model(d: Any, path: str) -> ModelConfig:
    d = _mapping(d, path)
    _no_unknown(d, {"preset", "checkpoint", "tokenizer", "max_token_len", "seed"}, path)
    preset = d.get("preset")
    checkpoint = d.get("checkpoint")
    if (preset is None) == (checkpoint is None):
        raise FleetConfigError(f"{path}: expected exactly one of 'preset' or 'checkpoint'")
    if preset is not None:
        _str(preset, _join(path, "preset"))
    if checkpoint is not None:
        _str(checkpoint, _join(path, "checkpoint"))
    return ModelConfig(
        preset=preset,
        checkpoint=checkpoint,
        tokenizer=_str(_req(d, "tokenizer", path), _join(path, "tokenizer")),
        max_token_len=_int(d.get("max_token_len", 48), _join(path, "max_token_len"), 4),
        seed=_int(d.get("seed", 0), _join(path, "seed"), 0),
    )


def _parse_remote_engines(v: Any, path: str) -> tuple[RemoteEngineConfig, ...]:
    if not isinstance(v, list):
        raise FleetConfigError(f"{path}: expected a list, got {v!r}")
    out: list[RemoteEngineConfig] = []
    for i, d in enumerate(v):
        p = f"{path}[{i}]"
        d = _mapping(d, p)
        _no_unknown(d, {"instance_id", "timeout_s", "liveness_timeout_s"}, p)
        iid = _str(_req(d, "instance_id", p), _join(p, "instance_id"))
        if not iid.replace("_", "a").isalnum() or not iid[0].isalpha():
            raise FleetConfigError(f"{p}.instance_id: expected letters, digits and '_' starting with "
                                   f"a letter (it becomes a ROS topic name), got {iid!r}")
        if iid.startswith("engine_") or iid == HOLD_ENGINE_INSTANCE or iid in (r.instance_id for r in out):
            raise FleetConfigError(f"{p}.instance_id: expected a unique id not starting with "
                                   f"'engine_' (local instances use those) and not {HOLD_ENGINE_INSTANCE!r} "
                                   f"(the robot client's hold marker), got {iid!r}")
        opt = {k: _pos(d[k], _join(p, k)) if d.get(k) is not None else None
               for k in ("timeout_s", "liveness_timeout_s")}
        out.append(RemoteEngineConfig(iid, **opt))
    return tuple(out)


# Scheduler parameters fleet.yaml may set, with their checks; names are the constructors'
# keyword arguments (physai_ros.scheduler.core.QueueScheduler, wait_ratio.WaitRatioScheduler).
_QUEUE_PARAMS = {
    "stale_after_s": "pos_or_null", "refresh_timeout_s": "nonneg", "saturation_tolerance": "fraction",
    "default_exec_s": "nonneg", "count_first_wait": "bool", "task_ttl_s": "pos",
    # The paper's readings by default; the others are the ablation's (docs/scheduler.md).
    "provisional_wait": "str", "hold_ratio_floor": "bool", "placement_rule": "str",
}
SCHEDULER_PARAMS = {
    "fifo": _QUEUE_PARAMS, "autellix": _QUEUE_PARAMS,
    "wait_ratio": {**_QUEUE_PARAMS, "buckets": "int0", "aging_interval": "int1", "intra_bucket": "str"},
}


def _parse_scheduler(v: Any, path: str) -> tuple[str, dict[str, Any]]:
    """`fifo` or `{name: wait_ratio, buckets: 10, aging_interval: 4, stale_after_s: 0.2, ...}`."""
    if isinstance(v, str):
        return _str(v, path, SCHEDULERS), {}
    d = _mapping(v, path)
    name = _str(_req(d, "name", path), _join(path, "name"), SCHEDULERS)
    allowed = SCHEDULER_PARAMS[name]
    _no_unknown(d, {"name", *allowed}, path)
    params: dict[str, Any] = {}
    for key, kind in allowed.items():
        if key not in d:
            continue
        p, x = _join(path, key), d[key]
        if kind == "pos_or_null":
            params[key] = None if x is None else _pos(x, p)
        elif kind == "pos":
            params[key] = _pos(x, p)
        elif kind == "nonneg":
            params[key] = _pos(x, p, allow_zero=True)
        elif kind == "fraction":
            if not (isinstance(x, (int, float)) and not isinstance(x, bool) and 0 <= x < 1):
                raise FleetConfigError(f"{p}: expected a number in [0, 1), got {x!r}")
            params[key] = float(x)
        elif kind == "bool":
            if not isinstance(x, bool):
                raise FleetConfigError(f"{p}: expected true or false, got {x!r}")
            params[key] = x
        elif kind == "str":  # the allowed values: the constructor's check below
            params[key] = _str(x, p)
        else:
            params[key] = _int(x, p, 0 if kind == "int0" else 1)
    from physai_ros.scheduler.base import make_scheduler

    try:  # the constructor's own checks, so nothing surfaces later in the server
        make_scheduler(name, **params)
    except ValueError as e:
        raise FleetConfigError(f"{path}: {e}") from None
    return name, params


def _parse_profile(v: Any, path: str) -> ProfileConfig | None:
    """`false` keeps the flat default profile; a mapping sets the measurement."""
    if v is False or v is None:
        return None
    if v is True:
        return ProfileConfig()
    d = _mapping(v, path)
    _no_unknown(d, {"reps", "max_batch", "views", "tokens"}, path)
    dflt = ProfileConfig()
    tokens = d.get("tokens")
    return ProfileConfig(
        reps=_int(d.get("reps", dflt.reps), _join(path, "reps"), 1),
        max_batch=_int(d.get("max_batch", dflt.max_batch), _join(path, "max_batch"), 1),
        views=_int(d.get("views", dflt.views), _join(path, "views"), 1),
        tokens=None if tokens is None else _int(tokens, _join(path, "tokens"), 1),
    )


def _parse_server(d: Any) -> ServerConfig:
    path = "server"
    d = _mapping(d, path)
    _no_unknown(d, {"node_name", "model", "device", "engine_instances", "max_batch", "scheduler",
                    "max_observation_age_s", "remote_engines", "profile", "streaming",
                    "max_robots", "robot_idle_release_s", "standby_instances", "robot_timeout_s"}, path)
    remote = _parse_remote_engines(d.get("remote_engines", []), _join(path, "remote_engines"))
    # Local instances may be 0 when engine workers serve (a server host without a GPU).
    engine_instances = _int(d.get("engine_instances", 1), _join(path, "engine_instances"),
                            0 if remote else 1)
    scheduler, scheduler_params = _parse_scheduler(d.get("scheduler", "fifo"), _join(path, "scheduler"))
    return ServerConfig(
        node_name=_str(d.get("node_name", "policy_server"), _join(path, "node_name")),
        model=_parse_model(_req(d, "model", path), _join(path, "model")),
        device=_str(d.get("device", "cpu"), _join(path, "device"), DEVICES),
        engine_instances=engine_instances,
        max_batch=_int(d.get("max_batch", 8), _join(path, "max_batch"), 1),
        scheduler=scheduler,
        scheduler_params=scheduler_params,
        profile=_parse_profile(d.get("profile", True), _join(path, "profile")),
        max_observation_age_s=_pos(d.get("max_observation_age_s", 2.0),
                                   _join(path, "max_observation_age_s")),
        remote_engines=remote,
        max_robots=None if d.get("max_robots") is None else _int(d["max_robots"], _join(path, "max_robots"), 1),
        robot_idle_release_s=_pos(d.get("robot_idle_release_s", 10.0), _join(path, "robot_idle_release_s")),
        standby_instances=_int(d.get("standby_instances", 0), _join(path, "standby_instances"), 0),
        robot_timeout_s=None if d.get("robot_timeout_s") is None else _pos(d["robot_timeout_s"],
                                                                           _join(path, "robot_timeout_s")),
        streaming=_parse_streaming(d.get("streaming", {}), _join(path, "streaming")),
    )


def _parse_streaming(v: Any, path: str) -> StreamingServerConfig:
    d = _mapping(v, path)
    dflt = StreamingServerConfig()
    _no_unknown(d, set(vars(dflt)), path)
    out = {}
    for key in ("vlm_hz", "ae_hz", "action_hz", "timeout_s"):
        out[key] = _pos(d.get(key, getattr(dflt, key)), _join(path, key))
    out["slots"] = _int(d.get("slots", dflt.slots), _join(path, "slots"), 1)
    out["torch_threads"] = _int(d.get("torch_threads", dflt.torch_threads), _join(path, "torch_threads"), 1)
    spt = d.get("steps_per_token")
    out["steps_per_token"] = None if spt is None else _pos(spt, _join(path, "steps_per_token"))
    out["force"] = _str(d.get("force", dflt.force), _join(path, "force"), STREAM_FORCE)
    out["when_full"] = _str(d.get("when_full", dflt.when_full), _join(path, "when_full"), STREAM_WHEN_FULL)
    return StreamingServerConfig(**out)


def _parse_horizon(v: Any, path: str) -> tuple[str, tuple[float, ...]]:
    v = _mapping(v, path)
    _no_unknown(v, {"name", "params"}, path)
    name = _str(_req(v, "name", path), _join(path, "name"))
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
    d = _mapping(d, path)
    _no_unknown(d, {"prompt", "action_rate_hz", "horizon_policy", "slo_ms", "fallback",
                    "max_consecutive_slo_violation", "on_max_violation", "trigger_margin_s", "mode",
                    "segment_rate_hz"}, path)
    hp, hparams = _parse_horizon(_req(d, "horizon_policy", path), _join(path, "horizon_policy"))
    return TaskConfig(
        name=name,
        prompt=_str(_req(d, "prompt", path), _join(path, "prompt")),
        action_rate_hz=_pos(d.get("action_rate_hz", 50.0), _join(path, "action_rate_hz")),
        horizon_policy=hp,
        horizon_params=hparams,
        slo_ms=_pos(_req(d, "slo_ms", path), _join(path, "slo_ms")),
        fallback=_str(d.get("fallback", "hold"), _join(path, "fallback"), FALLBACKS),
        max_consecutive_slo_violation=_int(d.get("max_consecutive_slo_violation", 3),
                                           _join(path, "max_consecutive_slo_violation"), 1),
        on_max_violation=_str(d.get("on_max_violation", "stop_and_call_human"),
                              _join(path, "on_max_violation"), ESCALATIONS),
        trigger_margin_s=_pos(d.get("trigger_margin_s", 0.02), _join(path, "trigger_margin_s"),
                              allow_zero=True),
        mode=_str(d.get("mode", "chunked"), _join(path, "mode"), TASK_MODES),
        segment_rate_hz=_pos(d.get("segment_rate_hz", 60.0), _join(path, "segment_rate_hz")),
    )


_ROBOT_KEYS = {"id", "namespace", "task", "cameras", "image_height", "image_width", "wrench_topic",
               "joint_states_topic", "joints", "control_rate_hz", "simulated", "sim", "camera_format"}


def _parse_robot(i: int, d: Any, tasks: Mapping[str, TaskConfig]) -> RobotConfig:
    path = f"robots[{i}]"
    d = _mapping(d, path)
    _no_unknown(d, _ROBOT_KEYS, path)
    rid = _str(_req(d, "id", path), _join(path, "id"))
    if not rid.replace("_", "a").isalnum() or rid[0].isdigit():
        raise FleetConfigError(
            f"{path}.id: expected letters, digits and '_' not starting with a digit "
            f"(it becomes a ROS namespace), got {rid!r}")
    task_name = _str(_req(d, "task", path), _join(path, "task"))
    if task_name not in tasks:
        raise FleetConfigError(f"{path}.task: expected one of {sorted(tasks)}, got {task_name!r}")
    ns = _str(d.get("namespace", rid), _join(path, "namespace")).strip("/")
    sim = d.get("sim", {})
    sim = dict(_mapping(sim, _join(path, "sim")))
    joints = _strlist(_req(d, "joints", path), _join(path, "joints"), 1)
    if d.get("simulated", True):
        n = sim.get("num_joints", 4)
        want = tuple(f"joint_{k}" for k in range(int(n))) + ("gripper",) if isinstance(n, int) else None
        if joints != want:
            raise FleetConfigError(
                f"{path}.joints: a simulated arm with sim.num_joints={n} has joints {list(want or [])}, "
                f"got {list(joints)}")
    camera_format = _str(d.get("camera_format", "raw"), _join(path, "camera_format"), CAMERA_FORMATS)
    if camera_format == "compressed" and d.get("simulated", True):
        raise FleetConfigError(
            f"{path}.camera_format: 'compressed' needs simulated: false (sim_robot publishes raw "
            f"sensor_msgs/Image only)")
    return RobotConfig(
        id=rid,
        namespace=ns,
        task=tasks[task_name],
        camera_topics=_strlist(_req(d, "cameras", path), _join(path, "cameras"), 1, 3),
        image_height=_int(d.get("image_height", 224), _join(path, "image_height"), 1),
        image_width=_int(d.get("image_width", 224), _join(path, "image_width"), 1),
        wrench_topic=_str(d.get("wrench_topic", WRENCH_TOPIC), _join(path, "wrench_topic")),
        joint_states_topic=_str(d.get("joint_states_topic", JOINT_STATES_TOPIC),
                                _join(path, "joint_states_topic")),
        joints=joints,
        control_rate_hz=_pos(d.get("control_rate_hz", 480.0), _join(path, "control_rate_hz")),
        simulated=bool(d.get("simulated", True)),
        sim=sim,
        camera_format=camera_format,
    )


def parse_fleet(doc: Any, source: str = "<memory>") -> FleetConfig:
    doc = _mapping(doc, "<root>")
    _no_unknown(doc, {"server", "tasks", "robots", "monitoring"}, "")
    _check_monitoring(doc.get("monitoring"))
    server = _parse_server(_req(doc, "server", ""))
    tasks_doc = _mapping(_req(doc, "tasks", ""), "tasks")
    if not tasks_doc:
        raise FleetConfigError("tasks: expected at least one task")
    tasks = {str(k): _parse_task(str(k), v) for k, v in tasks_doc.items()}
    robots_doc = _req(doc, "robots", "")
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
    return FleetConfig(server=server, tasks=tasks, robots=robots, source=source)


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
