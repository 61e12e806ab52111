"""No process outlives the test session that started it.

The session marks its environment (PHYSAI_TEST_SESSION=<token>); every process a test starts
inherits the mark, whether it is a direct child, a child's child, or an orphan adopted by init
after its parent died. After each test the sweep notes which marked processes appeared, so a
survivor can be traced to the test that left it; at the end of the session (also after -x or a
failure in a fixture) any marked process still alive is killed, and the session fails naming it
and the test after which it was first seen.

A pytest plugin: test/conftest.py takes its hooks and fixture; `pytest -p process_sweep` loads it
into any session (its own test does so).
"""
from __future__ import annotations

import os
import signal
import sys
import time
import uuid

import pytest

MARKER = "PHYSAI_TEST_SESSION"


def mark_session() -> str:
    """Marks this process's environment (children inherit it); returns the token."""
    token = os.environ.get(MARKER)
    if not token or not token.startswith(f"{os.getpid()}-"):  # a suite run by a test gets its own
        token = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
        os.environ[MARKER] = token
    return token


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()[:300]
    except OSError:
        return "?"


def _own_helpers() -> set[int]:
    """multiprocessing's resource tracker and forkserver of this process: they live until it
    exits (they read a pipe from it) and clean up after it, so they are not survivors."""
    pids = set()
    rt = sys.modules.get("multiprocessing.resource_tracker")
    if rt is not None and getattr(rt._resource_tracker, "_pid", None):
        pids.add(rt._resource_tracker._pid)
    fs = sys.modules.get("multiprocessing.forkserver")
    if fs is not None and getattr(fs._forkserver, "_forkserver_pid", None):
        pids.add(fs._forkserver._forkserver_pid)
    return pids


def marked_processes(token: str) -> dict[int, str]:
    """pid -> command line of every live process carrying this session's mark (not this one nor
    its multiprocessing helpers)."""
    wanted = f"{MARKER}={token}".encode()
    own = os.getpid()
    helpers = _own_helpers()
    found = {}
    try:
        entries = os.listdir("/proc")
    except OSError:  # no procfs: nothing to sweep on this platform
        return found
    mid_exec = []
    for name in entries:
        if not name.isdigit() or int(name) == own or int(name) in helpers:
            continue
        env = _environ(int(name))
        if env is None:  # gone, or another user's
            continue
        if wanted in env.split(b"\0"):
            found[int(name)] = _cmdline(int(name))
        elif not env and _may_be_mid_exec(int(name)):
            mid_exec.append(int(name))
    # A process caught in exec reads an empty environ until its new image is mapped (a busy host
    # makes that window milliseconds wide): read those again before deciding they are not ours.
    for _ in range(20):
        if not mid_exec:
            break
        time.sleep(0.005)
        again = []
        for pid in mid_exec:
            env = _environ(pid)
            if env and wanted in env.split(b"\0"):
                found[pid] = _cmdline(pid)
            elif env == b"" and _may_be_mid_exec(pid):
                again.append(pid)
        mid_exec = again
    return found


def _environ(pid: int) -> bytes | None:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read()
    except OSError:
        return None


_PF_KTHREAD = 0x00200000


def _may_be_mid_exec(pid: int) -> bool:
    """Started in the last few seconds, not a kernel thread (whose environ is always empty) and
    not a zombie (whose environ is empty too: it is not counted). The age bound keeps a
    long-lived process that cleared its environment from costing every scan its retries."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(") ", 1)[1].split()
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return False
    young = time.clock_gettime(time.CLOCK_BOOTTIME) - started < 5.0
    return young and fields[0] not in "ZX" and not int(fields[6]) & _PF_KTHREAD


class ProcessSweep:
    def __init__(self) -> None:
        self.token = mark_session()
        self.first_seen: dict[int, str] = {}  # pid -> the test at whose end it was first seen
        self.test_ends: list[tuple[float, str]] = []  # (boot-clock seconds, nodeid) per test end

    def seen_at(self, nodeid: str) -> None:
        self.test_ends.append((time.clock_gettime(time.CLOCK_BOOTTIME), nodeid))
        for pid in marked_processes(self.token):
            self.first_seen.setdefault(pid, nodeid)

    def started_during(self, pid: int) -> str:
        """The test that was running when pid started, from its start time: for a process the
        scan after its test missed (one still in exec after the scan's retries). The start time
        is kept in clock ticks, so a test that ended within the start's tick is named together
        with the next one rather than guessed."""
        try:
            with open(f"/proc/{pid}/stat") as f:
                ticks = int(f.read().rsplit(") ", 1)[1].split()[19])
        except (OSError, IndexError, ValueError):
            return "the last test"
        tick = 1.0 / os.sysconf("SC_CLK_TCK")
        started = ticks * tick  # truncated to a tick: the start lies in [started, started + tick)
        candidates = [nodeid for end, nodeid in self.test_ends if end >= started]
        if not candidates:
            return "the last test"
        # A test that ended within that tick may have ended just before the process started.
        ends = [end for end, _ in self.test_ends if end >= started]
        if ends[0] < started + tick and len(candidates) > 1:
            return f"{candidates[0]} or {candidates[1]}"
        return candidates[0]

    def survivors(self, grace_s: float = 10.0) -> dict[int, str]:
        """Marked processes still alive after grace_s (time for processes being stopped to exit)."""
        end = time.monotonic() + grace_s
        alive = marked_processes(self.token)
        while alive and time.monotonic() < end:
            time.sleep(0.2)
            alive = marked_processes(self.token)
        return alive

    def kill(self, pids) -> None:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass

    def report(self, alive: dict[int, str]) -> str:
        lines = [f"{len(alive)} process(es) started by this test session outlived it (killed now):"]
        for pid, cmd in sorted(alive.items()):
            lines.append(f"  pid {pid}, first seen after {self.first_seen.get(pid) or self.started_during(pid)}: {cmd}")
        return "\n".join(lines)


_SWEEP = ProcessSweep()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item):
    # Before the teardown: what setup and the call started is alive now, and the last test's
    # teardown is where the session fixture below fails.
    _SWEEP.seen_at(item.nodeid)
    yield


@pytest.fixture(scope="session", autouse=True)
def no_process_outlives_the_session():
    """Torn down last (after every module's fixtures): a process a test started that is still
    alive then is killed, and this teardown fails naming it."""
    yield
    alive = _SWEEP.survivors()
    if alive:
        _SWEEP.kill(alive)
        pytest.fail(_SWEEP.report(alive), pytrace=False)


def pytest_sessionfinish(session):
    """The safety net for a session that ended without that teardown (Ctrl-C): kill what is left."""
    alive = _SWEEP.survivors(grace_s=2.0)
    if alive:
        _SWEEP.kill(alive)
        print("\n" + _SWEEP.report(alive), flush=True)
        if session.exitstatus == 0:
            session.exitstatus = 1
