"""Traces recorded from our own simulated robots (`physai-fleet --record-trace`): the capture
logic on real message types, and a real fleet run whose trace the fleet simulator replays."""
import dataclasses
import json
import math
import os
import random
import subprocess
import sys

import pytest
from physai_ros_interfaces.msg import ActionChunk, Observation

from physai_ros.config.fleet import default_fleet_path, load_fleet, resolve_package_path
from physai_ros.ros.codecs.chunk import chunk_from_msg
from physai_ros.ros.codecs.observation import observation_from_msg
from physai_ros.ros.time_conv import time_from_sec
from physai_ros.scheduler import LatencyProfile
from physai_lab.fleet_sim import InstanceSpec, SimConfig, poisson_arrivals, run_offline, run_online
from physai_ros.sim.trace_capture import FleetTraceCapture
from physai_ros.sim.traces import RoundTrace, load_traces, save_traces

# chunk_size of the model config/fleet.yaml serves (the trained sim policy's config.json)
_MODEL = load_fleet(None).server.model
EMBEDDED_CHUNK = (json.loads((resolve_package_path(_MODEL.checkpoint, default_fleet_path().parent)
                              / "config.json").read_text())["chunk_size"] if _MODEL.checkpoint else 8)

T0 = 1000.0


def obs(rid, remaining, t, robot="robot_0", refresh=False):
    m = Observation(robot_id=robot, task_id="pick", round_id=rid, actions_remaining=remaining,
                    control_period=0.1, refresh=refresh)
    m.header.stamp = time_from_sec(t)
    return m


def chunk(rid, horizon, t, robot="robot_0", status=ActionChunk.STATUS_OK, n=8, dt=0.1, engine="engine_0",
          inference_ms=40.0, queue_ms=5.0, error=""):
    m = ActionChunk(robot_id=robot, task_id="pick", round_id=rid, status=status, dt=dt, num_actions=n,
                    action_dim=1, actions=[0.0] * n, horizon=horizon, queue_ms=queue_ms, inference_ms=inference_ms,
                    engine_instance=engine, error=error)
    m.header.stamp = time_from_sec(t)
    return m


def feed(cap, robot, msg, received):
    if isinstance(msg, Observation):
        cap.on_request(robot, observation_from_msg(msg), received)
    else:
        cap.on_chunk(robot, chunk_from_msg(msg), received)


def test_rounds_pair_chunks_with_the_next_request_in_any_arrival_order(tmp_path):
    cap = FleetTraceCapture(["robot_0", "robot_1"], t0=T0, meta={"run": "unit"})
    # Round 4's request is seen before round 2's chunk: rounds are matched by id, not by order.
    events = [(obs(2, 0, T0 + 1.0), T0 + 1.05), (obs(4, 3, T0 + 1.8), T0 + 1.85),
              (chunk(2, 6, T0 + 1.0), T0 + 1.3), (chunk(4, 5, T0 + 1.8, inference_ms=60, queue_ms=0), T0 + 2.1),
              (obs(4, 2, T0 + 1.9, refresh=True), T0 + 1.95)]
    for m, t in events:
        feed(cap, "robot_0", m, t)
    for rid in (2, 4):
        cap.on_executing("robot_0", rid)
    ts = cap.trace_set()
    assert [t.task_id for t in ts.tasks] == ["robot_0/pick"]
    tr = ts.tasks[0]
    assert tr.robot_id == "robot_0" and tr.control_period == pytest.approx(0.1) and tr.arrival_s == pytest.approx(1.0)
    # round 2: horizon 6, next request (round 4) sent with 3 actions left; round 4: the last one
    assert [(r.horizon, r.trigger_remaining) for r in tr.rounds] == [(6, 3), (5, 0)]
    r2, r4 = tr.rounds
    assert r2.generation_s == pytest.approx(0.04) and r2.queue_s == pytest.approx(0.005)
    assert r2.latency_s == pytest.approx(0.3) and r2.exec_s == pytest.approx(0.6)
    assert r4.exec_s == pytest.approx(0.5) and r4.latency_s == pytest.approx(0.3)
    assert ts.meta["robots_without_rounds"] == ["robot_1"] and ts.meta["ignored_messages"] == {"refresh": 1}
    assert ts.meta["run"] == "unit"
    # The file keeps the measured timing; the simulator only needs horizon and trigger.
    save_traces(tmp_path / "t.json", ts)
    back = load_traces(tmp_path / "t.json")
    assert back.tasks[0].rounds == tr.rounds
    assert json.loads((tmp_path / "t.json").read_text())["tasks"][0]["timing"]["exec_s"] == pytest.approx([0.6, 0.5])


