"""physai-fleet's start (physai_ros.fleet.startup and the CLI's first checks): the ROS domain a
run picks, the server's start-up progress relayed, and config/file errors as one line, exit 2."""
import os
import socket
import subprocess
import sys

import pytest
import yaml

from physai_ros.config.fleet import default_fleet_path
from physai_ros.fleet.startup import (DOMAIN_GAIN, PORT_BASE, UNICAST_OFFSET, StartupRelay, available_cores,
                                      choose_domain, domain_in_use, fleet_nodes_on, robots_that_fit)

from ros_rig import wait_for


def test_domain_choice_rules():
    busy = {0, 1}
    fleets = {0: ["policy_server"]}
    pick = lambda env: choose_domain(env, in_use=busy.__contains__, fleet_on=lambda d: fleets.get(d, []))
    assert pick({"ROS_DOMAIN_ID": "42"}).domain_id == 42  # the user's choice is kept
    choice = pick({})
    assert choice.domain_id == 2 and "already runs a physai_ros fleet (policy_server)" in choice.reason
    fleets.clear()  # domain 0 busy with other ROS tools (an rqt, say): stay where the user looks
    assert pick({}).domain_id == 0
    busy.clear()
    assert pick({}).reason == "ROS default"


def _free_domain() -> int:
    """A domain no participant on this host uses now, and not this test run's own."""
    return next(d for d in range(60, 102)
                if str(d) != os.environ.get("ROS_DOMAIN_ID") and not domain_in_use(d))


def test_a_bound_discovery_port_marks_the_domain_in_use():
    domain = _free_domain()
    port = PORT_BASE + DOMAIN_GAIN * domain + UNICAST_OFFSET
    assert not domain_in_use(domain)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("0.0.0.0", port))
        assert domain_in_use(domain)
    assert not domain_in_use(domain)


@pytest.mark.ros
def test_a_real_participant_and_a_fleet_node_are_seen(tmp_path):
    """A node named policy_server on a domain binds its discovery port and is found by name."""
    domain = _free_domain()
    code = ("import rclpy, time; rclpy.init(); n = rclpy.create_node('policy_server'); "
            "print('up', flush=True); time.sleep(60)")
    env = {**os.environ, "ROS_DOMAIN_ID": str(domain), "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST"}
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "up"
        assert domain_in_use(domain)
        found = []
        wait_for(lambda: found.extend(fleet_nodes_on(domain, wait_s=2.0)) or found, 30,
                 f"the policy_server node to be discovered on domain {domain}")
        assert found == ["policy_server"]
    finally:
        proc.kill()
        proc.wait(10)


def test_startup_relay_prints_new_progress_lines_and_a_heartbeat(tmp_path):
    log = tmp_path / "policy_server.log"
    said, now = [], [100.0]
    relay = StartupRelay(log, "startup:", said.append, every_s=10.0, clock=lambda: now[0])
    relay.poll()  # no log yet
    log.write_text("[INFO] [1.0] [policy_server]: startup: loading x\n[INFO] other line\n[INFO] startup: half")
    now[0] = 103.0
    relay.poll()
    assert said == ["[  3.0 s] policy server: loading x"]  # the unfinished line waits for its newline
    with open(log, "a") as f:
        f.write(" done\n")
    now[0] = 104.0
    relay.poll()
    assert said[-1] == "[  4.0 s] policy server: half done"
    now[0] = 115.0
    relay.poll()
    assert said[-1] == "[ 15.0 s] still waiting for the policy server to serve"


def _fleet_cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "physai_ros.fleet", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def test_cli_errors_are_one_line_without_traceback(tmp_path):
    doc = yaml.safe_load(default_fleet_path().read_text())
    doc["server"]["scheduler"] = "fiffo"
    typo = tmp_path / "typo.yaml"
    typo.write_text(yaml.safe_dump(doc))
    doc = yaml.safe_load(default_fleet_path().read_text())
    doc["server"]["model"]["checkpoint"] = str(tmp_path / "no_ckpt")
    missing = tmp_path / "missing.yaml"
    missing.write_text(yaml.safe_dump(doc))
    cases = [
        (typo, "physai-fleet: error: server.scheduler: expected one of ['fifo', 'autellix', 'wait_ratio'], got 'fiffo'"),
        (missing, f"physai-fleet: error: server.model.checkpoint '{tmp_path / 'no_ckpt'}' (in {missing}): "
                  f"the checkpoint directory {tmp_path / 'no_ckpt'} does not exist"),
        (tmp_path / "nope.yaml", f"physai-fleet: error: cannot read fleet file '{tmp_path / 'nope.yaml'}': "
                                 "No such file or directory"),
    ]
    for path, message in cases:
        out = _fleet_cli("--fleet", str(path), "--duration", "5", cwd=tmp_path)
        assert out.returncode == 2, out
        assert out.stderr.strip() == message and "Traceback" not in out.stdout + out.stderr
        assert not (tmp_path / "out").exists(), "nothing was started or written"


def test_cores_from_affinity_capped_by_a_cgroup_quota(tmp_path):
    allowed = len(os.sched_getaffinity(0))
    assert available_cores(tmp_path) == allowed  # no cgroup files: the affinity mask alone
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert available_cores(tmp_path) == allowed
    (tmp_path / "cpu.max").write_text("50000 100000\n")  # docker --cpus 0.5
    assert available_cores(tmp_path) == 0.5
    (tmp_path / "cpu.max").unlink()
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("150000\n")  # cgroup v1
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert available_cores(tmp_path) == min(allowed, 1.5)


def test_the_demo_runs_the_robots_the_cores_carry():
    assert robots_that_fit(2, 4) == 4  # the 2-core machines the demo was measured on
    assert robots_that_fit(1.5, 4) == 2
    assert robots_that_fit(1, 4) == 1  # never none
    assert robots_that_fit(64, 4) == 4  # never more than listed


def test_one_core_demo_runs_one_robot_and_says_so():
    """physai-fleet on the packaged demo, pinned to one CPU: the plan has one robot, and the user
    is told why and how to run all; a fleet file or --robots given is run as asked."""
    def dry(*args):
        out = subprocess.run(["taskset", "-c", "0", sys.executable, "-m", "physai_ros.fleet", "--dry-run", *args],
                             capture_output=True, text=True, timeout=120, env={**os.environ, "ROS_DOMAIN_ID": "0"})
        assert out.returncode == 0, out.stderr
        return out.stdout

    text = dry()
    assert "1 core(s) here: running 1 of the demo's 4 simulated robots" in text and "--robots 4 runs all" in text
    assert "(1 robot(s))" in text and "robot_1" not in text
    assert "(4 robot(s))" in dry("--robots", "4")
    assert "(4 robot(s))" in dry("--fleet", str(default_fleet_path()))
