"""Two "hosts" joined by one cable, for network fault tests: Linux network namespaces and a veth
pair, node processes started inside them, the link cut and restored, and everything removed
afterwards even when the test fails.

    with VethLink("cut") as link:                  # namespaces <prefix>_a and <prefix>_b
        p = link.spawn(link.b, spec, log_dir)      # a ROS node process on host b
        link.down(link.b); ...; link.up(link.b)   # pull the cable at b's end, plug it back
        link.counters(link.b)["tx_bytes"]          # what crossed the cable

Only the private /30 below is used, on the veth inside the two namespaces: nothing is added to
the root namespace's network, so DDS traffic cannot leave the machine.

DDS across the cable: the tests' ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST would keep every
participant on its own host, so processes in these namespaces get `dds_env()` instead: SUBNET
discovery (multicast stays on the veth: it is the only interface besides lo), both addresses as
static peers, and Fast DDS restricted to UDPv4. Fast DDS would otherwise also offer its
shared-memory transport, and /dev/shm is shared by all namespaces on one machine; UDP-only makes
every sample cross the veth, which the tests check with the veth's byte counters.
"""
from __future__ import annotations

import itertools
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from physai_ros.fleet.processes import ProcessSpec

ADDR_A = "10.213.0.1"
ADDR_B = "10.213.0.2"
PREFIX_LEN = 30
NS_PREFIX = "physai_t"  # + <pid of the creating test process>_<n>_<a|b>
CAP_NET_ADMIN = 12
CAP_SYS_ADMIN = 21  # `ip netns add/exec` bind-mount the namespace and remount /sys

_counter = itertools.count()


def unavailable_reason() -> str | None:
    """Why namespaces cannot be made here (a reason to skip), or None. Only missing
    capabilities count; a missing `ip` or a failing command is an error, not a skip."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError as e:
        return f"cannot read /proc/self/status to check capabilities: {e}"
    eff = next((int(line.split()[1], 16) for line in status.splitlines() if line.startswith("CapEff:")), 0)
    missing = [name for bit, name in ((CAP_NET_ADMIN, "CAP_NET_ADMIN"), (CAP_SYS_ADMIN, "CAP_SYS_ADMIN"))
               if not eff >> bit & 1]
    if missing:
        return (f"network namespace tests need {' and '.join(missing)} (creating namespaces and veth "
                "pairs); this process lacks them")
    return None


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    exe = shutil.which("ip") or "/usr/sbin/ip"
    res = subprocess.run([exe, *args], capture_output=True, text=True, timeout=20)
    if check and res.returncode != 0:
        raise RuntimeError(f"`ip {' '.join(args)}` failed ({res.returncode}): {res.stderr.strip()}")
    return res


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_ns_processes(ns: str) -> None:
    res = _ip("netns", "pids", ns, check=False)
    for pid in (int(p) for p in res.stdout.split() if p.isdigit()):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def sweep_stale() -> list[str]:
    """Delete namespaces left by test processes that died without cleaning up (SIGKILLed
    pytest): ours are named after their creator's pid. Returns the names removed."""
    res = _ip("netns", "list", check=False)
    removed = []
    for line in res.stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        if not name.startswith(NS_PREFIX):
            continue
        pid = name[len(NS_PREFIX):].split("_", 1)[0]
        if pid.isdigit() and not _pid_alive(int(pid)):
            _kill_ns_processes(name)
            _ip("netns", "del", name, check=False)
            removed.append(name)
    return removed


@dataclass(frozen=True)
class Host:
    ns: str  # network namespace name
    dev: str  # its end of the veth
    addr: str


@dataclass
class NsProcess:
    name: str
    host: Host
    popen: subprocess.Popen
    log_path: Path

    def poll(self):
        return self.popen.poll()

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


