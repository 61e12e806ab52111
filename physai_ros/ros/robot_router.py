"""The server's per-robot endpoints on ROS 2: one namespace per robot, who answers there, and
signed publishing, shared by the policy server and its extensions (language stream, task
pipelines, streaming), so that each of them names topics, checks senders and signs the same way.

- A robot's namespace ("/robot_0"; "" for none) is bound at registration or from fleet.yaml. The
  first robot bound to a namespace owns it: a message on a namespace's topic that claims another
  robot is refused (there is no trustworthy address to answer on) and counted against the owner.
- One publisher per (namespace, topic) and one subscription per (namespace, topic), created once
  (DDS discovery takes time: topics for known robots exist before their first message).
- `publish` signs and publishes under one lock: a session's counters reach the robot in the order
  they were signed, whichever thread (DDS executor, serving threads, a worker) publishes.
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Optional

from physai_ros.protocol.topics import robot_topic
from physai_ros.ros.message_digest import digest


def namespace_prefix(namespace: str) -> str:
    """fleet.yaml's or a registration's namespace as a topic prefix: "/robot_0", or "" for none."""
    ns = str(namespace).strip("/")
    return "/" + ns if ns else ""


class RobotRouter:
    def __init__(self, node, auth=None):
        """auth: the server's ServerAuth (signs what it publishes), None on an insecure fleet."""
        self.node = node
        self.auth = auth
        self._lock = threading.Lock()  # the maps below: DDS callbacks and serving threads read them
        self._sign_lock = threading.Lock()  # sign and publish in one step
        self._ns_by_robot: dict[str, str] = {}
        self._owner_by_ns: dict[str, str] = {}
        self._pubs: dict[tuple[str, str], Any] = {}
        self._subs: dict[tuple[str, str], Any] = {}

    # ---- namespaces and owners ----------------------------------------------------------

    def bind(self, robot_id: str, namespace: str) -> str:
        """Serve `robot_id` on `namespace` (its first robot owns it); returns the prefix."""
        ns = namespace_prefix(namespace)
        with self._lock:
            self._ns_by_robot[robot_id] = ns
            self._owner_by_ns.setdefault(ns, robot_id)
        return ns

    def namespace_of(self, robot_id: str) -> Optional[str]:
        with self._lock:
            return self._ns_by_robot.get(robot_id)

    def owner(self, ns: str) -> str:
        """The robot a namespace's topics belong to (the namespace itself when none is bound)."""
        with self._lock:
            return self._owner_by_ns.get(ns, ns)

    def misclaim(self, claimed_robot_id: str, ns: str, topic: str) -> Optional[str]:
        """None when `claimed_robot_id` is served on `ns`; else why a message on ns's `topic`
        claiming it is refused (a message on /robot_0/x claiming robot_1 would be served as it)."""
        with self._lock:
            claimed_ns = self._ns_by_robot.get(claimed_robot_id)
        if claimed_ns == ns:
            return None
        return (f"{robot_topic(ns, topic)} claims robot {str(claimed_robot_id)[:64]!r}"
                + (f" (served on {claimed_ns})" if claimed_ns is not None else " (unknown)"))

    # ---- topics -------------------------------------------------------------------------

    def publisher(self, ns: str, msg_type, topic: str, qos) -> Any:
        """The one publisher of `topic` in namespace `ns` (created on first use)."""
        with self._lock:
            pub = self._pubs.get((ns, topic))
            if pub is None:
                pub = self._pubs[ns, topic] = self.node.create_publisher(msg_type, robot_topic(ns, topic), qos)
            return pub

    def subscribe(self, ns: str, msg_type, topic: str, callback: Callable[[Any, str], None], qos) -> bool:
        """Subscribe `callback(msg, ns)` to `topic` in `ns` once; True when this call created it."""
        with self._lock:
            if (ns, topic) in self._subs:
                return False
            self._subs[ns, topic] = self.node.create_subscription(
                msg_type, robot_topic(ns, topic), lambda m, ns=ns: callback(m, ns), qos)
            return True

    def publish(self, robot_id: str, topic: str, msg, kind: Optional[str] = None) -> bool:
        """Publish `msg` on the robot's `topic`, signed as `kind` (security.endpoints) when the fleet
        is secure. False when the robot has no such publisher (nowhere to answer)."""
        with self._lock:
            ns = self._ns_by_robot.get(robot_id)
            pub = self._pubs.get((ns, topic)) if ns is not None else None
        if pub is None:
            return False
        with self._sign_lock:
            if self.auth is not None and kind is not None:
                msg.auth = self.auth.sign(kind, digest(msg))
            pub.publish(msg)
        return True
