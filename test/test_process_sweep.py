"""The session-end sweep: a process a test leaves behind fails the session that started it, named
with the test after which it appeared, and is killed; a clean session passes."""
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import process_sweep

HERE = Path(__file__).parent

LEAKY = textwrap.dedent("""
    import subprocess, sys

    def test_clean():
        subprocess.run([sys.executable, "-c", "pass"], check=True)

    def test_leaves_an_orphan(tmp_path_factory):
        # sh starts sleep in the background and exits: sleep is adopted by init, no longer our child
        out = {pidfile!r}
        subprocess.run(["sh", "-c", f"sleep 300 & echo $! > {{out}}"], check=True)
""")


def _inner_session(tmp_path, body: str) -> subprocess.CompletedProcess:
    (tmp_path / "test_inner.py").write_text(body)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "process_sweep", "-p", "no:cacheprovider", "-q",
                           "-o", "addopts=", str(tmp_path / "test_inner.py")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def test_an_orphan_left_by_a_test_fails_the_session_and_is_killed(tmp_path):
    pidfile = tmp_path / "orphan.pid"
    out = _inner_session(tmp_path, LEAKY.format(pidfile=str(pidfile)))
    text = out.stdout + out.stderr
    pid = int(pidfile.read_text())
    try:
        assert out.returncode != 0, text
        assert "1 process(es) started by this test session outlived it" in text, text
        assert f"pid {pid}, first seen after test_inner.py::test_leaves_an_orphan: sleep 300" in text, text
        assert "2 passed, 1 error" in text, text
        assert not _alive(pid)
    finally:
        if _alive(pid):
            os.kill(pid, 9)


def test_a_clean_session_passes(tmp_path):
    out = _inner_session(tmp_path, "import subprocess, sys\n\ndef test_child():\n"
                                   "    subprocess.run([sys.executable, '-c', 'pass'], check=True)\n")
    assert out.returncode == 0 and "1 passed" in out.stdout, out.stdout + out.stderr


def test_only_this_sessions_processes_are_marked():
    mine = subprocess.Popen(["sleep", "60"])
    stranger = subprocess.Popen(["sleep", "60"], env={k: v for k, v in os.environ.items() if k != process_sweep.MARKER})
    try:
        found = process_sweep.marked_processes(os.environ[process_sweep.MARKER])
        assert mine.pid in found and stranger.pid not in found
    finally:
        for p in (mine, stranger):
            p.kill()
            p.wait()


def test_this_processs_multiprocessing_helpers_are_not_survivors():
    """The resource tracker lives until pytest exits (then it cleans up shared memory after it)."""
    from multiprocessing import resource_tracker, shared_memory

    shm = shared_memory.SharedMemory(create=True, size=64)
    try:
        tracker = resource_tracker._resource_tracker._pid
        assert tracker and tracker not in process_sweep.marked_processes(os.environ[process_sweep.MARKER])
    finally:
        shm.close()
        shm.unlink()


def _start_time(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(") ", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")


def test_a_survivor_the_scan_missed_is_traced_by_its_start_time():
    """A process caught mid-exec reads an empty environ, so the scan after its test can miss it;
    its start time still names the test that was running."""
    sweep = process_sweep.ProcessSweep.__new__(process_sweep.ProcessSweep)
    sweep.first_seen, sweep.test_ends = {}, []
    sweep.token = "no-such-session"  # the scan finds nothing, as when it missed the process
    sweep.seen_at("test_before")
    time.sleep(0.05)  # clock ticks are 10 ms: the start must fall after the first test's end
    late = subprocess.Popen(["sleep", "60"])
    try:
        time.sleep(0.05)  # and its test must end a tick after it, else either test may have started it
        sweep.seen_at("test_that_started_it")
        sweep.seen_at("test_after")
        assert late.pid not in sweep.first_seen
        assert f"pid {late.pid}, first seen after test_that_started_it: sleep 60" in sweep.report({late.pid: "sleep 60"})
        sweep.test_ends[1] = (_start_time(late.pid) + 0.001, "test_that_started_it")  # ended in its start tick
        assert "first seen after test_that_started_it or test_after: sleep 60" in sweep.report({late.pid: "sleep 60"})
    finally:
        late.kill()
        late.wait()
