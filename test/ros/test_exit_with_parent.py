"""A node started in a session of its own (the launch file's policy server, under setsid) stops
when its launcher dies, as a terminal's hang-up no longer reaches it (ros.spin.stop_when_parent_dies)."""
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from physai_ros.ros.spin import EXIT_WITH_PARENT_ENV

from ros_rig import wait_for

pytestmark = pytest.mark.ros
ECHO = Path(__file__).with_name("ros_echo_node.py")


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _threads(pid: int) -> int:
    try:
        return int(next(ln.split()[1] for ln in Path(f"/proc/{pid}/status").read_text().splitlines()
                        if ln.startswith("Threads:")))
    except (OSError, StopIteration):
        return 0


@pytest.mark.parametrize("armed", [True, False])
def test_a_node_in_its_own_session_stops_when_its_launcher_is_killed(armed, tmp_path):
    """The launcher (a stand-in for `ros2 launch`) starts the node under setsid and is SIGKILLed:
    armed, the node exits on its own (SIGTERM from the kernel, a clean stop); not armed, it would
    run on as an orphan (killed here)."""
    env = dict(os.environ)
    env.pop(EXIT_WITH_PARENT_ENV, None)
    launcher = textwrap.dedent(f"""
        import os, subprocess, sys, time
        env = dict(os.environ, **({{{EXIT_WITH_PARENT_ENV!r}: str(os.getpid())}} if {armed} else {{}}))
        p = subprocess.Popen(["setsid", sys.executable, {str(ECHO)!r}, "/exit_with_parent_{int(armed)}"], env=env)
        print(p.pid, flush=True)
        time.sleep(600)
    """)
    parent = subprocess.Popen([sys.executable, "-c", launcher], stdout=subprocess.PIPE, text=True, env=env,
                              start_new_session=True)
    child = int(parent.stdout.readline())
    try:
        # Its own session (setsid has run and exec'd the node): the launcher's group signals miss it.
        wait_for(lambda: os.getsid(child) == child, 30, "the node in its own session")
        # DDS threads exist once rclpy.init ran, which run_node calls after arming the signal.
        wait_for(lambda: _threads(child) >= 3, 60, "the node's DDS threads")
        parent.kill()
        parent.wait(10)
        if armed:
            wait_for(lambda: not _alive(child), 60, "the node exited after its launcher died")
        else:
            assert _alive(child)
    finally:
        if _alive(child):
            os.kill(child, signal.SIGKILL)
        parent.stdout.close()