def test_trigger_is_capped_at_the_horizon_and_unexecuted_rounds_are_dropped():
    cap = FleetTraceCapture(["robot_0"], t0=T0)
    for rid, rem in ((2, 0), (4, 7), (6, 1), (8, 2)):
        feed(cap, "robot_0", obs(rid, rem, T0 + rid), T0 + rid)
        feed(cap, "robot_0", chunk(rid, 4, T0 + rid), T0 + rid + 0.2)
    # The controller never executed round 4 (refused or superseded) but did execute round 6.
    for rid in (2, 6):
        cap.on_executing("robot_0", rid)
    ts = cap.trace_set()
    # round 2 -> next request is round 4 (7 left, capped at 4); round 6 -> round 8 (2 left); round
    # 8 is after the newest executing round: kept (the recording ended while it was due)
    assert [(r.horizon, r.trigger_remaining) for r in ts.tasks[0].rounds] == [(4, 4), (4, 2), (4, 0)]
    assert ts.meta["dropped_rounds"] == {"not_executed": 1}


def test_executed_actions_come_from_the_execution_starts_when_seen():
    """Chunk horizon 6 (4 for round 4), dt 0.1. execution_info shows round 2 executing from
    10.00, round 4 from 10.33, round 6 from 10.90; the requests for rounds 4 and 6 were seen at
    10.12 and 10.60. Round 2 ran 3.3 -> 3 actions until round 4 replaced it, and 1 of them was
    done when round 4 was requested (trigger 2); round 4 ran 5.7 -> 6, capped at its horizon 4
    (the buffer ran dry), 2.7 -> 3 done at the request (trigger 1); round 6 is the last one."""
    cap = FleetTraceCapture(["robot_0"], t0=T0)
    for rid, sent, h in ((2, T0 + 9.9, 6), (4, T0 + 10.12, 4), (6, T0 + 10.6, 6)):
        feed(cap, "robot_0", obs(rid, 5, sent - 0.01), sent)
        feed(cap, "robot_0", chunk(rid, h, sent - 0.01), sent + 0.1)
    for rid, start in ((2, T0 + 10.0), (4, T0 + 10.33), (6, T0 + 10.9)):
        cap.on_executing("robot_0", rid, start)
        cap.on_executing("robot_0", rid, start + 5.0)  # the first start seen is kept
    ts = cap.trace_set()
    rounds = ts.tasks[0].rounds
    assert [(r.horizon, r.trigger_remaining, r.chunk_horizon) for r in rounds] == [(3, 2, 6), (4, 1, 4), (6, 0, 6)]
    assert [r.exec_s for r in rounds] == pytest.approx([0.3, 0.4, 0.6])
    assert ts.meta["horizon_source"] == {"executed": 2, "chunk": 1}


def test_bad_and_foreign_messages_are_counted_not_raised():
    cap = FleetTraceCapture(["robot_0"], t0=T0)
    feed(cap, "robot_0", chunk(2, 4, T0, robot="robot_9"), T0)                   # wrong robot id
    feed(cap, "robot_7", chunk(2, 4, T0, robot="robot_7"), T0)                   # not in the fleet
    feed(cap, "robot_0", chunk(1, 1, T0, engine="robot_client", error="hold"), T0)  # a client's hold chunk
    feed(cap, "robot_0", chunk(2, 4, T0, status=ActionChunk.STATUS_REFUSED), T0)
    feed(cap, "robot_0", chunk(4, 9, T0, n=8), T0)                               # horizon > actions
    feed(cap, "robot_0", chunk(6, 0, T0), T0)                                    # horizon 0
    feed(cap, "robot_0", chunk(8, 4, T0, dt=float("nan")), T0)
    feed(cap, "robot_0", chunk(10, 4, T0, inference_ms=-1.0), T0)
    feed(cap, "robot_0", obs(0, 2, T0), T0)                                      # round ids start at 1
    feed(cap, "robot_0", chunk(12, 3, T0), T0 + 0.1)
    feed(cap, "robot_0", chunk(12, 3, T0), T0 + 0.2)                             # duplicate
    ts = cap.trace_set()
    assert ts.meta["ignored_messages"] == {"wrong_robot": 2, "hold_chunk": 1, "not_ok": 1, "bad_chunk": 4,
                                           "bad_request": 1, "duplicate_chunk": 1}
    assert [(r.horizon, r.trigger_remaining) for r in ts.tasks[0].rounds] == [(3, 0)]
    assert FleetTraceCapture(["robot_0"], t0=T0).trace_set().tasks == []


