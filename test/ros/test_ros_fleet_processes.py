"""ProcessGroup: children are started from specs, reported when they die, and always stopped
(SIGTERM, then SIGKILL for a child that ignores it)."""
import os
import signal
from pathlib import Path

import pytest

from physai_ros.fleet.processes import ProcessGroup, ProcessSpec

from machine_load import Deadline

HERE = Path(__file__).parent


def _env():
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}


def test_stop_terminates_and_escalates(tmp_path, capfd):
    group = ProcessGroup(tmp_path, env=_env())
    polite = group.start(ProcessSpec("polite", "ros_test_child", params={"mode": "polite"}))
    stubborn = group.start(ProcessSpec("stubborn", "ros_test_child", params={"mode": "stubborn"}))
    with pytest.raises(ValueError, match="duplicate"):
        group.start(ProcessSpec("polite", "ros_test_child"))
    assert _wait_for_line(tmp_path / "stubborn.log", "ready") and _wait_for_line(tmp_path / "polite.log", "ready")
    codes = group.stop(grace_s=1.0)
    assert codes["polite"] == 0  # handled SIGTERM and exited cleanly
    assert codes["stubborn"] == -signal.SIGKILL
    # The kill is said aloud, with the pid: it can leave a Fast DDS shared-memory port locked.
    err = capfd.readouterr().err
    assert f"pid {stubborn.popen.pid} " in err and "killed" in err and "polite" not in err, err
    assert polite.popen.poll() is not None and stubborn.popen.poll() is not None


def test_exited_children_are_reported_with_their_logs(tmp_path):
    with ProcessGroup(tmp_path, env=_env()) as group:
        group.start(ProcessSpec("crash", "ros_test_child", params={"mode": "crash"}))
        group.procs[0].popen.wait(timeout=30)
        assert group.exited() == [("crash", 3)]
        assert "crashing on purpose" in group.log_tail("crash")


def _wait_for_line(path: Path, text: str, timeout: float = 30.0) -> bool:
    import time

    deadline = Deadline(timeout)
    while not deadline.expired():
        if path.exists() and text in path.read_text():
            return True
        time.sleep(0.05)
    return False


TRICKY_STRINGS = ["place the blue cube then the red cube on the green pad", "note: red first", "yes", "",
                  "it's", "1.5", "[red]", "# not a comment"]


def test_string_parameters_reach_the_node_as_written():
    """rcl reads `-p name:=value` as YAML, so a free-text prompt could turn into a mapping, a bool
    or nothing and kill the node at declare_parameter: ProcessSpec.argv quotes what needs it.
    The arguments go through rcl's own parser here, as in a child process."""
    import rclpy

    params = {f"s{i}": v for i, v in enumerate(TRICKY_STRINGS)}
    params["names"] = ["joint_0", "a,b", "x: y"]
    argv = ProcessSpec("p", "m", params=params).argv("py")
    ctx = rclpy.Context()
    rclpy.init(args=argv[argv.index("--ros-args"):], context=ctx)
    try:
        node = rclpy.create_node("param_probe", context=ctx)
        for name, want in params.items():
            default = [""] if isinstance(want, list) else "x"
            assert node.declare_parameter(name, default).value == want, (name, argv)
        node.destroy_node()
    finally:
        rclpy.try_shutdown(context=ctx)
