"""The gateway's websocket side, as openpi's server speaks it and without ROS: a connection is
authorised at the handshake, told the server's metadata, then sends observations one at a time
and gets one answer each (msgpack, client.openpi.wire). The fleet behind it is a FleetLink (the
node's ROS adapter: registration, publishing, the chunks coming back).

Refused before any model time, each counted by reason: a handshake without a valid token (HTTP 401)
or past max_connections (503), a second connection for a robot already connected (409), a
message over max_message_bytes (the connection is closed, 1009), over max_rate_hz after a burst of
max_burst (a token bucket, security.rate_limit), not msgpack, with unknown dtypes, missing keys or
wrong shapes. A refused message is answered with a
text frame saying why (openpi's client raises it as an error) and the connection stays open.
"""
from __future__ import annotations

import asyncio
import ssl
import time
from collections import Counter
from http import HTTPStatus
from typing import Any, Callable, Optional, Protocol

from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from physai_ros.client.openpi.layouts import LayoutError
from physai_ros.client.openpi.session import OpenpiSession, Unregistered
from physai_ros.client.openpi.wire import WireError, WireLimits, decode, encode
from physai_ros.config.gateway import OpenpiGatewayConfig
from physai_ros.protocol.observation import ObservationData
from physai_ros.security.rate_limit import TokenBucket


def tls_context(cert_path, key_path) -> ssl.SSLContext:
    """wss:// with this certificate chain and key (ValueError naming the problem)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(cert_path, key_path)
    except (OSError, ssl.SSLError) as e:
        raise ValueError(f"gateway.openpi.tls_cert/tls_key: {e}") from None
    return context


class FleetLink(Protocol):
    def authorize(self, authorization: Optional[str], path: str) -> tuple[Optional[str], str]:
        """The robot a handshake may be served as, or (None, why)."""

    async def open(self, robot_id: str) -> OpenpiSession | str:
        """The robot registered with the fleet: its session, or the server's refusal."""

    async def registered(self, session: OpenpiSession) -> bool:
        """After the server forgot the robot: whether it took the robot again (in time)."""

    def submit(self, session: OpenpiSession, obs: ObservationData) -> "asyncio.Future":
        """Send one round; the future gets its ActionChunkData."""

    def close(self, session: OpenpiSession) -> None:
        """The connection ended."""