def test_bad_timing_in_a_trace_file_is_named(tmp_path):
    doc = {"format": "physai-trace/1", "tasks": [{"task_id": "x", "rounds": [[4, 1], [4, 0]],
                                                 "timing": {"generation_s": [0.1]}}]}
    (tmp_path / "short.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="short.json: task #0: timing.generation_s"):
        load_traces(tmp_path / "short.json")
    doc["tasks"][0]["timing"] = {"latency_s": [0.1, -2.0]}
    (tmp_path / "neg.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="neg.json: task #0: bad round: latency_s"):
        load_traces(tmp_path / "neg.json")
    with pytest.raises(ValueError):
        RoundTrace(4, 1, exec_s=float("inf"))


def _replay(tasks, seed):
    prof = LatencyProfile.from_pairs([[1, 0.08], [4, 0.12], [8, 0.2]])
    cfg = lambda name: SimConfig(scheduler=name, instances=[InstanceSpec("e", "edge", prof)],  # noqa: E731
                                 latency_jitter=0.1, seed=seed)
    # 12 tasks cycled from the recorded ones, each its own task id: a small contended fleet
    pool = [dataclasses.replace(tasks[i % len(tasks)], task_id=f"r{i}") for i in range(12)]
    arr = poisson_arrivals(len(pool), 2.0, random.Random(seed))
    out = {}
    for name in ("fifo", "wait_ratio"):
        on = run_online(pool, arr, cfg(name))
        off = run_offline(pool, 3, cfg(name))
        out[name] = ([(t.task_id, t.start, t.end, t.rounds) for t in on.tasks],
                     [(t.task_id, t.start, t.end) for t in off.tasks])
    return out


@pytest.mark.ros
@pytest.mark.slow
def test_a_real_fleet_run_records_a_trace_the_simulator_replays(tmp_path):
    """The default serving fleet (policy server with the embedded trained pi0 on CPU, 2 robots)
    for 15 s with --record-trace; its trace loads, has rounds for every robot with values
    consistent with the task config, and replays deterministically. No latency thresholds: the
    machine may be loaded; only causality (the chunk arrives after its inference) is checked."""
    path = tmp_path / "trace.json"
    cmd = [sys.executable, "-m", "physai_ros.fleet", "--robots", "2", "--duration", "15",
           "--record-trace", str(path), "--contact-sheet", str(tmp_path / "s.png"),
           "--log-dir", str(tmp_path / "logs")]
    out = subprocess.run(cmd, capture_output=True, timeout=420, env=dict(os.environ))
    text = out.stdout.decode(errors="replace") + out.stderr.decode(errors="replace")
    assert out.returncode == 0, text[-4000:]
    assert f"trace {path}" in text, text[-2000:]
    traces = load_traces(path)
    assert traces.meta["source"] == "physai-fleet --record-trace"
    assert traces.meta["robots_without_rounds"] == [] and traces.meta["duration_s"] > 0
    # execution_info (50 Hz) showed when rounds started executing: most horizons are measured
    assert traces.meta["horizon_source"].get("executed", 0) >= 1
    by_robot = {t.robot_id: t for t in traces.tasks}
    assert sorted(by_robot) == ["robot_0", "robot_1"]
    for rid, tr in by_robot.items():
        cfg = traces.meta["robots"][rid]
        assert tr.task_id == f"{rid}/{cfg['task']}"
        assert tr.control_period == pytest.approx(1.0 / cfg["action_rate_hz"])  # chunk dt
        assert len(tr.rounds) >= 1 and tr.arrival_s >= 0
        for r in tr.rounds:
            assert 0 <= r.trigger_remaining <= r.horizon
            assert r.exec_s == pytest.approx(r.horizon * tr.control_period)
            assert all(math.isfinite(v) and v >= 0 for v in (r.generation_s, r.queue_s, r.latency_s))
            assert r.latency_s + 1e-3 >= r.generation_s  # capture -> chunk includes the inference
            assert 1 <= r.horizon <= r.chunk_horizon <= EMBEDDED_CHUNK  # the embedded policy's chunk length
        if cfg["horizon_policy"] == "static":
            assert {r.chunk_horizon for r in tr.rounds} == {int(cfg["horizon_params"][0])}
        assert tr.rounds[-1].trigger_remaining == 0
    first, again = _replay(traces.tasks, seed=3), _replay(load_traces(path).tasks, seed=3)
    assert first == again
    for name, (online, offline) in first.items():
        assert len(online) == len(offline) == 12, name
        assert all(end > start for _, start, end, *_ in online + offline), name
