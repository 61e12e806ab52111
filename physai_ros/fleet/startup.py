"""physai-fleet's start: which ROS domain the fleet runs on, waiting for the policy server while
telling the user what it is doing, and when it counts as serving.

Two fleets on one machine used to share ROS domain 0 and cross-talk (robot_0 of one fleet served
by the other's server). A run now keeps ROS_DOMAIN_ID when the user set it, uses ROS's default 0
when no other fleet is there, and otherwise the first free domain, printed so `rqt` can follow.
The policy server can take a minute to start on a busy 2-core machine (torch import, checkpoint,
profiling every batch size): its "startup:" log lines are relayed with the time waited so far.
"""
from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from physai_ros.protocol.topics import REGISTER_SERVICE

# Fast DDS (RTPS spec 9.6.1.1): participant i of domain d receives discovery unicast on
# 7400 + 250 d + 10 + 2 i. A domain with a live participant has one of these ports bound.
PORT_BASE, DOMAIN_GAIN, UNICAST_OFFSET, PARTICIPANT_GAIN = 7400, 250, 10, 2
MAX_DOMAIN_ID = 101  # ROS 2's portable range on Linux (0..101)
PROBE_PARTICIPANTS = 8
FLEET_NODE_NAMES = ("policy_server", "fleet_monitor")


@dataclass(frozen=True)
class DomainChoice:
    domain_id: int
    reason: str


def domain_in_use(domain_id: int, participants: int = PROBE_PARTICIPANTS) -> bool:
    """True if a DDS participant of this domain listens on this host (a bound discovery port)."""
    for i in range(participants):
        port = PORT_BASE + DOMAIN_GAIN * domain_id + UNICAST_OFFSET + PARTICIPANT_GAIN * i
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                s.bind(("0.0.0.0", port))
            except OSError:
                return True
    return False


def fleet_nodes_on(domain_id: int, wait_s: float = 2.0) -> list[str]:
    """Names of physai_ros fleet nodes visible on a domain (a short DDS discovery probe)."""
    import rclpy
    from rclpy.signals import SignalHandlerOptions

    ctx = rclpy.Context()
    rclpy.init(context=ctx, domain_id=domain_id, signal_handler_options=SignalHandlerOptions.NO)
    try:
        node = rclpy.create_node("physai_fleet_domain_probe", context=ctx)
        try:
            deadline = time.monotonic() + wait_s
            while True:
                found = sorted({n for n in node.get_node_names() if n in FLEET_NODE_NAMES})
                if found or time.monotonic() >= deadline:
                    return found
                time.sleep(0.1)
        finally:
            node.destroy_node()
    finally:
        ctx.try_shutdown()


def choose_domain(env: dict[str, str],
                  in_use: Callable[[int], bool] = domain_in_use,
                  fleet_on: Callable[[int], list[str]] = fleet_nodes_on) -> DomainChoice:
    """The user's ROS_DOMAIN_ID if set; else 0 unless another fleet runs there (an rqt or any
    other ROS tool on domain 0 is no reason to leave it: the user expects to watch the fleet
    there); else the first domain with no participant on this host."""
    given = env.get("ROS_DOMAIN_ID", "").strip()
    if given:
        return DomainChoice(int(given), "from ROS_DOMAIN_ID")
    if not in_use(0):
        return DomainChoice(0, "ROS default")
    others = fleet_on(0)
    if not others:
        return DomainChoice(0, "ROS default (other ROS 2 nodes are on it, no physai_ros fleet)")
    for d in range(1, MAX_DOMAIN_ID + 1):
        if not in_use(d):
            return DomainChoice(d, f"domain 0 already runs a physai_ros fleet ({', '.join(others)})")
    raise RuntimeError(f"no free ROS domain id in 1..{MAX_DOMAIN_ID} on this host; set ROS_DOMAIN_ID")


# The default demo's robots run on the server's machine. Measured with its fleet.yaml rates on a
# 2-core AMD EPYC (2026-11-29, physai-fleet with 5 s /proc samples): one simulated robot's
# three processes use ~0.3 of a core (sim 0.13-0.20, client ~0.1, controller ~0.1), and the
# server 0.7-0.9 while it serves four of them.
ROBOT_SIDE_CORES = 0.3
SERVER_CORES = 0.8


