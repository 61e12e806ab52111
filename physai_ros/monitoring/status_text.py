"""/diagnostics statuses as text, the way rqt_robot_monitor groups them (physai_ros.nodes.echo
prints it; tests check it without ROS)."""
from __future__ import annotations

from physai_ros.monitoring.diagnostics import LEVEL_NAMES


def level_int(lvl) -> int:
    return lvl[0] if isinstance(lvl, (bytes, bytearray)) else int(lvl)


def format_statuses(statuses: dict, values: bool = False) -> str:
    """name -> (level, message, [(key, value)]) as text, worst level first, then by name."""
    lines = []
    for name, (lvl, msg, kvs) in sorted(statuses.items(), key=lambda kv: (-kv[1][0], kv[0])):
        lines.append(f"{LEVEL_NAMES.get(lvl, str(lvl)):5} {name}: {msg}")
        if values:
            lines += [f"        {k} = {v}" for k, v in kvs]
    return "\n".join(lines)
