"""Engine failures, hot standby, admission and bounded tables in ServingCore / ServingThreads,
with real tiny pi0 engines and the real FIFO scheduler (no ROS). The real-process versions are
test_process_engine_faults.py and test_process_server_restart.py."""
from __future__ import annotations

import dataclasses
import threading
import time

import pytest

from physai_ros.client.robot_client import RobotClientCore
from physai_ros.config.fleet import FleetConfigError, parse_fleet
from physai_ros.protocol.chunk import STATUS_ERROR, STATUS_OK, STATUS_REFUSED
from physai_lab.fault_injection import ENV_VAR, FaultPlan, InjectedInstanceDeath, fault_env, parse_fault_spec
from physai_ros.serving.registry import CAPACITY
from physai_ros.serving.serving_threads import ServingThreads
from physai_ros.serving.startup.engine_builder import build_core

from fault_fleet import fleet_doc, obs
from machine_load import Deadline


def _core(monkeypatch=None, fault="", robots=("r0", "r1", "r2"), **server):
    if monkeypatch is not None:
        for key, value in fault_env(fault).items():
            monkeypatch.setenv(key, value)
    cfg = parse_fleet(fleet_doc(robots=robots, server=server))
    core = build_core(cfg, instance_id="faults")
    return cfg, core


def _register(core, cfg, rid):
    return core.register(RobotClientCore(cfg.resolve_robot(rid)).registration())


def _drain(core, rounds=20):
    chunks = []
    for _ in range(rounds):
        chunks += core.step().chunks
        if core.pending() == 0:  # requeued (lost) work is pending in the scheduler too
            break
    return chunks


def test_fault_spec_parses_and_rejects_typos():
    plans = parse_fault_spec("engine_0:raise@3, engine_0:die@6,engine_1:raise@1")
    assert plans["engine_0"].raise_on == {3} and plans["engine_0"].die_on == {6}
    assert plans["engine_1"].raise_on == {1} and not plans["engine_1"].die_on
    assert parse_fault_spec("") == {}
    for bad in ("engine_0:raise", "engine_0:explode@1", "engine_0:raise@0", ":raise@1", "engine_0"):
        with pytest.raises(ValueError, match=ENV_VAR):
            parse_fault_spec(bad)


def test_unknown_instance_in_the_fault_spec_fails_at_build(monkeypatch):
    with pytest.raises(ValueError, match="engine_7"):
        _core(monkeypatch, "engine_7:raise@1")


def test_config_fields_are_checked():
    for server, msg in (({"max_robots": 0}, r"^server\.max_robots: expected an integer >= 1"),
                        ({"standby_instances": -1}, r"^server\.standby_instances: expected an integer >= 0"),
                        ({"robot_idle_release_s": 0}, r"^server\.robot_idle_release_s: expected a finite number > 0")):
        with pytest.raises(FleetConfigError, match=msg):
            parse_fleet(fleet_doc(server=server))
    cfg = parse_fleet(fleet_doc(server={"max_robots": 2, "standby_instances": 1}))
    assert cfg.server.max_robots == 2 and cfg.server.standby_instances == 1
    assert parse_fleet(fleet_doc()).server.max_robots is None


def test_engine_raising_on_one_batch_errors_only_that_batch(monkeypatch):
    cfg, core = _core(monkeypatch, "engine_0:raise@2", max_batch=1)
    for rid in ("r0", "r1"):
        assert _register(core, cfg, rid).accepted
    got = []
    for k, rid in enumerate(("r0", "r1", "r0", "r1")):
        core.submit(obs(rid, 2 * (k + 1)))
        got += _drain(core)
    status = [(c.robot_id, c.round_id, c.status) for c in got]
    # Batch 2 (r1's round 4) failed; every other batch, before and after, was served.
    assert status == [("r0", 2, STATUS_OK), ("r1", 4, STATUS_ERROR), ("r0", 6, STATUS_OK), ("r1", 8, STATUS_OK)]
    assert "injected failure of engine_0 on batch 2" in got[1].error
    assert core.diagnostics()["r1"]["errors"] == 1 and core.diagnostics()["r0"]["errors"] == 0
    assert not core.engines["engine_0"].failed


def test_standby_takes_no_work_while_the_active_instance_lives(monkeypatch):
    cfg, core = _core(monkeypatch, "", max_batch=1, standby_instances=1)
    assert [s.standby for s in core.engines.values()] == [False, True]
    assert _register(core, cfg, "r0").accepted
    chunks = []
    for k in range(4):
        core.submit(obs("r0", 2 * (k + 1)))
        chunks += _drain(core)
    assert [c.engine_instance for c in chunks] == ["engine_0"] * 4
    assert core.engines["engine_1"].batches == 0
    d = core.engine_diagnostics()
    assert d["engine_1"]["standby"] and not d["engine_1"]["serving"] and d["engine_0"]["serving"]


