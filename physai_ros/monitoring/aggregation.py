"""The fleet's /diagnostics as one tree for rqt_robot_monitor, as plain data (the node is
nodes/diagnostics_aggregator.py).

rqt_robot_monitor reads /diagnostics_agg, what ROS's diagnostic_aggregator publishes: every
message the whole tree, named as paths, with a status of its own for every level (a level
without one is deleted from the view with all below it). Node statuses arrive on /diagnostics one
node at a time, named "<node path>: <task>" ("robot_0/robot_client: client"). This keeps each
name's last status and, at every publication, gives:
  leaves   "/robot_0/robot_client/client": the status as last received; STALE once no update
           came for `stale_s` (a dead or hung node), its message saying since when
  parents  "/robot_0/robot_client", "/robot_0": the worst of their children, as the C++
           aggregator grades a group: STALE when all children are, ERROR when any is ERROR or
           STALE, else the worst of OK / WARN; the message is just "OK", "Warning", "Error" or
           "Stale" (rqt's error and warning panes list only leaves, told apart by these words)
Statuses not named "<node>: <task>" (another package's) go under "/other/".
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Callable, Iterable

from physai_ros.monitoring.diagnostics import ERROR, OK, STALE, WARN

PARENT_MESSAGES = {OK: "OK", WARN: "Warning", ERROR: "Error", STALE: "Stale"}
OTHER = "other"


@dataclass(frozen=True)
class Status:
    name: str
    level: int
    message: str
    hardware_id: str = ""
    values: tuple[tuple[str, str], ...] = ()


def tree_path(name: str) -> tuple[str, ...]:
    """A node status's place in the tree: ("robot_0", "robot_client", "client")."""
    node, sep, task = name.partition(": ")
    parts = [p for p in node.strip("/").split("/") if p] if sep else []
    if not sep or not parts or not task.strip():
        return (OTHER, *[p for p in name.strip("/").split("/") if p]) if name.strip("/") else (OTHER, "(unnamed)")
    # A "/" in a task name would make a level of its own; it is part of the leaf's name.
    return (*parts, task.strip().replace("/", "|"))


def group_level(levels: list[int]) -> int:
    if not levels:
        return OK
    if all(lvl == STALE for lvl in levels):
        return STALE
    if any(lvl in (ERROR, STALE) for lvl in levels):
        return ERROR
    return max(levels)


class DiagnosticsAggregator:
    def __init__(self, stale_s: float = 5.0, clock: Callable[[], float] = time.monotonic):
        self.stale_s, self.clock = stale_s, clock
        self._last: dict[tuple[str, ...], tuple[float, Status]] = {}  # path -> (received, status)

    def update(self, statuses: Iterable[Status], now: float | None = None) -> None:
        now = self.clock() if now is None else now
        for st in statuses:
            self._last[tree_path(st.name)] = (now, st)

    def aggregate(self, now: float | None = None) -> list[Status]:
        """The whole tree: parents before their children, siblings by name."""
        now = self.clock() if now is None else now
        leaves: dict[tuple[str, ...], Status] = {}
        for path, (seen, st) in self._last.items():
            name = "/" + "/".join(path)
            age = now - seen
            if age > self.stale_s:
                leaves[path] = replace(st, name=name, level=STALE,
                                       message=f"stale: no update for {age:.0f} s (last: {st.message})")
            else:
                leaves[path] = replace(st, name=name, level=int(st.level))
        levels: dict[tuple[str, ...], int] = {p: s.level for p, s in leaves.items()}
        parents = sorted({path[:k] for path in leaves for k in range(1, len(path))}, key=len, reverse=True)
        for parent in parents:  # deepest first: a parent's children are graded before it
            children = [lvl for p, lvl in levels.items() if len(p) == len(parent) + 1 and p[:len(parent)] == parent]
            levels[parent] = group_level(children)
        return [leaves.get(p) or Status("/" + "/".join(p), levels[p], PARENT_MESSAGES[levels[p]])
                for p in sorted(levels)]



def top_level(tree: list[Status]) -> Status:
    """What /diagnostics_toplevel_state carries: the worst of an aggregated tree's top levels."""
    level = group_level([s.level for s in tree if s.name.count("/") == 1])
    return Status("toplevel_state", level, PARENT_MESSAGES[level])
