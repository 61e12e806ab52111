"""`ros2 launch physai_ros fleet.launch.py` with the real launch, launch_ros and ros2cli
(test/ros2_tools.py finds them), against the installed package (the venv's ament layout): a
fleet file of one robot launched with num_robots:=2, both robots served and their controllers
executing chunks, `ros2 topic echo` of an action topic and of the aggregated diagnostics, the
rqt_robot_monitor and rqt_plot widgets under Xvfb (rqt_probe.py: the tree lists every node of the
fleet, the plots have data; screenshots kept with the test's files), then a terminal's Ctrl-C (SIGINT to the whole process group): every node finishes cleanly, launch exits
0, no robot was stopped by an escalation, nothing is left running."""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from physai_ros.protocol.topics import DIAGNOSTICS_AGG_TOPIC

from ros2_tools import find_tools

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "faults"))
from fault_fleet import fleet_doc  # noqa: E402

pytestmark = [pytest.mark.ros, pytest.mark.slow]
STARTUP_S = 240.0  # launch, then the server's first start on a loaded 2-core machine
ROBOTS = ("robot_0", "robot_1")
NODES = 2 + 3 * len(ROBOTS)  # policy_server, diagnostics_aggregator, and sim/client/controller per robot


def _terminal_child():
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # a background job would ignore it otherwise
    os.setpgrp()


def _echo(tools, topic: str, msg_type: str) -> str:
    # --no-daemon: the ros2cli daemon it would start outlives the test (the session sweep kills it).
    out = subprocess.run(tools.ros2("topic", "echo", topic, msg_type, "--once", "--no-daemon"), env=tools.env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return out.stdout


@contextlib.contextmanager
def xvfb():
    """A virtual X display (Debian's xvfb): yields its DISPLAY value."""
    n = next(n for n in range(90, 200) if not Path(f"/tmp/.X11-unix/X{n}").exists()
             and not Path(f"/tmp/.X{n}-lock").exists())
    if not shutil.which("Xvfb"):
        pytest.fail("rqt needs a display: install Debian's xvfb (and python3-pyqt5): make rqt-tools", pytrace=False)
    server = subprocess.Popen(["Xvfb", f":{n}", "-screen", "0", "1280x1024x24", "-nolisten", "tcp"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not Path(f"/tmp/.X11-unix/X{n}").exists():
            assert server.poll() is None and time.monotonic() < deadline, "Xvfb did not start"
            time.sleep(0.1)
        yield f":{n}"
    finally:
        server.terminate()
        server.wait(timeout=10)


def _rqt(tools, out_dir: Path) -> dict:
    expect = [f"/{r}/{node}" for r in ROBOTS for node in ("sim_robot", "robot_client", "trajectory_controller")]
    expect += [f"/{r}/robot_client/client" for r in ROBOTS] + ["/policy_server"]
    cmd = [sys.executable, str(Path(__file__).with_name("rqt_probe.py")), "--out", str(out_dir), "--seconds", "90"]
    cmd += [a for name in expect for a in ("--expect", name)]
    cmd += ["--plot", "/robot_0/metrics/latency_ms/data", "--plot", "/fleet/metrics/queue_depth/data"]
    with xvfb() as display:
        out = subprocess.run(cmd, env={**tools.env, "DISPLAY": display}, capture_output=True, text=True, timeout=150)
    probe = out_dir / "probe.json"
    assert probe.exists(), out.stdout[-3000:] + out.stderr[-3000:]
    seen = json.loads(probe.read_text())
    assert out.returncode == 0, f"rqt did not show the fleet: {seen}\n{out.stderr[-2000:]}"
    return seen


def test_ros2_launch_serves_the_fleet_and_ctrl_c_stops_every_node_cleanly(ros, tmp_path):
    from physai_ros_interfaces.msg import ExecutionInfo
    from std_msgs.msg import String

    from physai_ros.ros.qos import reliable_qos, sensor_data_qos

    tools = find_tools()
    doc = fleet_doc(robots=("robot_0",))
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(doc))
    executed = {r: 0 for r in ROBOTS}
    states = {r: set() for r in ROBOTS}
    for r in ROBOTS:
        ros.node.create_subscription(ExecutionInfo, f"/{r}/execution_info",
                                     lambda m, r=r: executed.__setitem__(r, max(executed[r], m.chunks_accepted)),
                                     sensor_data_qos(10))
        ros.node.create_subscription(String, f"/{r}/client_status",
                                     lambda m, r=r: states[r].add(json.loads(m.data)["state"]), reliable_qos())
    log = tmp_path / "launch.log"
    with open(log, "w") as out:
        launch = subprocess.Popen(tools.ros2("launch", "physai_ros", "fleet.launch.py", f"fleet_file:={path}",
                                             "num_robots:=2"),
                                  env=tools.env, stdout=out, stderr=subprocess.STDOUT, preexec_fn=_terminal_child)
    try:
        deadline = time.monotonic() + STARTUP_S
        while not all(n >= 3 for n in executed.values()):
            assert launch.poll() is None, f"ros2 launch ended early ({launch.returncode}):\n{log.read_text()[-4000:]}"
            assert time.monotonic() < deadline, f"not every robot executed chunks: {executed}\n{log.read_text()[-4000:]}"
            ros.spin_for(0.5)
        assert "robot_id: robot_1" in _echo(tools, "/robot_1/action_chunk", "physai_ros_interfaces/msg/ActionChunk")
        diag = _echo(tools, DIAGNOSTICS_AGG_TOPIC, "diagnostic_msgs/msg/DiagnosticArray")
        assert "name: /robot_1/robot_client/client" in diag and "name: /policy_server" in diag, diag[-2000:]
        seen = _rqt(tools, tmp_path / "rqt")
        assert seen["tree"]["/robot_0/robot_client/client"][0] == "client"  # a row per level, by name
        assert all(n >= 10 for n in seen["curves"].values()), seen["curves"]
    finally:
        if launch.poll() is None:
            os.killpg(launch.pid, signal.SIGINT)  # what Ctrl-C in the launching terminal does
        try:
            rc = launch.wait(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(launch.pid, signal.SIGKILL)
            launch.wait()
            raise AssertionError(f"ros2 launch did not stop within 90 s of Ctrl-C:\n{log.read_text()[-4000:]}")
    text = log.read_text()
    assert rc == 0, f"ros2 launch exited {rc}:\n{text[-4000:]}"
    assert text.count("process has finished cleanly") == NODES and "process has died" not in text, text[-4000:]
    assert not any("stopped" in s for s in states.values()), states
