"""The openpi gateway's link to the fleet over ROS 2 (client.openpi.server.FleetLink): for each robot
it fronts, what that robot's robot_client would do on the wire.

  call /policy_server/register_robot as the robot (signed with its identity: ros.registration_call)
  pub  /<ns>/observation (Observation, reliable, with the robot's session MAC)
  sub  /<ns>/action_chunk (ActionChunk, reliable; the server's signature checked)
  pub  /<ns>/client_status (std_msgs/String JSON, 1 Hz): the robot client's status fields (rounds,
       answers, latency from arrival to answer, fallbacks as SLO misses, refusals by reason)
The asyncio side (the websocket server's thread) waits on futures that the executor's callbacks
complete with call_soon_threadsafe; publishing from that thread is safe in rclpy.
"""
from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Optional

from physai_ros_interfaces.msg import ActionChunk, Observation
from std_msgs.msg import String

from physai_ros.client.openpi.session import OpenpiSession
from physai_ros.client.registration import RegistrationExchange
from physai_ros.protocol.observation import ObservationData
from physai_ros.protocol.openpi_layouts import LAYOUTS
from physai_ros.protocol.topics import ACTION_CHUNK_TOPIC, CLIENT_STATUS_TOPIC, OBSERVATION_TOPIC, robot_topic
from physai_ros.ros.codecs.chunk import chunk_from_msg
from physai_ros.ros.codecs.observation import observation_to_msg
from physai_ros.ros.message_digest import digest
from physai_ros.ros.qos import reliable_qos
from physai_ros.ros.registration_call import RegistrationCall
from physai_ros.security.handshake import AuthError

REGISTER_WAIT_S = 15.0


class _Robot:
    def __init__(self, node, robot, gateway_robot, auth, refusals):
        self.robot, self.gateway, self.auth = robot, gateway_robot, auth
        self.exchange = RegistrationExchange(None, auth, refusals)
        self.call = RegistrationCall(node, self.exchange)
        self.pub = node.create_publisher(Observation, robot_topic(robot.namespace, OBSERVATION_TOPIC), reliable_qos())
        self.session: Optional[OpenpiSession] = None
        self.last: Optional[OpenpiSession] = None  # the newest session, kept after it closes (its counters)
        self.waiting: Optional[tuple[int, asyncio.Future]] = None
        self.status_pub = node.create_publisher(String, robot_topic(robot.namespace, CLIENT_STATUS_TOPIC),
                                                reliable_qos())


class RosFleetLink:
    def __init__(self, node, fleet, auths: dict, refusals, token_check=None):
        """auths: robot_id -> security.endpoints.RobotAuth (None values: an insecure fleet);
        token_check: security.gateway_token.TokenCheck (None: insecure, the URL path names the robot)."""
        self.node, self.token_check, self.refusals = node, token_check, refusals
        self.loop: Optional[asyncio.AbstractEventLoop] = None  # the websocket server's, set when it runs
        self.unreadable = 0
        self._lock = threading.Lock()
        self.robots: dict[str, _Robot] = {}
        for rid, gw in fleet.gateway.robots.items():
            r = self.robots[rid] = _Robot(node, fleet.robot(rid), gw, auths.get(rid), refusals)
            node.create_subscription(ActionChunk, robot_topic(r.robot.namespace, ACTION_CHUNK_TOPIC),
                                     lambda msg, r=r: self._on_chunk(r, msg), reliable_qos(50))

    # ---- FleetLink ------------------------------------------------------------------------

    def authorize(self, authorization: Optional[str], path: str) -> tuple[Optional[str], str]:
        named = path.strip("/").split("?", 1)[0]
        if self.token_check is None:  # insecure fleet: the path names the robot, or the first free one
            if named:
                return (named, "") if named in self.robots else (None, "unknown_robot")
            free = [rid for rid, r in self.robots.items() if r.session is None]
            return (free[0], "") if free else (None, "no_free_robot")
        robot_id, why = self.token_check.robot_for(authorization)
        if robot_id is None:
            return None, why
        if robot_id not in self.robots or (named and named != robot_id):
            return None, "wrong_robot"
        return robot_id, ""

    async def open(self, robot_id: str) -> OpenpiSession | str:
        r = self.robots[robot_id]
        session = OpenpiSession(r.robot, LAYOUTS[r.gateway.layout], hold_fallback=r.gateway.fallback == "hold")
        with self._lock:
            if r.last is not None:  # the robot's counters run on over its connections
                session.counters = r.last.counters
            r.session, r.last, r.exchange.core = session, session, session
        return session if await self.registered(session) else (
            session.refused or f"no answer from the policy server within {REGISTER_WAIT_S:g} s")

    async def registered(self, session: OpenpiSession) -> bool:
        """Waits while register_pending (the node's timer) registers the session's robot."""
        end = time.monotonic() + REGISTER_WAIT_S
        while time.monotonic() < end and not session.refused:
            if session.registered:
                return True
            await asyncio.sleep(0.05)
        return False

    def submit(self, session: OpenpiSession, obs: ObservationData) -> asyncio.Future:
        r = self.robots[obs.robot_id]
        future = self.loop.create_future()
        msg = observation_to_msg(obs)
        if r.auth is not None:
            try:
                msg.auth = r.auth.tag_observation(digest(msg))
            except AuthError as e:
                future.set_exception(ValueError(f"not registered: {e}"))
                return future
        with self._lock:
            r.waiting = (obs.round_id, future)
        r.pub.publish(msg)
        return future

    def close(self, session: OpenpiSession) -> None:
        r = self.robots[session.robot.id]
        with self._lock:
            if r.session is session:
                r.session, r.waiting = None, None

    # ---- the executor's side --------------------------------------------------------------

    def register_pending(self) -> None:
        """From a node timer: registration for each connected robot the server has not taken yet."""
        for r in self.robots.values():
            s = r.session
            if s is not None and not s.registered and not s.refused:
                r.call.register()

    def publish_status(self) -> None:
        """From a 1 Hz node timer: each robot's client_status, as its robot client would publish it
        (physai-fleet's summary reads it)."""
        for r in self.robots.values():
            if r.last is not None:
                r.status_pub.publish(String(data=json.dumps(r.last.status(r.session is r.last))))

    def _on_chunk(self, r: _Robot, msg: ActionChunk) -> None:
        if r.auth is not None:
            try:
                r.auth.check_chunk(digest(msg), msg.auth)
            except AuthError as e:  # not the server's: counted, ignored
                self.refusals.refused(f"chunk for {r.robot.id}", e)
                return
        try:
            chunk = chunk_from_msg(msg)
        except Exception:
            self.unreadable += 1
            return
        with self._lock:
            waiting = r.waiting
            if waiting is None or waiting[0] != chunk.round_id:
                return  # a hold of our own, a late answer to a round given up, another round
            r.waiting = None
        future = waiting[1]
        self.loop.call_soon_threadsafe(lambda: None if future.done() else future.set_result(chunk))
