"""Faults with real processes: admission beyond capacity, an engine failing on one
batch, and a hot standby taking over from an engine instance whose thread died.

One real policy_server process (tiny model, max_batch 1 so one batch is one robot's round,
server.max_robots 2, one active instance engine_0 and one standby engine_1) started with the
test hook PHYSAI_FAULT_INJECTION="engine_0:raise@6,engine_0:die@14" (physai_lab.fault_injection,
through the server's slot hook): engine_0's 6th batch raises, its 14th kills its thread. The test process plays
three robots over real DDS: `a` and `b` (closed loops: send round r, wait for its answer, send
r+2) and `c`, refused at registration because the server is full. Tests run in file order and
share the server (each step needs the previous one's batches).
"""
from __future__ import annotations

import time

import pytest

from physai_lab.fault_injection import fault_env
from physai_ros.client.robot_client import RobotClientCore
from physai_ros.config.fleet import load_fleet
from physai_ros.ros.codecs.observation import observation_to_msg
from physai_ros.ros.codecs.registration import registration_to_request

from fault_fleet import obs, write_fleet
from process_rig import STARTUP_S, ClosedLoop, ProcessRig, server_spec

pytestmark = [pytest.mark.ros, pytest.mark.slow]

OK, ERROR, REFUSED = 0, 1, 2
FAULTS = "engine_0:raise@6,engine_0:die@14"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    d = tmp_path_factory.mktemp("engine_faults")
    fleet_file = write_fleet(d / "fleet.yaml", robots=("a", "b", "c"),
                             server={"max_batch": 1, "max_robots": 2, "standby_instances": 1})
    cfg = load_fleet(fleet_file)
    rig = ProcessRig(d / "logs")
    loops = []
    try:
        rig.start(server_spec("policy_server", fleet_file, fault_env(FAULTS)))
        replies = {}
        for rid in ("a", "b", "c"):
            req = registration_to_request(RobotClientCore(cfg.robot(rid)).registration())
            replies[rid] = rig.register(req)
        assert replies["a"].accepted and replies["b"].accepted, (replies, rig.logs())
        time.sleep(1.0)  # our observation publishers are matched by the server's subscriptions
        loops = {rid: ClosedLoop(rig, rid).start() for rid in ("a", "b")}
        yield rig, cfg, replies, loops
    finally:
        for lp in (loops.values() if isinstance(loops, dict) else []):
            lp.stop()
        rig.close()


def _errors(loops):
    return [(rid, c) for rid, lp in loops.items() for _, c in lp.chunks if c.status == ERROR]


def test_a_robot_beyond_capacity_is_refused_with_a_reason_and_the_others_are_served(served):
    rig, cfg, replies, loops = served
    c = replies["c"]
    assert not c.accepted and c.reason.startswith("capacity:") and "max_robots=2" in c.reason, c.reason
    # Its observations are refused as unknown (it holds no registration), nobody else's are.
    from physai_ros_interfaces.msg import ActionChunk, Observation

    from physai_ros.ros.qos import reliable_qos

    got = rig.record(ActionChunk, "/c/action_chunk")
    pub = rig.node.create_publisher(Observation, "/c/observation", reliable_qos())
    time.sleep(1.0)
    pub.publish(observation_to_msg(obs("c", 2)))
    rig.wait(lambda: got, 30, "c's refusal")
    with rig.lock:
        assert got[0][1].status == REFUSED and got[0][1].error.startswith("unknown_robot"), got[0][1]
    rig.wait(lambda: all(len(lp.ok()) >= 3 for lp in loops.values()), STARTUP_S, "a and b served")
    # The refusal is counted and visible on /diagnostics (the server's registrations status).
    rig.wait(lambda: any(v.startswith("capacity") for vals in rig.diag.values() for v in vals.values()),
             30, "a capacity refusal on /diagnostics")


def test_engine_raising_on_one_batch_errors_that_batch_and_everyone_keeps_being_served(served):
    rig, cfg, replies, loops = served
    rig.wait(lambda: _errors(loops), STARTUP_S, "the injected engine failure")
    with rig.lock:
        [(victim, err)] = _errors(loops)
        assert "engine failed" in err.error and "injected failure of engine_0 on batch 6" in err.error
        assert err.engine_instance == "engine_0"
        base = {rid: len(lp.ok()) for rid, lp in loops.items()}
        t_err = next(t for t, c in loops[victim].chunks if c is err)
    # Every robot, the one whose round failed included, is served on after the failure.
    rig.wait(lambda: all(len(lp.ok()) >= base[rid] + 3 for rid, lp in loops.items()), 60,
             "3 more OK chunks per robot after the failure")
    with rig.lock:
        assert len(_errors(loops)) == 1, "only the failing batch's request got an error"
        # The instance that raised lives on: it served rounds after its failure.
        assert any(t > t_err and c.status == OK and c.engine_instance == "engine_0"
                   for lp in loops.values() for t, c in lp.chunks)


def test_the_standby_takes_over_when_the_active_instance_dies(served):
    rig, cfg, replies, loops = served

    def on_standby():
        return all(sum(c.engine_instance == "engine_1" for c in lp.ok()) >= 3 for lp in loops.values())

    rig.wait(on_standby, 120, "3 chunks per robot from the standby engine_1")
    with rig.lock:
        for rid, lp in loops.items():
            ok = lp.ok()
            engines = [c.engine_instance for c in ok]
            first = engines.index("engine_1")
            # engine_0 served everything before the death, engine_1 everything after it.
            assert set(engines[:first]) == {"engine_0"} and set(engines[first:]) == {"engine_1"}, engines
            # No round lost or answered twice: every round sent (but the newest) has one answer.
            answers: dict[int, int] = {}
            for _, c in lp.chunks:
                answers[c.round_id] = answers.get(c.round_id, 0) + 1
            done = [r for r in lp.sent if r in answers]
            assert all(answers[r] == 1 for r in done), answers
            assert lp.unanswered == [] and set(lp.sent[:-1]) <= set(answers), (lp.sent, answers)
        assert len(_errors(loops)) == 1, "the dead instance's batch was re-run, not answered with an error"
    rig.wait(lambda: rig.diag.get("policy_server: engine engine_1", {}).get("serving") == "True"
             and rig.diag.get("policy_server: engine engine_0", {}).get("alive") == "False", 30,
             "/diagnostics: engine_0 not alive, standby engine_1 serving")
    with rig.lock:
        assert rig.diag_level["policy_server: engine engine_0"] == 2  # ERROR
        assert "thread" in rig.diag["policy_server: engine engine_0"].get("why_not_alive", "") or \
            "InjectedInstanceDeath" in rig.diag["policy_server: engine engine_0"].get("failed", "")
    rig.assert_alive("after the takeover")