@dataclass
class VethLink:
    """Namespaces `a` and `b` with one veth between them (a: ADDR_A, b: ADDR_B)."""

    tag: str = "link"
    a: Host = field(init=False)
    b: Host = field(init=False)
    procs: list[NsProcess] = field(default_factory=list, init=False)
    _made: list[str] = field(default_factory=list, init=False)

    def __post_init__(self):
        n = next(_counter)
        base = f"{NS_PREFIX}{os.getpid()}_{n}"
        # Interface names are limited to 15 characters and live in the namespaces only.
        self.a = Host(f"{base}_a", f"px{os.getpid() % 100000}{n}a"[:15], ADDR_A)
        self.b = Host(f"{base}_b", f"px{os.getpid() % 100000}{n}b"[:15], ADDR_B)

    # ---- set-up and teardown ------------------------------------------------------------

    def open(self) -> "VethLink":
        sweep_stale()
        try:
            for h in (self.a, self.b):
                _ip("netns", "add", h.ns)
                self._made.append(h.ns)
                _ip("-n", h.ns, "link", "set", "lo", "up")
            # Created inside a, then b's end moved to b: nothing is ever in the root namespace.
            _ip("-n", self.a.ns, "link", "add", self.a.dev, "type", "veth", "peer", "name", self.b.dev)
            _ip("-n", self.a.ns, "link", "set", self.b.dev, "netns", self.b.ns)
            for h in (self.a, self.b):
                _ip("-n", h.ns, "addr", "add", f"{h.addr}/{PREFIX_LEN}", "dev", h.dev)
                _ip("-n", h.ns, "link", "set", h.dev, "up")
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        """Stop every process started here (SIGINT, then SIGKILL), kill anything else still in
        the namespaces, delete them (which deletes the veth). Never raises."""
        self.stop(list(self.procs))
        for ns in reversed(self._made):
            try:
                _kill_ns_processes(ns)
                _ip("netns", "del", ns, check=False)
            except Exception:
                pass
        self._made.clear()

    def __enter__(self) -> "VethLink":
        return self.open()

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- the cable ----------------------------------------------------------------------

    def down(self, host: Host) -> None:
        """Pull the cable at `host`'s end: nothing crosses; each side's own traffic (lo and its
        local address) keeps working."""
        _ip("-n", host.ns, "link", "set", host.dev, "down")

    def up(self, host: Host) -> None:
        _ip("-n", host.ns, "link", "set", host.dev, "up")

    def counters(self, host: Host) -> dict[str, int]:
        """rx/tx bytes and packets of `host`'s veth end."""
        out = {}
        for key in ("rx_bytes", "tx_bytes", "rx_packets", "tx_packets"):
            res = subprocess.run([shutil.which("ip") or "/usr/sbin/ip", "netns", "exec", host.ns, "cat",
                                  f"/sys/class/net/{host.dev}/statistics/{key}"],
                                 capture_output=True, text=True, timeout=20, check=True)
            out[key] = int(res.stdout.strip())
        return out

    # ---- processes ----------------------------------------------------------------------

    def dds_env(self) -> dict[str, str]:
        return {"ROS_AUTOMATIC_DISCOVERY_RANGE": "SUBNET",
                "ROS_STATIC_PEERS": f"{self.a.addr};{self.b.addr}",
                "FASTDDS_BUILTIN_TRANSPORTS": "UDPv4",
                "PYTHONUNBUFFERED": "1"}

    def spawn(self, host: Host, spec: ProcessSpec | list[str], log_dir: str | Path,
              name: str | None = None, env: dict[str, str] | None = None) -> NsProcess:
        """Start a node (a fleet ProcessSpec) or any argv inside `host`'s namespace, in its own
        session, output to <log_dir>/<name>.log."""
        argv = spec.argv() if isinstance(spec, ProcessSpec) else list(spec)
        name = name or (spec.name if isinstance(spec, ProcessSpec) else Path(argv[0]).name)
        log_dir = Path(log_dir)
        log_dir.mkdir(parents=True, exist_ok=True)
        log_path = log_dir / f"{name.replace('/', '_')}.log"
        base = {k: v for k, v in os.environ.items() if k != "FASTDDS_DEFAULT_PROFILES_FILE"}
        full_env = {**base, **self.dds_env(), **(spec.env if isinstance(spec, ProcessSpec) else {}),
                    **(env or {})}
        with open(log_path, "wb") as out:
            popen = subprocess.Popen([shutil.which("ip") or "/usr/sbin/ip", "netns", "exec", host.ns, *argv],
                                     stdout=out, stderr=subprocess.STDOUT, env=full_env,
                                     start_new_session=True)
        proc = NsProcess(name, host, popen, log_path)
        self.procs.append(proc)
        return proc

    def kill(self, proc: NsProcess) -> None:
        """SIGKILL (a crash: no clean shutdown, no goodbye to DDS peers)."""
        try:
            os.killpg(proc.popen.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.popen.wait(timeout=10)

    def stop(self, procs: list[NsProcess], grace_s: float = 5.0) -> None:
        for p in procs:
            if p.popen.poll() is None:
                try:
                    os.killpg(p.popen.pid, signal.SIGINT)
                except ProcessLookupError:
                    pass
        end = time.monotonic() + grace_s
        for p in procs:
            try:
                p.popen.wait(timeout=max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.kill(p)
            if p in self.procs:
                self.procs.remove(p)

    def dead(self) -> list[tuple[str, int]]:
        return [(p.name, p.popen.returncode) for p in self.procs if p.popen.poll() is not None]

    def logs(self, chars: int = 2500) -> str:
        return "\n".join(f"--- {p.name} [{p.host.ns}] (rc={p.poll()})\n{p.log_tail(chars)}"
                         for p in self.procs)
