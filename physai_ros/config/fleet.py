"""fleet.yaml: one description of the server, the tasks and the robots (ROSA Figure 3 spirit).

Loading validates everything up front so that a typo fails at start-up with the key's full path
and what was expected, instead of surfacing later as a confusing runtime error in one process.
This module holds the file as a whole; the tasks are config.task, the robots config.robot, the
`server:` section config.server, the validation helpers config_fields.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import yaml

from physai_ros.config.factory import FactoryConfig, parse_factory
from physai_ros.config.gateway import OpenpiGatewayConfig, parse_gateway
from physai_ros.config.robot import RobotConfig, parse_robot
from physai_ros.config.server import ServerConfig, parse_server
from physai_ros.config.task import TaskConfig, parse_task
from physai_ros.config_fields import FleetConfigError, mapping, no_unknown, number, required, string
from physai_ros.install_paths import PACKAGE_URL_PREFIX, default_fleet_file, resolve_package_url
from physai_ros.security.config import SecurityConfig

PACKAGE_PREFIX = PACKAGE_URL_PREFIX


@dataclass(frozen=True)
class FleetConfig:
    server: ServerConfig
    tasks: Mapping[str, TaskConfig]
    robots: tuple[RobotConfig, ...]
    source: str
    security: SecurityConfig = SecurityConfig()
    # The cluster to plan a factory schedule for (config.factory, docs/factory.md).
    factory: FactoryConfig | None = None
    # Robots served through openpi's websocket client (config.gateway, docs/openpi_gateway.md).
    gateway: OpenpiGatewayConfig | None = None

    def ros_robots(self) -> tuple[RobotConfig, ...]:
        """The robots with ROS nodes of their own (all but the gateway's)."""
        through_gateway = self.gateway.robots if self.gateway is not None else {}
        return tuple(r for r in self.robots if r.id not in through_gateway)

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
        return _replace(self, robots=tuple(robots))  # every other section kept as it is


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


def parse_fleet(doc: Any, source: str = "<memory>") -> FleetConfig:
    doc = mapping(doc, "<root>")
    no_unknown(doc, {"server", "tasks", "robots", "monitoring", "security", "factory", "gateway"}, "")
    _check_monitoring(doc.get("monitoring"))
    server = parse_server(required(doc, "server", ""))
    tasks_doc = mapping(required(doc, "tasks", ""), "tasks")
    if not tasks_doc:
        raise FleetConfigError("tasks: expected at least one task")
    tasks = {str(k): parse_task(str(k), v) for k, v in tasks_doc.items()}
    robots_doc = required(doc, "robots", "")
    if not isinstance(robots_doc, list) or not robots_doc:
        raise FleetConfigError(f"robots: expected a non-empty list, got {robots_doc!r}")
    robots = tuple(parse_robot(i, r, tasks) for i, r in enumerate(robots_doc))
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
                       factory=parse_factory(doc.get("factory"), set(tasks)),
                       gateway=parse_gateway(doc.get("gateway"), {r.id: r.num_views for r in robots}))


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