class GatewayServer:
    def __init__(self, cfg: OpenpiGatewayConfig, link: FleetLink, clock: Callable[[], float],
                 ssl_context: Any = None, log: Callable[[str], None] = print):
        self.cfg, self.link, self.clock, self.ssl, self.log = cfg, link, clock, ssl_context, log
        self.limits = WireLimits(max_message_bytes=cfg.max_message_bytes, max_array_bytes=cfg.max_message_bytes)
        self.refused: Counter = Counter()  # reason -> count, handshakes and messages
        self.connected: dict[str, Optional[OpenpiSession]] = {}  # None: registering
        self.port: Optional[int] = None

    # ---- handshake ------------------------------------------------------------------------

    def _process_request(self, connection: ServerConnection, request) -> Any:
        def refuse(status: HTTPStatus, reason: str):
            self.refused[reason] += 1
            self.log(f"openpi connection from {connection.remote_address} refused: {reason}")
            return connection.respond(status, f"{reason}\n")
        if len(self.connected) >= self.cfg.max_connections:
            return refuse(HTTPStatus.SERVICE_UNAVAILABLE, "too_many_connections")
        robot_id, why = self.link.authorize(request.headers.get("Authorization"), request.path)
        if robot_id is None:
            return refuse(HTTPStatus.UNAUTHORIZED, why)
        if robot_id in self.connected:
            return refuse(HTTPStatus.CONFLICT, "already_connected")
        return None

    # ---- one connection -------------------------------------------------------------------

    async def _handler(self, ws: ServerConnection) -> None:
        # The handshake passed _process_request; asked again here, where the robot is claimed (two
        # handshakes for one robot may both have passed before either got here).
        robot_id, _ = self.link.authorize(ws.request.headers.get("Authorization"), ws.request.path)
        if robot_id is None or robot_id in self.connected:
            self.refused["already_connected"] += 1
            await ws.close(1008, "already connected")
            return
        self.connected[robot_id] = None
        try:
            opened = await self.link.open(robot_id)
            if isinstance(opened, str):
                self.refused["registration_refused"] += 1
                await ws.send(f"refused: the fleet did not register {robot_id}: {opened}")
                await ws.close(1008, "registration refused")
                return
            session = self.connected[robot_id] = opened
            await ws.send(encode(self._metadata(session)))
            await self._serve(ws, session)
        except ConnectionClosed as e:
            if e.rcvd is not None and e.rcvd.code == 1009 or e.sent is not None and e.sent.code == 1009:
                self.refused["too_large"] += 1
        finally:
            session = self.connected.pop(robot_id, None)
            if session is not None:
                self.link.close(session)

    async def _serve(self, ws: ServerConnection, session: OpenpiSession) -> None:
        rate = TokenBucket(self.cfg.max_rate_hz, float(self.cfg.max_burst))
        chunk_len = 1
        async for message in ws:
            if not rate.take(time.monotonic()):
                await self._refuse(ws, session, "rate_limited",
                                   f"over {self.cfg.max_rate_hz:g} messages/s (burst {self.cfg.max_burst})")
                continue
            try:
                decoded = decode(message, self.limits)
                obs = session.observation(decoded, self.clock())
            except (WireError, LayoutError) as e:
                await self._refuse(ws, session, e.reason, e.detail)
                continue
            try:
                answer = await self._round(session, obs, decoded, chunk_len)
            except ValueError as e:  # the server refused or failed this round, or it was late
                await ws.send(f"refused: {e}")
                continue
            if "engine_instance" in answer.get("physai", {}):
                chunk_len = max(1, len(answer["actions"]))
            await ws.send(encode(answer))

    async def _round(self, session: OpenpiSession, obs: ObservationData, decoded: dict, chunk_len: int) -> dict:
        """The answer to one message: the engine's chunk, or the fallback past the SLO. A robot the
        server forgot registers again and the message is sent again, once."""
        for attempt in range(2):
            try:
                chunk = await asyncio.wait_for(self.link.submit(session, obs),
                                               timeout=max(0.0, session.deadline() - self.clock()))
                answer = session.answer(chunk)
                session.counters.latencies_ms.append((self.clock() - obs.stamp) * 1e3)
                return answer
            except asyncio.TimeoutError:
                return session.fallback(chunk_len)
            except Unregistered:
                if attempt or not await self.link.registered(session):
                    raise ValueError(f"the policy server does not know {session.robot.id} and did not take "
                                     "it again") from None
                obs = session.observation(decoded, self.clock())
        raise AssertionError("unreachable")

    async def _refuse(self, ws: ServerConnection, session: OpenpiSession, reason: str, detail: str) -> None:
        self.refused[reason] += 1
        session.counters.refuse(reason)
        await ws.send(f"refused ({reason}): {detail}")

    def _metadata(self, session: OpenpiSession) -> dict:
        r = session.robot
        return {"server": "physai_ros openpi gateway", "robot_id": r.id, "task": r.task.name,
                "prompt": r.task.prompt, "joints": list(r.joints), "layout": session.layout.name,
                "cameras": ["/".join(p) for p in session.views], "action_rate_hz": 1.0 / r.task.action_period_s,
                "slo_ms": float(r.task.slo_ms)}

    # ---- running --------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event, ready: Optional[Callable[[int], None]] = None) -> None:
        async with serve(self._handler, self.cfg.host, self.cfg.port, ssl=self.ssl, compression=None,
                         max_size=self.cfg.max_message_bytes, process_request=self._process_request,
                         server_header="physai_ros") as server:
            self.port = next(iter(server.sockets)).getsockname()[1]
            if ready is not None:
                ready(self.port)
            await stop.wait()

    def status(self) -> dict:
        return {"connections": len(self.connected), "refused": dict(self.refused),
                "robots": {rid: {"rounds": s.counters.rounds, "answered": s.counters.answered,
                                 "fallbacks": s.counters.fallbacks, "refused": dict(s.counters.refused)}
                           for rid, s in sorted(self.connected.items()) if s is not None}}