def test_a_dead_instance_is_replaced_by_the_standby_and_its_batch_is_rerun(monkeypatch):
    cfg, core = _core(monkeypatch, "engine_0:die@2", max_batch=2, standby_instances=1)
    for rid in ("r0", "r1"):
        assert _register(core, cfg, rid).accepted
    core.submit(obs("r0", 2))
    first = _drain(core)
    assert [(c.robot_id, c.status, c.engine_instance) for c in first] == [("r0", STATUS_OK, "engine_0")]
    core.submit(obs("r0", 4))
    core.submit(obs("r1", 2))
    d = core.dispatch()
    assert [w.instance_id for w in d.work] == ["engine_0"] and len(d.work[0].requests) == 2
    with pytest.raises(InjectedInstanceDeath):  # the instance's thread would end here
        core.run_batch(d.work[0])
    assert core.engines["engine_0"].failed.startswith("InjectedInstanceDeath")
    # Nothing was answered; both requests run again on the standby, once each.
    again = _drain(core)
    assert sorted((c.robot_id, c.round_id, c.status, c.engine_instance) for c in again) == [
        ("r0", 4, STATUS_OK, "engine_1"), ("r1", 2, STATUS_OK, "engine_1")]
    core.submit(obs("r0", 6))
    assert [c.engine_instance for c in _drain(core)] == ["engine_1"]
    f = core.failover_diagnostics()
    assert f["failover.takeovers"] == 1 and f["failover.instance_failures"] == 1
    assert f["failover.redispatched"] == 2 and f["failed_instances"] == "engine_0"
    assert "standby engine_1 takes over for engine_0" in " | ".join(core.events)
    ed = core.engine_diagnostics()
    assert ed["engine_0"]["alive"] is False and ed["engine_1"]["serving"] is True


def test_without_standby_a_dead_instance_leaves_requests_waiting_not_lost(monkeypatch):
    cfg, core = _core(monkeypatch, "engine_0:die@1", engine_instances=2, max_batch=1)
    assert _register(core, cfg, "r0").accepted
    core.submit(obs("r0", 2))
    d = core.dispatch()
    with pytest.raises(InjectedInstanceDeath):
        core.run_batch(d.work[0])
    # engine_1 is an active instance: it takes the re-dispatched request.
    [c] = _drain(core)
    assert (c.round_id, c.status, c.engine_instance) == (2, STATUS_OK, "engine_1")


class _LostEngine:
    """A real engine behind a proxy whose worker vanished: raises an `instance_lost` error
    (as a remote worker's timeout does) for the first `n` calls."""

    class Lost(RuntimeError):
        instance_lost = True

    def __init__(self, engine, n):
        self.config, self._engine, self.n = engine.config, engine, n

    def infer(self, inputs):
        if self.n > 0:
            self.n -= 1
            raise self.Lost("worker gone")
        return self._engine.infer(inputs)


def test_work_lost_with_an_instance_is_rerun_at_most_a_few_times(monkeypatch):
    cfg, core = _core(monkeypatch, "", max_batch=1)
    assert _register(core, cfg, "r0").accepted
    slot = core.engines["engine_0"]
    slot.engine = _LostEngine(slot.engine, 2)
    core.submit(obs("r0", 2))
    [c] = _drain(core)
    assert c.status == STATUS_OK and core.failover["redispatched"] == 2
    slot.engine.n = 10
    core.submit(obs("r0", 4))
    [c] = _drain(core)
    assert c.status == STATUS_ERROR and "after 3 instances" in c.error
    assert core.failover["redispatch_exhausted"] == 1


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # the death itself
def test_runner_notices_a_dead_thread_and_the_standby_serves(monkeypatch):
    cfg, core = _core(monkeypatch, "engine_0:die@1", max_batch=1, standby_instances=1)
    assert _register(core, cfg, "r0").accepted
    got, errors, lock = [], [], threading.Lock()

    def on_chunks(chunks):
        with lock:
            got.extend(chunks)

    runner = ServingThreads(core, on_chunks, lambda *a: None, errors.append).start()
    try:
        core.submit(obs("r0", 2))
        deadline = Deadline(60)
        while not deadline.expired():
            with lock:
                if got:
                    break
            time.sleep(0.01)
        core.submit(obs("r0", 4))
        while not deadline.expired():
            with lock:
                if len(got) >= 2:
                    break
            time.sleep(0.01)
    finally:
        runner.stop()
    assert [(c.round_id, c.status, c.engine_instance) for c in got] == [
        (2, STATUS_OK, "engine_1"), (4, STATUS_OK, "engine_1")]
    assert not runner._instance_threads["engine_0"].is_alive()
    assert any("engine_0" in e and "thread died" in e for e in errors)


