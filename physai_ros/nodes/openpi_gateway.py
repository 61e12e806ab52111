"""openpi_gateway: robots that speak openpi's websocket protocol, served by the fleet unchanged.

An openpi client (`openpi_client.websocket_client_policy.WebsocketClientPolicy`, from PyPI)
connects to ws://HOST:PORT (wss:// with fleet.yaml's tls_cert and tls_key), presenting its robot's
token as its api_key (`physai-fleet keys token DIR ROBOT`; an insecure fleet takes the robot from
the URL path, ws://HOST:PORT/robot_2, or the first free one). It gets the server's metadata, then
each `infer(obs)` becomes a round of that fleet.yaml robot: registered, validated, batched and
scheduled with the ROS robots by the policy server, answered with the engine's chunk as
{"actions": [chunk, action_dim], ...}. The websocket side is physai_ros.client.openpi.server, the
ROS side ros.openpi_link; this node wires them and reports.

  ws   gateway.openpi.host:port (fleet.yaml; docs/openpi_gateway.md)
  call /policy_server/register_robot, pub /<ns>/observation, sub /<ns>/action_chunk, pub
       /<ns>/client_status (per robot: ros.openpi_link)
  pub  /diagnostics: "openpi_gateway: gateway" (connections, rounds, fallbacks, refusals by reason)
       and "openpi_gateway: security"
Parameters: fleet_file.
"""
from __future__ import annotations

import asyncio
import threading

from rclpy.node import Node

from physai_ros.client.openpi.server import GatewayServer, tls_context
from physai_ros.config.fleet import fleet_dir, load_fleet, resolve_package_path
from physai_ros.errors import UserInputError
from physai_ros.monitoring.diagnostics import OK, WARN, level_byte
from physai_ros.ros.diagnostics_updater import Updater
from physai_ros.ros.node_security import node_security, open_endpoint, security_diagnostics
from physai_ros.ros.openpi_link import RosFleetLink
from physai_ros.ros.spin import run_node
from physai_ros.ros.time_conv import now_sec
from physai_ros.security.endpoints import RobotAuth
from physai_ros.security.gateway_token import TokenCheck
from physai_ros.security.keystore import Identity
from physai_ros.security.message_auth import RefusalLog

READY_LOG_MARK = "openpi gateway listening on "


class OpenpiGatewayNode(Node):
    def __init__(self, **node_kwargs):
        super().__init__("openpi_gateway", **node_kwargs)
        fleet_file = self.declare_parameter("fleet_file", "").value or None
        self.fleet = fleet = load_fleet(fleet_file)
        cfg = fleet.gateway
        if cfg is None:
            raise UserInputError(f"{fleet.source}: no gateway.openpi section: nothing for openpi_gateway to serve")
        self.security, base = node_security(self, fleet)
        sec = self.security
        need = [sec.server] + [Identity("robot", rid) for rid in cfg.robots]
        keystore = open_endpoint(self, sec, base, need, lambda ks: ks)
        self.auth_refusals = RefusalLog(self.get_logger().warning)
        auths = {rid: RobotAuth(keystore, rid, sec.server) for rid in cfg.robots} if keystore else {}
        tokens = TokenCheck(keystore, cfg.robots) if keystore is not None else None
        self.link = RosFleetLink(self, fleet, auths, self.auth_refusals, tokens)
        self.server = GatewayServer(cfg, self.link, lambda: now_sec(self), self._tls(cfg),
                                    log=lambda text: self.get_logger().warning(text, throttle_duration_sec=1.0))
        self.create_timer(0.1, self.link.register_pending)
        self.create_timer(1.0, self.link.publish_status)
        self.updater = Updater(self, period=1.0)
        self.updater.setHardwareID("openpi_gateway")
        self.updater.add("gateway", self._diagnose)
        self.updater.add("security", security_diagnostics(sec, lambda: dict(self.auth_refusals.counts)))
        self._stop = None
        self._loop = asyncio.new_event_loop()
        self.link.loop = self._loop
        started = threading.Event()
        self._failure: list[BaseException] = []
        self._thread = threading.Thread(target=self._run, args=(started,), name="openpi_gateway", daemon=True)
        self._thread.start()
        if not started.wait(30.0):
            raise UserInputError(f"openpi gateway: not listening on {cfg.host}:{cfg.port} after 30 s")
        if self._failure:
            raise UserInputError(f"openpi gateway cannot listen on {cfg.host}:{cfg.port}: {self._failure[0]}")
        self.get_logger().info(f"{READY_LOG_MARK}{'wss' if cfg.tls_cert else 'ws'}://{cfg.host}:{self.server.port} "
                               f"for {', '.join(cfg.robots)}")

    def _tls(self, cfg):
        if not cfg.tls_cert:
            return None
        base = fleet_dir(self.fleet)
        try:
            return tls_context(resolve_package_path(cfg.tls_cert, base), resolve_package_path(cfg.tls_key, base))
        except ValueError as e:
            raise UserInputError(str(e)) from None

    def _run(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        self._stop = asyncio.Event()
        try:
            self._loop.run_until_complete(self.server.run(self._stop, ready=lambda port: started.set()))
        except BaseException as e:  # cannot bind: reported by __init__
            self._failure.append(e)
            started.set()

    def _diagnose(self, stat):
        st = self.server.status()
        refused = sum(st["refused"].values())
        stat.summary(level_byte(WARN if refused else OK),
                     f"{st['connections']} openpi client(s) connected" + (f", {refused} refused" if refused else ""))
        stat.add("connections", str(st["connections"]))
        for reason, n in sorted(st["refused"].items()):
            stat.add(f"refused.{reason}", str(n))
        for rid, d in st["robots"].items():
            for k, v in d.items():
                stat.add(f"{rid}.{k}", str(v))
        stat.add("unreadable_chunks", str(self.link.unreadable))
        return stat

    def close(self, timeout_s: float) -> None:
        """On shutdown (run_node): stop listening and close the connections."""
        if self._stop is not None and self._loop.is_running():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=max(0.0, timeout_s))


def main(argv: list[str] | None = None) -> int:
    return run_node(OpenpiGatewayNode, argv)


if __name__ == "__main__":
    raise SystemExit(main())
