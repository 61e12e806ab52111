"""Opening a node's side of fleet authentication (physai_ros.security) from fleet.yaml and the
node's parameters, the same way in every node:

  keystore (string, ''): overrides fleet.yaml's security.keystore ('auto' or a directory)
  insecure (bool, false): overrides security.insecure (true only; a node cannot turn a fleet's
                          insecure setting off, the server and the robots must agree)
A node without a fleet file (a robot-only controller, an engine worker) reads the embedded
fleet.yaml's block, i.e. the auto keystore, unless these parameters say otherwise. Insecure is
said loudly at start (an ERROR line) and returned so the node reports it on /diagnostics too.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable, Iterable, Optional, TypeVar

from physai_ros.config.fleet import fleet_dir, load_fleet
from physai_ros.security.config import INSECURE_WARNING, SecurityConfig, open_keystore
from physai_ros.security.keystore import Identity, Keystore, KeystoreError

T = TypeVar("T")


def node_security(node, fleet=None) -> tuple[SecurityConfig, Optional[Path]]:
    """The node's SecurityConfig (fleet.yaml's block with the node's overrides) and the directory
    a relative keystore path is relative to."""
    keystore = node.declare_parameter("keystore", "").value
    insecure = bool(node.declare_parameter("insecure", False).value)
    if fleet is None:
        fleet_file = node.get_parameter("fleet_file").value if node.has_parameter("fleet_file") else ""
        fleet = load_fleet(fleet_file or None)
    sec = fleet.security
    if keystore:
        sec = dataclasses.replace(sec, keystore=keystore)
        base = Path.cwd()
    else:
        base = fleet_dir(fleet)
    if insecure:
        sec = dataclasses.replace(sec, insecure=True)
    return sec, base


def open_endpoint(node, sec: SecurityConfig, base: Optional[Path], need: Iterable[Identity],
                  make: Callable[[Keystore], T]) -> Optional[T]:
    """`make(keystore)` for a secure fleet, None (said loudly) for an insecure one. A missing
    keystore or key raises KeystoreError naming the file; the node does not start without it."""
    if sec.insecure:
        node.get_logger().error(INSECURE_WARNING)
        return None
    try:
        endpoint = make(open_keystore(sec, base, need))
    except KeystoreError as e:
        raise KeystoreError(f"{node.get_fully_qualified_name()}: {e}") from None
    node.get_logger().info(f"authentication on: {sec.describe()}")
    return endpoint


def security_diagnostics(sec: SecurityConfig, refused: Callable[[], dict] = dict):
    """A diagnostic_updater task: "security". WARN while insecure (every monitor shows it), OK
    otherwise, with the counts of messages refused for authentication by reason."""
    from physai_ros.monitoring.diagnostics import OK, WARN, level_byte

    def run(stat):
        counts = refused()
        if sec.insecure:
            stat.summary(level_byte(WARN), "INSECURE: messages are not authenticated (security.insecure)")
        else:
            total = sum(counts.values())
            stat.summary(level_byte(OK), f"authenticated ({sec.keystore})"
                         + (f", {total} message(s) refused" if total else ""))
        stat.add("insecure", str(sec.insecure))
        stat.add("keystore", sec.keystore)
        for reason, n in sorted(counts.items()):
            stat.add(f"refused.{reason}", str(n))
        return stat
    return run
