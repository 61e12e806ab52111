"""What the fleet monitor reads from the nodes' /diagnostics, as plain data: each robot's
publisher-side stream rates (its FrequencyStatus tasks) over time, its controller's refusals by
reason and applied holds, and the policy server's per-robot wait ratio and SLO and its queue depth
over time. The fleet_monitor node hands each status here as (name, hardware id, values)."""
from __future__ import annotations

from typing import Iterable, Mapping, Optional

from physai_ros.monitoring.robot_summary import PublishedRate

# The publisher-side rates the robots' nodes report in their FrequencyStatus diagnostics: the sim
# robot's sensors and the trajectory controller's commands.
PUBLISHED_STREAMS = ("wrench", "joint_states", "camera", "joint_trajectory")
SERVER_PREFIX = "policy_server: "

Series = tuple[list[float], list[float]]


class DiagnosticsReader:
    def __init__(self, robots: Iterable[str]):
        """robots: the namespaces (without slash) the monitor watches; other robots' statuses are
        left out."""
        self.robots = set(robots)
        # Every stream a robot's nodes report is in the summary: one with no report in the window
        # reads 0 Hz (it was missing, and readers of the JSON met a KeyError).
        self.published: dict[str, dict[str, PublishedRate]] = {
            ns: {stream: PublishedRate() for stream in PUBLISHED_STREAMS} for ns in self.robots}
        self.rate_series: dict[str, Series] = {}  # "<ns>/<stream>" -> (t, Hz) per update
        self.refused: dict[str, dict[str, int]] = {}
        self.holds: dict[str, int] = {}
        self.slo_ms: dict[str, float] = {}
        # "<robot>" -> wait ratio, "scheduler" -> queue depth
        self.server_series: dict[str, dict[str, Series]] = {"wait_ratio": {}, "queue_depth": {}}

    def on_status(self, name: str, hardware_id: str, values: Mapping[str, str], stamp: float,
                  t: float) -> Optional[str]:
        """One status of a /diagnostics array (stamp: the array's, t: the monitor's clock).
        Returns why it could not be read, or None."""
        if name.startswith(SERVER_PREFIX):
            self._on_server_status(name[len(SERVER_PREFIX):], values, t)
            return None
        ns = hardware_id
        if ns not in self.published or ": " not in name:
            return None
        node, task = name.rsplit(": ", 1)
        try:
            if task.endswith(" rate"):  # a FrequencyStatus: "<stream> rate"
                stream = task[:-len(" rate")]
                self.published[ns].setdefault(stream, PublishedRate()).add(stamp, int(values["Events since startup"]))
                _append(self.rate_series.setdefault(f"{ns}/{stream}", ([], [])), t,
                        round(float(values["Actual frequency (Hz)"]), 2))
            elif node.endswith("trajectory_controller") and task == "rejections":
                self.refused[ns] = {k.split(".", 1)[1]: int(v) for k, v in values.items() if k.startswith("rejected.")}
            elif node.endswith("trajectory_controller") and task == "buffer":
                self.holds[ns] = int(values["holds_applied"])
        except (KeyError, ValueError):
            return f"unreadable diagnostics status {name!r}"
        return None

    def _on_server_status(self, task: str, values: Mapping[str, str], t: float) -> None:
        """policy_server statuses: per robot wait ratio and SLO, the fleet's queue depth."""
        key, label = ("queue_depth", "scheduler") if task == "fleet" else ("wait_ratio", task)
        if task != "fleet" and task not in self.robots:
            return  # engines, registrations, inputs, robots this monitor does not watch
        try:
            value = float(values[key])
            if task != "fleet" and values.get("slo_ms") not in (None, "n/a"):
                self.slo_ms[task] = float(values["slo_ms"])
        except (KeyError, ValueError):
            return  # "n/a": no data yet
        _append(self.server_series[key].setdefault(label, ([], [])), t, round(value, 4))

    def series(self) -> dict[str, dict[str, dict[str, list[float]]]]:
        """The run report's `series` block: publisher-side stream rates, and the policy server's
        per-robot wait ratio and scheduler queue depth, over time."""
        out = {"stream_rates_hz": {label: {"t": ts, "v": vs} for label, (ts, vs) in self.rate_series.items()}}
        for kind, series in self.server_series.items():
            out[kind] = {label: {"t": ts, "v": vs} for label, (ts, vs) in series.items()}
        return out


def _append(series: Series, t: float, value: float) -> None:
    series[0].append(round(t, 3))
    series[1].append(value)