def test_admission_refuses_beyond_max_robots_with_a_reason(monkeypatch):
    cfg, core = _core(monkeypatch, "", max_robots=2, robots=("r0", "r1", "r2"))
    clock = [1000.0]
    core.clock = lambda: clock[0]
    assert _register(core, cfg, "r0").accepted and _register(core, cfg, "r1").accepted
    res = _register(core, cfg, "r2")
    assert not res.accepted and res.reason.startswith(CAPACITY + ":") and "max_robots=2" in res.reason
    # Registered robots re-register freely (their client does so every few seconds).
    assert _register(core, cfg, "r0").accepted
    f = core.failover_diagnostics()
    assert f["admission.refused_capacity"] == 1 and f["registered_robots"] == 2
    assert f["unregistered.registration.capacity"] == 1 and "r2" in f["unregistered.recent_ids"]
    # The refused robot's observations are refused as unknown, in the aggregate.
    [c] = core.submit(obs("r2", 2, stamp=clock[0]))
    assert c.status == STATUS_REFUSED and c.error.startswith("unknown_robot")
    # r1 goes silent (a dead client): once past robot_idle_release_s it gives its place up.
    clock[0] += 5.0
    assert _register(core, cfg, "r0").accepted
    assert not _register(core, cfg, "r2").accepted
    clock[0] += 6.0  # r1 silent 11 s > 10 s; r0 registered 6 s ago
    assert _register(core, cfg, "r2").accepted
    assert set(core.registry.registrations) == {"r0", "r2"} and "r1" not in core.diagnostics()
    assert core.registry.admission["released_idle"] == 1


def test_unregistered_senders_are_one_bounded_aggregate(monkeypatch):
    cfg, core = _core(monkeypatch, "")
    assert _register(core, cfg, "r0").accepted
    for k in range(500):
        [c] = core.submit(obs(f"ghost_{k}", 2))
        assert c.status == STATUS_REFUSED and c.error.startswith("unknown_robot")
    bad = RobotClientCore(cfg.resolve_robot("r1")).registration()
    for k in range(50):
        assert not core.register(dataclasses.replace(bad, robot_id=f"junk_{k}", num_views=0)).accepted
    assert set(core.diagnostics()) == {"r0"}
    assert set(core.registry.validator.refused) <= {"r0"} and set(core.registry.validator.last_round) <= {"r0"}
    assert set(core.registry.registration_refusals) == {"bad_registration"}
    f = core.failover_diagnostics()
    assert f["unregistered.refused.unknown_robot"] == 500
    assert f["unregistered.registration.bad_registration"] == 50
    assert len(f["unregistered.recent_ids"].split(",")) == 8


def test_fault_plan_fires_only_on_its_batches():
    p = FaultPlan(raise_on=frozenset({2}), die_on=frozenset({3}))
    p.before_batch("e", 1)
    with pytest.raises(RuntimeError):
        p.before_batch("e", 2)
    with pytest.raises(InjectedInstanceDeath):
        p.before_batch("e", 3)
    assert p.fired == ["raise@2", "die@3"]


def test_a_slowed_slot_waits_before_every_batch_from_its_first_slow_one(monkeypatch):
    import physai_lab.fault_injection as fi

    waits = []
    monkeypatch.setattr(fi.time, "sleep", waits.append)
    p = parse_fault_spec("engine_0:slow@3")["engine_0"]
    for batch_no in range(1, 6):
        p.before_batch("engine_0", batch_no)
    assert waits == [fi.SLOW_S] * 3 and p.fired == ["slow@3"]


def test_a_refused_robot_retries_and_reports_the_refusal_once():
    from physai_ros.protocol.registration import RegistrationResult

    cfg = parse_fleet(fleet_doc())
    client = RobotClientCore(cfg.robot("r2"))
    for _ in range(5):
        client.on_registered(RegistrationResult(False, "capacity: 2 robots registered", "srv"))
    assert client.counters.refused == 5 and client.escalations == ["registration refused: capacity: 2 robots registered"]
    assert client.state.value == "unregistered"
    out = client.tick(100.0)  # the periodic re-registration continues
    assert out.register



def test_a_keepalive_registration_overtaking_its_observation_does_not_lose_the_round(monkeypatch):
    """Found with real processes: the client re-registers every 2 s with last_round_id = the
    round it has just sent; when that registration overtook the observation, the observation
    was refused as `round N after round N` and the robot's round was lost."""
    cfg, core = _core(monkeypatch, "")
    client = RobotClientCore(cfg.robot("r0"))
    assert core.register(client.registration()).accepted
    core.submit(obs("r0", 10))
    client.round_id = 12  # the client has sent round 12; its keep-alive overtakes it
    assert core.register(client.registration()).accepted
    notices = core.submit(obs("r0", 12))  # a notice for 10 if 12 superseded it, never a refusal of 12
    assert all(c.round_id == 10 and c.error.startswith("superseded") for c in notices), notices
    chunks = _drain(core)
    assert (12, STATUS_OK) in [(c.round_id, c.status) for c in chunks], chunks
    # Rounds below the registered one stay refused, and 12 is accepted only once.
    for r in (11, 12):
        [c] = core.submit(obs("r0", r))
        assert c.error.startswith("round_id_not_increasing"), c.error
