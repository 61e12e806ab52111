"""fleet.yaml's `gateway:` section: robots that talk to the fleet through openpi's websocket
client instead of ROS 2 (nodes/openpi_gateway.py, docs/openpi_gateway.md).

    gateway:
      openpi:
        host: 127.0.0.1          # the address to listen on (0.0.0.0: every interface)
        port: 8000
        tls_cert: cert.pem       # both or neither: wss:// with this certificate (relative to the yaml)
        tls_key: key.pem
        max_connections: 16      # more are refused at the handshake (HTTP 503)
        max_message_bytes: 16000000
        max_rate_hz: 50          # one connection's messages per second on average; faster ones are refused
        max_burst: 5             # messages a connection may send back to back before max_rate_hz applies
        robots:                  # fleet.yaml robots served over the gateway (no ROS nodes of their own)
          robot_2: {layout: libero, fallback: hold}

`layout`: the keys the client sends (protocol.openpi_layouts: libero, droid, aloha). `fallback`:
what a client gets when the engine misses the task's SLO: `hold` (its sent state repeated: robots
whose actions are joint positions) or `error` (an error message; openpi's client raises it).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from physai_ros.config_fields import (FleetConfigError, integer, join_key, mapping, no_unknown, number, required,
                                      string)
from physai_ros.protocol.openpi_layouts import LAYOUTS

FALLBACKS = ("hold", "error")


@dataclass(frozen=True)
class GatewayRobot:
    robot_id: str
    layout: str
    fallback: str = "error"


@dataclass(frozen=True)
class OpenpiGatewayConfig:
    robots: Mapping[str, GatewayRobot]
    host: str = "127.0.0.1"
    port: int = 8000
    tls_cert: str = ""
    tls_key: str = ""
    max_connections: int = 16
    max_message_bytes: int = 16_000_000
    max_rate_hz: float = 50.0
    max_burst: int = 5


def parse_gateway(d: Any, num_views: Mapping[str, int]) -> OpenpiGatewayConfig | None:
    """num_views: each fleet robot's camera count (a layout must have as many cameras)."""
    if d is None:
        return None
    d = mapping(d, "gateway")
    no_unknown(d, {"openpi"}, "gateway")
    if "openpi" not in d:
        return None
    path = "gateway.openpi"
    o = mapping(d["openpi"], path)
    no_unknown(o, {"host", "port", "tls_cert", "tls_key", "max_connections", "max_message_bytes", "max_rate_hz",
                   "max_burst", "robots"}, path)
    robots_doc = mapping(required(o, "robots", path), join_key(path, "robots"))
    if not robots_doc:
        raise FleetConfigError(f"{path}.robots: expected at least one robot")
    robots = {}
    for rid, entry in robots_doc.items():
        rpath = join_key(join_key(path, "robots"), str(rid))
        if rid not in num_views:
            raise FleetConfigError(f"{rpath}: not a robot of this fleet (robots: {sorted(num_views)})")
        entry = mapping(entry if entry is not None else {}, rpath)
        no_unknown(entry, {"layout", "fallback"}, rpath)
        layout = string(required(entry, "layout", rpath), join_key(rpath, "layout"), tuple(LAYOUTS))
        try:
            LAYOUTS[layout].views(num_views[rid])
        except ValueError as e:
            raise FleetConfigError(f"{rpath}.layout: {e}") from None
        robots[rid] = GatewayRobot(rid, layout, string(entry.get("fallback", "error"), join_key(rpath, "fallback"),
                                                       FALLBACKS))
    cert, key = (string(o[k], join_key(path, k)) if k in o else "" for k in ("tls_cert", "tls_key"))
    if bool(cert) != bool(key):
        raise FleetConfigError(f"{path}: tls_cert and tls_key go together (both or neither)")
    port = integer(o.get("port", 8000), join_key(path, "port"), 1)
    if port > 65535:
        raise FleetConfigError(f"{path}.port: expected 1..65535, got {port}")
    return OpenpiGatewayConfig(
        robots=robots, host=string(o.get("host", "127.0.0.1"), join_key(path, "host")), port=port,
        tls_cert=cert, tls_key=key,
        max_connections=integer(o.get("max_connections", 16), join_key(path, "max_connections"), 1),
        max_message_bytes=integer(o.get("max_message_bytes", 16_000_000), join_key(path, "max_message_bytes"), 1024),
        max_rate_hz=number(o.get("max_rate_hz", 50.0), join_key(path, "max_rate_hz")),
        max_burst=integer(o.get("max_burst", 5), join_key(path, "max_burst"), 1))
