"""Every node type stops on SIGINT with exit code 0 before ros2 launch would escalate to SIGTERM
(5 s), whatever it is doing at the time (physai_ros.ros.spin; its design aims at 2 s):

  policy_server   during its warm-up (profiling the engine), and serving a robot with its
                  engine thread inside a batch that does not end (PHYSAI_FAULT_INJECTION stall)
  engine_worker   while importing, and with its inference thread inside the start-up profile
  sim_robot, robot_client, trajectory_controller   publishing, mid-round, executing a chunk
  a node stuck in close() or in a long callback: the watchdog ends it; a second signal exits
                  at once (a duplicate delivery of the first does not)

Real processes over real DDS (fault tests' ProcessRig, tiny model fleet), started together by
one module fixture. Each stop's exit time is printed (pytest -s) and recorded (junit property
sigint_exit_s). The asserted bound is launch's 5 s escalation, not the design's 2 s: a tighter
bound would fail on a loaded 2-core CI machine; the 2 s is measured on an idle one.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from physai_ros.config.fleet import load_fleet
from physai_ros.fleet import plan as fleet_plan
from physai_ros.fleet.processes import ProcessSpec
from physai_ros.ros.spin import EXIT_DEADLINE_S, describe_threads, node_main_name, time_left
from physai_lab.fault_injection import STALL_S, fault_env, parse_fault_spec

from faults.fault_fleet import fleet_doc
from faults.process_rig import STARTUP_S, ProcessRig, server_spec

LAUNCH_SIGTERM_AFTER_S = 5.0  # ros2 launch escalates a SIGINT that did not end the process
STALL_BATCH = 4  # the server's 4th batch never ends

# ---- pure helpers (no processes) -----------------------------------------------------------


def test_node_main_name_knows_node_processes_only():
    nodes = {"policy_server", "sim_robot"}
    py = "/venv/bin/python"
    # runpy imports physai_ros.nodes with argv[0] == "-m"
    argv = [py, "-u", "-m", "physai_ros.nodes.policy_server", "--ros-args"]
    assert node_main_name(["-m"], argv, nodes) == "policy_server"
    assert node_main_name(["-m"], [py, "-m", "physai_ros.nodes.unknown"], nodes) is None
    assert node_main_name(["-m"], [py, "-m", "pytest", "-m", "physai_ros.nodes.sim_robot"], nodes) is None
    assert node_main_name(["/opt/ros/lib/physai_ros/sim_robot", "--ros-args"], [], nodes) == "sim_robot"
    assert node_main_name(["/venv/bin/pytest", "test/ros"], [], nodes) is None
    assert node_main_name([], [], nodes) is None


def test_start_up_guard_leaves_other_processes_alone():
    import importlib

    import physai_ros.nodes

    before = [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)]
    importlib.reload(physai_ros.nodes)  # runs guard_start_up in this (a pytest) process
    assert [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)] == before


def test_time_left_and_thread_description():
    assert time_left(10.0, 9.25) == 0.75 and time_left(10.0, 11.0) == 0.0
    gate = threading.Event()
    t = threading.Thread(target=gate.wait, name="engine_like", daemon=True)
    t.start()
    try:
        time.sleep(0.05)
        text = describe_threads([t], sys._current_frames())
        assert text.startswith("engine_like in wait (threading.py:"), text
        assert describe_threads([], {}) == "nothing"
    finally:
        gate.set()
        t.join()


def test_stall_fault_spec():
    plans = parse_fault_spec("engine_0:stall@3,engine_0:raise@1")
    assert plans["engine_0"].stall_on == {3} and plans["engine_0"].raise_on == {1}
    assert STALL_S >= 60  # outlasts any stop budget


# ---- real processes ------------------------------------------------------------------------

HERE = Path(__file__).parent
exit_times: dict[str, float] = {}  # process -> seconds from its first signal to its exit


def _write(path: Path, doc: dict) -> str:
    path.write_text(yaml.safe_dump(doc))
    return str(path)


@pytest.fixture(scope="module")
def rig(tmp_path_factory):
    d = tmp_path_factory.mktemp("shutdown")
    r = ProcessRig(d / "logs", node_name="shutdown_test")
    # Serving: one robot with its sim, client and controller; one server batch stalls.
    # Slow actions (2 Hz: a tiny chunk of 8 lasts 4 s) and an early trigger (3 s before the
    # buffer runs dry), so the controller still executes chunk 3 while batch 4 is stuck.
    serving = _write(d / "serving.yaml", fleet_doc(robots=("r0",), tasks={"pick_place": {
        "action_rate_hz": 2, "trigger_margin_s": 3.0}}))
    # Warm-up: a profile long enough (tiny model, 500 reps) to be mid-way when stopped.
    warm = _write(d / "warmup.yaml", fleet_doc(robots=("w0",), server={"profile": {"reps": 500, "max_batch": 4}}))
    cfg = load_fleet(serving)
    robot = fleet_plan.robot_specs(cfg, cfg.robot("r0"))
    client = next(s for s in robot if s.name.endswith("robot_client"))
    specs = [
        # Its own namespace: it never gets to its services, but its node stays apart from the other server's.
        ProcessSpec("warmup_server", "physai_ros.nodes.policy_server", "warmup", {"fleet_file": warm}),
        ProcessSpec("engine_worker", "physai_ros.nodes.engine_worker", "",
                    {"instance_id": "shutdown_worker", "max_batch": 4, "profile_reps": 500}),
        server_spec("policy_server", serving, env=fault_env(f"engine_0:stall@{STALL_BATCH}")),
        *(s for s in robot if s is not client),  # the client starts in its test, once these are up
        *(ProcessSpec(n, "ros_stuck_node", "", {"stuck_in": where}, env={"PYTHONPATH": os.pathsep.join(
            [str(HERE), os.environ.get("PYTHONPATH", "")])})
          for n, where in (("stuck_in_close", "close"), ("stuck_twice", "close"), ("stuck_in_callback", "callback"))),
    ]
    # Subscribed before the processes start, so discovery is done when the test looks.
    from physai_ros_interfaces.msg import ExecutionInfo
    from sensor_msgs.msg import JointState
    from std_msgs.msg import String

    r.r0 = {"client": client,
            "infos": r.record(ExecutionInfo, "/r0/execution_info"),
            "joints": r.record(JointState, "/r0/joint_states"),
            # As a fleet monitor does: the client's last status then waits for its acknowledgement.
            "status": r.record(String, "/r0/client_status")}
    try:
        for s in specs:
            r.start(s)
        yield r
    finally:
        r.close()
        print("\nSIGINT -> exit (s): " + ", ".join(f"{n} {t:.3f}" for n, t in exit_times.items())
              + f"; load average {os.getloadavg()[0]:.1f}")


def _log(rig: ProcessRig, name: str) -> str:
    p = next(p for p in rig.procs.procs if p.spec.name == name)
    return p.log_path.read_text(errors="replace") if p.log_path.exists() else ""


def _stop(rig: ProcessRig, record_property, *plan) -> dict[str, tuple[int, float]]:
    """plan: (name, signal, delay after the first signal). Sends them all, waits (bounded) for
    the processes; returns name -> (exit code, seconds from its first signal to its exit)."""
    procs = {p.spec.name: p.popen for p in rig.procs.procs}
    names = list(dict.fromkeys(n for n, _, _ in plan))
    first: dict[str, float] = {}
    exited: dict[str, float] = {}

    def reap(name):
        procs[name].wait()  # blocking waitpid: its return is the moment of exit
        exited[name] = time.monotonic()

    waiters = [threading.Thread(target=reap, args=(n,), daemon=True) for n in names]
    rig.killed.update(names)  # their exit is expected now (ProcessRig.assert_alive)
    for w in waiters:
        w.start()
    t0 = time.monotonic()
    for name, sig, delay in sorted(plan, key=lambda x: x[2]):
        time.sleep(time_left(t0 + delay, time.monotonic()))
        procs[name].send_signal(sig)
        first.setdefault(name, time.monotonic())
    for w in waiters:
        w.join(timeout=30.0)
    out = {}
    for n in names:
        took = exited[n] - first[n] if n in exited else float("inf")
        out[n] = (procs[n].poll(), took)
        exit_times[n] = took
        record_property(f"sigint_exit_s.{n}", f"{took:.3f}")
        print(f"{n}: exit code {procs[n].poll()} {took:.3f} s after the signal "
              f"(load average {os.getloadavg()[0]:.1f})")
    return out


def _assert_clean_stop(rig, results, name):
    rc, took = results[name]
    log = _log(rig, name)
    assert rc == 0, f"{name} exit code {rc}\n{log[-3000:]}"
    assert took < LAUNCH_SIGTERM_AFTER_S, f"{name} took {took:.2f} s to exit after SIGINT\n{log[-3000:]}"
    assert "Traceback" not in log, log[-3000:]
    return log


def test_server_in_warm_up_and_worker_mid_profile(rig, record_property):
    # The warm-up server logs its start-up steps; the worker logs this once its thread profiles.
    rig.wait(lambda: "profile" in _log(rig, "warmup_server").lower(), STARTUP_S,
             "the warm-up server to start profiling its engine")
    rig.wait(lambda: "measuring the latency profile" in _log(rig, "engine_worker"), STARTUP_S,
             "the engine worker to start profiling")
    res = _stop(rig, record_property, ("warmup_server", signal.SIGINT, 0.0), ("engine_worker", signal.SIGINT, 0.0))
    log = _assert_clean_stop(rig, res, "warmup_server")
    assert "construction abandoned" in log and "engine instance(s), scheduler" not in log, log[-3000:]
    log = _assert_clean_stop(rig, res, "engine_worker")
    # The inference thread was inside the profile (torch ops): logged, and not waited for.
    assert "engine_worker_infer" in log and "still running" in log, log[-3000:]


def test_a_node_writes_its_stacks_on_sigusr1_and_carries_on(rig):
    # What the rig does to every live node when a wait times out: the dump says where a hang is.
    name = "r0/sim_robot"
    rig.wait(lambda: "sim robot r0" in _log(rig, name), STARTUP_S, "the sim robot to start")
    proc = next(p for p in rig.procs.procs if p.spec.name == name)
    proc.popen.send_signal(signal.SIGUSR1)
    rig.wait(lambda: "most recent call first" in _log(rig, name), 30, "the sim robot's stack dump")
    log = _log(rig, name)
    assert "Thread 0x" in log and "spin" in log, log[-3000:]  # the main thread, in run_node's spin loop
    rig.assert_alive("after SIGUSR1")


def test_fleet_stops_mid_work(rig, record_property):
    infos, joints = rig.r0["infos"], rig.r0["joints"]
    # The client (which starts the rounds) comes last: a chunk the server publishes before the
    # controller's subscription has matched is lost to the controller (reliable, volatile), and
    # the tiny model's first rounds take milliseconds.
    rig.wait(lambda: "engine instance(s), scheduler" in _log(rig, "policy_server") and infos, STARTUP_S,
             "the server serving and the controller publishing execution_info")
    rig.start(rig.r0["client"])

    def mid_work():
        if f"on batch {STALL_BATCH}" not in _log(rig, "policy_server") or not infos or not joints:
            return False
        latest = infos[-1][1]  # 50 Hz: at most 20 ms old
        return (latest.chunks_accepted >= 1 and latest.actions_remaining > 0 and not latest.buffer_dry
                and time.monotonic() - joints[-1][0] < 0.5)
    # (The client, having sent the observation of that batch, is mid-round: waiting for it.)
    rig.wait(mid_work, STARTUP_S, f"the server's engine stuck inside batch {STALL_BATCH}, the controller "
             "executing a chunk, the sim publishing joint states")
    robot = ["r0/sim_robot", "r0/robot_client", "r0/trajectory_controller"]
    res = _stop(rig, record_property, *((n, signal.SIGINT, 0.0) for n in ["policy_server", *robot]))
    for n in robot:
        _assert_clean_stop(rig, res, n)
    log = _assert_clean_stop(rig, res, "policy_server")
    # The stalled engine thread was reported and left behind, not joined for 5 s.
    assert "serving_engine_0" in log and "still running" in log, log[-3000:]


def test_node_interrupted_while_importing(rig, record_property):
    p = rig.start(ProcessSpec("worker_importing", "physai_ros.nodes.engine_worker", "", {"instance_id": "importing"}))
    # physai_ros.nodes' start-up guard catches SIGTERM (Python itself does not): the imports
    # (rclpy, torch) run from then on.
    status = Path(f"/proc/{p.popen.pid}/status")

    def guarded():
        if p.popen.poll() is not None:
            raise AssertionError(_log(rig, "worker_importing"))
        line = next((ln for ln in status.read_text().splitlines() if ln.startswith("SigCgt:")), "SigCgt: 0")
        return int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1))
    rig.wait(guarded, 60, "the start-up guard to be installed")
    res = _stop(rig, record_property, ("worker_importing", signal.SIGINT, 0.0))
    log = _assert_clean_stop(rig, res, "worker_importing")
    assert "while starting" in log, log  # importing, or (if the imports were quick) constructing
    print("worker_importing stopped while " + ("importing" if "importing" in log else "constructing"))


def test_stuck_main_thread_and_second_signal(rig, record_property):
    for n in ("stuck_in_close", "stuck_twice"):
        rig.wait(lambda n=n: "ready" in _log(rig, n), STARTUP_S, f"{n} to spin")
    rig.wait(lambda: "callback: blocking" in _log(rig, "stuck_in_callback"), STARTUP_S,
             "stuck_in_callback to block in its timer callback")
    # stuck_in_close also gets a duplicate delivery (systemd and launch together): no "exit now".
    res = _stop(rig, record_property, ("stuck_in_close", signal.SIGINT, 0.0), ("stuck_in_close", signal.SIGTERM, 0.0),
                ("stuck_in_callback", signal.SIGINT, 0.0),
                ("stuck_twice", signal.SIGINT, 0.0), ("stuck_twice", signal.SIGTERM, 0.5))
    for name, where in (("stuck_in_close", "close"), ("stuck_in_callback", "_tick")):
        log = _assert_clean_stop(rig, res, name)
        # The watchdog ended it and said where the main thread was stuck.
        assert f"still running {EXIT_DEADLINE_S:g} s after SIG" in log and f"MainThread in {where}" in log, log
        assert "second stop signal" not in log, log
    log = _assert_clean_stop(rig, res, "stuck_twice")
    assert "second stop signal (SIGTERM): exiting at once" in log, log
