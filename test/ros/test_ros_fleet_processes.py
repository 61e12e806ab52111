"""ProcessGroup: children are started from specs, reported when they die, and always stopped
(SIGTERM, then SIGKILL for a child that ignores it)."""
import os
import signal
import sys
from pathlib import Path

import pytest

from physai_ros.fleet.processes import ProcessGroup, ProcessSpec

HERE = Path(__file__).parent


def _env():
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}


def test_stop_terminates_and_escalates(tmp_path):
    group = ProcessGroup(tmp_path, env=_env())
    polite = group.start(ProcessSpec("polite", "ros_test_child", params={"mode": "polite"}))
    stubborn = group.start(ProcessSpec("stubborn", "ros_test_child", params={"mode": "stubborn"}))
    with pytest.raises(ValueError, match="duplicate"):
        group.start(ProcessSpec("polite", "ros_test_child"))
    assert _wait_for_line(tmp_path / "stubborn.log", "ready") and _wait_for_line(tmp_path / "polite.log", "ready")
    codes = group.stop(grace_s=1.0)
    assert codes["polite"] == 0  # handled SIGTERM and exited cleanly
    assert codes["stubborn"] == -signal.SIGKILL
    assert polite.popen.poll() is not None and stubborn.popen.poll() is not None


def test_exited_children_are_reported_with_their_logs(tmp_path):
    with ProcessGroup(tmp_path, env=_env()) as group:
        group.start(ProcessSpec("crash", "ros_test_child", params={"mode": "crash"}))
        group.procs[0].popen.wait(timeout=30)
        assert group.exited() == [("crash", 3)]
        assert "crashing on purpose" in group.log_tail("crash")


def _wait_for_line(path: Path, text: str, timeout: float = 30.0) -> bool:
    import time

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if path.exists() and text in path.read_text():
            return True
        time.sleep(0.05)
    return False
