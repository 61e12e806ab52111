"""A factory plan run by real processes over DDS: a policy server with two engine
instances and `factory.apply: true` plans at start-up and puts System 1 on engine_0 and the
safety checker and progress monitor (one model: the served VLA's backbone) on engine_1; two
pick-and-place robots (sim_robot, robot_client, controller) are served by that plan. Checked against the plan the same solver makes in this process: every
served chunk came from engine_0, every monitor answer from the backbone on engine_1, each robot
was told its rate cap and routes at registration and sent no faster, the server's engine status
names each instance's role, and the measured SLO attainment is reported beside the predicted.

The shipped sim_pi0_pipeline checkpoint; the profile file is written here from service times
chosen for this test (a plan, not a measurement: the point is that the processes do what the
plan says)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "faults"))

from process_rig import STARTUP_S, ProcessRig, server_spec  # noqa: E402

from physai_ros.config.factory import factory_problem, load_profiles  # noqa: E402
from physai_ros.config.fleet import load_fleet  # noqa: E402
from physai_ros.fleet.plan import robot_specs  # noqa: E402
from physai_ros.protocol.chunk import is_hold_chunk  # noqa: E402
from physai_ros.scheduler.factory.profiling import profile_from_service_times  # noqa: E402
from physai_ros.scheduler.factory.solver import solve  # noqa: E402
from physai_ros.scheduler.factory.types import CONTINUOUS  # noqa: E402

pytestmark = [pytest.mark.ros, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
WINDOW_S = 12.0  # observations counted over this long, after every robot is served


def _fleet(tmp: Path, remote: str = "") -> Path:
    """Two engine instances: engine_0 and engine_1, or engine_0 and the engine worker `remote`.
    The remote variant keeps the file's authentication (keystore: auto), so the questions and
    answers between server and worker are signed."""
    doc = yaml.safe_load((REPO / "config" / "fleet_pipeline.yaml").read_text())
    # The shipped component-trained checkpoint: its monitor answers parse (a random model's
    # garbage would hold the robots, and there would be no System 1 rate to measure).
    doc["server"].update(profile=False, engine_instances=1 if remote else 2)
    if remote:
        doc["server"]["remote_engines"] = [{"instance_id": remote}]
    else:
        doc["security"] = {"insecure": True}
    task = doc["tasks"]["pick_place_monitored"]
    task["pipeline"] = {"action_period_ms": 500}
    task["slo_ms"] = 5000
    task["components"]["monitor"].update(slo_ms=5000, freq_hz=0.5)
    task["components"]["safety"] = {"model": "vla", "prompt": "is the workcell safe? answer safe or unsafe.",
                                    "freq_hz": 1.0, "slo_ms": 5000, "fallback": "stop_and_replan"}
    del doc["tasks"]["place_in_order"]
    robots = [r for r in doc["robots"] if r["task"] == "pick_place_monitored"][:2]
    for r in robots:
        r["sim"].update(intruder_rate_per_min=0.0, drop_prob=0.0, knock_prob=0.0)
    doc["robots"] = robots
    profiles = [profile_from_service_times("sim-s1", "cpu-test", {1: 0.08, 2: 0.12, 4: 0.2}, requests=1000),
                profile_from_service_times("sim-vla", "cpu-test", {1: 0.2, 4: 0.5}, batching=CONTINUOUS,
                                           requests=1000)]
    (tmp / "profiles.json").write_text(json.dumps({"profiles": [p.to_dict() for p in profiles]}))
    # reschedule: propose keeps the start-up plan in force (this server would otherwise re-plan on
    # its own measured times after a few batches; test/faults/test_process_factory_plan.py checks that).
    doc["factory"] = {"servers": 2, "hardware": "cpu-test", "profiles": "profiles.json", "apply": True,
                      "reschedule": "propose",
                      "models": {"system1": "sim-s1", "safety": "sim-vla", "monitor": "sim-vla"}}
    path = tmp / "fleet_factory_two_instances.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_two_instances_run_the_plan_system1_on_one_safety_and_monitor_on_the_other(tmp_path):
    _run_plan(tmp_path, remote="")


def test_the_components_run_on_an_engine_worker_when_the_plan_puts_them_there(tmp_path):
    """The plan's second server is an engine_worker process: safety and monitor questions go
    there over DDS, signed by the server, answered signed by the worker."""
    _run_plan(tmp_path, remote="gpu_b")


def _run_plan(tmp_path, remote: str):
    from physai_ros_interfaces.msg import ActionChunk, ComponentAnswer, Observation
    from std_msgs.msg import String

    from physai_ros.fleet.processes import ProcessSpec

    path = _fleet(tmp_path, remote)
    other = remote or "engine_1"
    cfg = load_fleet(path)
    problem = factory_problem(cfg)
    plan = solve(problem, load_profiles(tmp_path / "profiles.json"))
    assert plan.feasible, plan.reason
    placed = {a.server: a.component for a in plan.assignments}
    # Safety and monitor are one model (the served VLA's backbone): one server hosts both.
    assert placed == {0: "system1", 1: "safety+monitor"}, placed
    robots = [r.id for r in cfg.robots]
    rig = ProcessRig(tmp_path / "logs", "factory_test")
    try:
        rig.start(server_spec("policy_server", str(path)))
        if remote:
            rig.start(ProcessSpec(f"engine_worker_{remote}", "physai_ros.nodes.engine_worker", "", {
                "instance_id": remote, "checkpoint": str(REPO / "physai_ros/assets/policy/sim_pi0_pipeline"),
                "components": True, "fleet_file": str(path), "max_batch": 2, "profile_reps": 1,
                "profile_views": 2, "profile_tokens": 8, "heartbeat_period_s": 0.2}, executable="engine_worker"))
        if remote:
            # Workers start before the robots, as in a deployment: a robot whose components are
            # not answerable escalates after 3 consecutive violations (ROSA §3.3), which is right
            # for a worker that is down, and not what this test is about.
            rig.wait(lambda: rig.diag.get(f"policy_server: engine {remote}", {}).get("alive") == "True",
                     STARTUP_S, f"the server seeing worker {remote} alive")
        rec = {}
        for rid in robots:
            r = cfg.robot(rid)
            for spec in robot_specs(cfg, r):
                rig.start(spec)
            ns = "/" + r.namespace
            rec[rid] = {"chunks": rig.record(ActionChunk, f"{ns}/action_chunk"),
                        "obs": rig.record(Observation, f"{ns}/observation"),
                        "answers": rig.record(ComponentAnswer, f"{ns}/component_answer"),
                        "status": rig.record(String, f"{ns}/client_status")}

        def served(rid):
            return [m for _, m in rec[rid]["chunks"]
                    if m.status == 0 and not is_hold_chunk(m.status, m.error, m.engine_instance)]

        rig.wait(lambda: all(len(served(rid)) >= 3 for rid in robots), STARTUP_S + 90, "both robots served")
        # Answered by a backend (the service's own refusals, e.g. `superseded`, name none; while
        # an engine worker still measures its profile at start-up its proxy answers `not_alive`).
        rig.wait(lambda: all({m.component for _, m in rec[rid]["answers"] if m.backend} >= {"safety", "monitor"}
                             for rid in robots), 120, "safety and monitor answers for both robots")
        with rig.lock:
            n0 = {rid: len(rec[rid]["obs"]) for rid in robots}
            t0 = rig.node.get_clock().now().nanoseconds * 1e-9
        rig.wait(lambda: rig.node.get_clock().now().nanoseconds * 1e-9 - t0 >= WINDOW_S, WINDOW_S + 30,
                 "the counting window")
        with rig.lock:
            sent = {rid: [a for a, _ in rec[rid]["obs"][n0[rid]:]] for rid in robots}
            status = {rid: json.loads(rec[rid]["status"][-1][1].data) for rid in robots}
            engines = {m.engine_instance for rid in robots for m in served(rid)}
            answered = [(m.component, m.backend, m.error[:80]) for rid in robots for _, m in rec[rid]["answers"]]
            backends = {m.backend for rid in robots for _, m in rec[rid]["answers"]
                        if m.backend and "not_alive" not in m.error}
            diag = {k: dict(v) for k, v in rig.diag.items()}
        # Placement: System 1 only on engine_0; safety and monitor answered by the backbone on
        # engine_1, with its own prefill there (System 1's prefix lives on engine_0).
        assert engines == {"engine_0"}, engines
        want = f"remote@{remote}/vla_backbone@{remote}/own" if remote else "vla_backbone@engine_1/own"
        assert backends == {want}, (backends, answered)
        # Rates and routes at registration; the clients kept to the cap (arrival jitter aside).
        for rid in robots:
            cap = plan.route(rid, "system1").rate_hz
            assert status[rid]["max_request_rate_hz"] == pytest.approx(cap, rel=1e-6), status[rid]
            assert status[rid]["routes"] == {"system1": "engine_0", "safety": other, "monitor": other}
            times = sent[rid]
            assert len(times) >= 2, (rid, times)
            measured = (len(times) - 1) / (times[-1] - times[0])
            assert measured <= cap * 1.1, (rid, measured, cap)
            print(f"{rid}: planned {cap:.2f} Hz, measured {measured:.2f} Hz; SLO misses "
                  f"{status[rid]['slo_misses']} of {status[rid]['chunks_ok']} chunks "
                  f"(planned attainment {plan.predicted_slo_attainment['system1']:.2f})")
        roles = {k: v.get("factory_role") for k, v in diag.items() if v.get("factory_role")}
        assert sorted(r.split(" ")[0] for r in roles.values()) == ["safety+monitor", "system1"], roles
        rig.assert_alive("after the run")
    finally:
        rig.close()


def test_a_standby_on_another_host_takes_over_a_lost_system1_worker_without_a_new_plan(tmp_path):
    """ROSA §3.4.4 with remote instances: the plan runs System 1 on engine worker gpu_a and keeps
    gpu_s (`remote_engines[].standby: true`) warm and off the routes; gpu_a is SIGKILLed and the
    robot's next rounds are served by gpu_s, with the plan unchanged."""
    from physai_ros_interfaces.msg import ActionChunk

    from physai_ros.fleet.processes import ProcessSpec

    sys.path.insert(0, str(REPO / "test" / "faults"))
    from fault_fleet import fleet_doc

    doc = fleet_doc(robots=("r0",), server={
        "engine_instances": 0, "max_batch": 2, "profile": False,
        "remote_engines": [{"instance_id": "gpu_a", "liveness_timeout_s": 1.0, "timeout_s": 20.0},
                           {"instance_id": "gpu_s", "liveness_timeout_s": 1.0, "timeout_s": 20.0, "standby": True}]})
    doc["tasks"]["pick_place"]["pipeline"] = {"action_period_ms": 200}
    doc["security"] = {"insecure": True}
    prof = profile_from_service_times("tiny-s1", "cpu-test", {1: 0.05, 2: 0.08}, requests=600)
    (tmp_path / "profiles.json").write_text(json.dumps({"profiles": [prof.to_dict()]}))
    doc["factory"] = {"servers": 1, "standby": 1, "hardware": "cpu-test", "profiles": "profiles.json",
                      "apply": True, "reschedule": "propose", "models": {"system1": "tiny-s1"}}
    path = tmp_path / "fleet_standby.yaml"
    path.write_text(yaml.safe_dump(doc))
    cfg = load_fleet(path)
    rig = ProcessRig(tmp_path / "logs", "factory_standby")
    try:
        rig.start(server_spec("policy_server", str(path)))
        for iid in ("gpu_a", "gpu_s"):
            rig.start(ProcessSpec(f"worker_{iid}", "physai_ros.nodes.engine_worker", "", {
                "instance_id": iid, "preset": "tiny", "seed": 0, "max_batch": 2, "profile_reps": 1,
                "profile_views": 1, "profile_tokens": 8, "heartbeat_period_s": 0.2, "fleet_file": str(path)},
                executable="engine_worker"))
        for spec in robot_specs(cfg, cfg.robot("r0")):
            rig.start(spec)
        chunks = rig.record(ActionChunk, "/r0/action_chunk")

        def served_by():
            return [m.engine_instance for _, m in chunks
                    if m.status == 0 and not is_hold_chunk(m.status, m.error, m.engine_instance)]

        # Until gpu_a has measured its profile and advertises, the standby stands in for it (as it
        # would for a lost one); once gpu_a serves, the standby steps back and takes nothing.
        rig.wait(lambda: served_by()[-3:] == ["gpu_a"] * 3, STARTUP_S + 90, "r0 served by gpu_a")
        with rig.lock:
            since = len(served_by())
        rig.wait(lambda: len(served_by()) >= since + 5, 60, "five more rounds")
        with rig.lock:
            assert set(served_by()[since:]) == {"gpu_a"}, served_by()[since:]
            before = len(served_by())
        rig.kill("worker_gpu_a")
        rig.wait(lambda: served_by()[before:].count("gpu_s") >= 3, 90, "r0 served by the standby gpu_s")
        with rig.lock:
            roles = {k: v.get("factory_role") for k, v in rig.diag.items() if v.get("factory_role")}
        active, standby = roles["policy_server: engine gpu_a"], roles["policy_server: engine gpu_s"]
        assert active.startswith("system1 (tiny-s1, batch ") and standby == active + ", standby for gpu_a", roles
    finally:
        rig.close()
