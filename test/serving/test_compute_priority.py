"""Chunked batches before the streams' work (serving.compute_priority): the gate itself and the
serving threads that hold it for local batches (the streams that wait on it:
test/engine/test_streaming_threads.py). No timing thresholds: events decide when a batch is in
flight; bounded waits are only checked as lower bounds."""
import dataclasses
import threading
import time

from physai_ros.client.robot_client import RobotClientCore
from physai_ros.protocol.chunk import STATUS_OK
from physai_ros.serving.compute_priority import ChunkedCompute
from physai_ros.serving.serving_threads import ServingThreads
from physai_ros.serving.startup.engine_builder import build_core

from observation_builders import make_obs
from ros_rig import wait_for

TIMEOUT_S = 60.0


def test_idle_gate_does_not_wait_and_a_zero_bound_never_waits():
    gate = ChunkedCompute()
    assert gate.wait_idle(5.0) == 0.0
    with gate.batch():
        assert gate.running == 1
        assert gate.wait_idle(0.0) == 0.0
    assert gate.running == 0


def test_a_waiter_is_released_when_the_last_batch_ends():
    gate = ChunkedCompute()
    inside, release, waited = threading.Event(), threading.Event(), []

    def batch():
        with gate.batch():
            inside.set()
            release.wait(TIMEOUT_S)

    threads = [threading.Thread(target=batch) for _ in range(2)]
    for t in threads:
        t.start()
    assert inside.wait(TIMEOUT_S)
    wait_for(lambda: gate.running == 2, TIMEOUT_S, "both batches in flight")
    waiter = threading.Thread(target=lambda: waited.append(gate.wait_idle(TIMEOUT_S)))
    waiter.start()
    time.sleep(0.05)
    assert waiter.is_alive(), "the waiter went on while two batches were in flight"
    release.set()
    waiter.join(TIMEOUT_S)
    for t in threads:
        t.join(TIMEOUT_S)
    assert not waiter.is_alive() and gate.running == 0
    assert 0.0 < waited[0] < TIMEOUT_S


def test_a_wait_is_bounded_while_a_batch_goes_on():
    gate = ChunkedCompute()
    with gate.batch():
        waited = gate.wait_idle(0.05)
        assert waited >= 0.05 and gate.running == 1


def test_a_batch_that_raises_still_leaves_the_gate():
    gate = ChunkedCompute()
    try:
        with gate.batch():
            raise RuntimeError("engine failed")
    except RuntimeError:
        pass
    assert gate.running == 0 and gate.wait_idle(1.0) == 0.0


def test_serving_threads_hold_the_gate_during_a_local_batch(fleet):
    """The instance thread's engine call runs inside ChunkedCompute.batch(): the engine sees the
    gate held, and it is free again once the chunk is out."""
    server = dataclasses.replace(fleet.server, engine_instances=1, max_observation_age_s=30.0)
    core = build_core(dataclasses.replace(fleet, server=server), instance_id="gate")
    r = fleet.robots[0]
    assert core.register(RobotClientCore(r).registration()).accepted
    gate = ChunkedCompute()
    slot = next(iter(core.engines.values()))
    real, seen = slot.engine.infer, []
    slot.engine.infer = lambda inputs: (seen.append(gate.running), real(inputs))[1]
    got, done = [], threading.Event()
    runner = ServingThreads(core, lambda chunks: (got.extend(chunks), done.set()), lambda rid, rnd: None,
                           chunked=gate).start()
    try:
        assert runner.submit(make_obs(r, 40)) == []
        assert done.wait(TIMEOUT_S), "no chunk came back"
    finally:
        runner.stop()
    assert [c.status for c in got] == [STATUS_OK]
    assert seen == [1] and gate.running == 0