def available_cores(cgroup_root: Path = Path("/sys/fs/cgroup")) -> float:
    """CPUs this process may run on, capped by a cgroup CPU quota (a container's --cpus)."""
    cores = float(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    quota = None
    try:  # cgroup v2: "max 100000" or "150000 100000"
        limit, period = (cgroup_root / "cpu.max").read_text().split()[:2]
        quota = None if limit == "max" else int(limit) / int(period)
    except (OSError, ValueError):
        try:  # cgroup v1: -1 is no limit
            limit = int((cgroup_root / "cpu" / "cpu.cfs_quota_us").read_text())
            period = int((cgroup_root / "cpu" / "cpu.cfs_period_us").read_text())
            quota = limit / period if limit > 0 else None
        except (OSError, ValueError):
            quota = None
    return min(cores, quota) if quota else cores


def robots_that_fit(cores: float, listed: int) -> int:
    """How many of the demo's simulated robots this machine runs beside the server (at least one)."""
    fit = int((cores - SERVER_CORES) / ROBOT_SIDE_CORES + 1e-9)
    return max(1, min(listed, fit))


class StartupRelay:
    """Relays the policy server's new "startup:" log lines, and every `every_s` a line saying
    how long the wait has lasted, so a slow start never looks like a hang."""

    def __init__(self, log_path: Path | None, prefix: str, say: Callable[[str], None],
                 every_s: float = 10.0, clock: Callable[[], float] = time.monotonic):
        self.log_path, self.prefix, self.say, self.every_s, self.clock = log_path, prefix, say, every_s, clock
        self.t0 = clock()
        self._offset = 0
        self._partial = b""
        self._last_said = self.t0

    def poll(self) -> None:
        now = self.clock()
        said = False
        for line in self._new_lines():
            at = line.find(self.prefix)
            if at >= 0:
                self.say(f"[{now - self.t0:5.1f} s] policy server: {line[at + len(self.prefix):].strip()}")
                said = True
        if said:
            self._last_said = now
        elif now - self._last_said >= self.every_s:
            self.say(f"[{now - self.t0:5.1f} s] still waiting for the policy server to serve")
            self._last_said = now

    def _new_lines(self) -> list[str]:
        if self.log_path is None:
            return []
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except OSError:
            return []
        self._offset += len(data)
        data = self._partial + data
        *lines, self._partial = data.split(b"\n")
        return [ln.decode(errors="replace") for ln in lines]


def clients_answered(client_status: dict[str, dict]) -> bool:
    """Whether any robot client has had an answer from the policy server (a registration
    accepted or refused), from their client_status JSON."""
    return any(st.get("server_instance") or st.get("registrations", 0) > 0 or st.get("refused", 0) > 0
               for st in client_status.values())


def server_answers(monitor, client_status: dict[str, dict]) -> bool:
    """The policy server serves: its register service is in the graph and a client got an
    answer. The service alone is not enough: the server creates it inside its constructor,
    which then still sets up the robots' topics, the serving thread and the streaming engine,
    and answers nothing until it returns and spins (74 s on a first run here: an 8-robot
    --duration 40 run ended before any robot registered, and its summary said "0 rounds,
    client unregistered" while the client logs showed them served after it)."""
    return monitor.count_services(REGISTER_SERVICE) > 0 and clients_answered(client_status)


def robots_not_streaming(monitor) -> list[str]:
    """Robots the monitor has not yet heard from both ends of: the simulated arm (joint_states)
    and its trajectory controller (execution_info). A --scripted run's --duration counts from
    when this is empty: on a busy machine the processes' imports alone took 10 s of a 12 s run,
    whose summary then had no controller rates at all."""
    from physai_ros.protocol.topics import EXECUTION_INFO_TOPIC, JOINT_STATES_TOPIC

    return [ns for ns, counters in monitor.rates.items()
            if not all(t in counters and counters[t].count for t in (JOINT_STATES_TOPIC, EXECUTION_INFO_TOPIC))]
