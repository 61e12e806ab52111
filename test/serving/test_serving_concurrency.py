"""Several engine instances compute at the same time (real tiny pi0 engines, real FIFO).

Each engine records when its infer() started and stopped and waits at a shared barrier inside
the call: the barrier only opens when both instances are inside infer() together, so a serial
execution would break it (an ERROR chunk) instead of passing by luck of timing.
"""
import dataclasses
import threading

import pytest

from physai_ros.client.robot_client import RobotClientCore
from physai_ros.protocol.chunk import STATUS_OK
from physai_ros.serving.serving_threads import ServingThreads
from physai_ros.serving.startup.engine_builder import build_core

from observation_builders import make_obs

# Long enough for a loaded CI machine; a correct run passes the barrier at once.
BARRIER_TIMEOUT_S = 60.0


class RecordingEngine:
    """The real engine, with its calls' start/stop recorded and a meeting point inside."""

    def __init__(self, engine, barrier, log, lock):
        self.config = engine.config
        self._engine, self._barrier, self._log, self._lock = engine, barrier, log, lock

    def infer(self, inputs):
        with self._lock:
            self._log.append(("start", id(self)))
        self._barrier.wait()
        out = self._engine.infer(inputs)
        with self._lock:
            self._log.append(("stop", id(self)))
        return out


def _two_instance_core(fleet):
    server = dataclasses.replace(fleet.server, engine_instances=2, max_batch=1,
                                 max_observation_age_s=30.0)
    core = build_core(dataclasses.replace(fleet, server=server), instance_id="conc")
    barrier, log, lock = threading.Barrier(2, timeout=BARRIER_TIMEOUT_S), [], threading.Lock()
    for slot in core.engines.values():
        slot.engine = RecordingEngine(slot.engine, barrier, log, lock)
    for r in fleet.robots[:2]:
        assert core.register(RobotClientCore(r).registration()).accepted
    return core, log


def _assert_overlapped(log, core):
    ids = {id(s.engine) for s in core.engines.values()}
    starts = [i for i, (kind, _) in enumerate(log) if kind == "start"]
    stops = [i for i, (kind, _) in enumerate(log) if kind == "stop"]
    assert {eid for _, eid in log} == ids, "both instances ran"
    # Both calls started before either finished: the two batches were computing together.
    assert len(starts) == 2 and len(stops) == 2 and max(starts) < min(stops), log


def test_step_runs_two_instances_at_the_same_time(fleet):
    core, log = _two_instance_core(fleet)
    obs = [make_obs(r, 10) for r in fleet.robots[:2]]
    for o in obs:
        assert core.submit(o) == []
    out = core.step()
    assert sorted((c.robot_id, c.status) for c in out.chunks) == [
        ("robot_0", STATUS_OK), ("robot_1", STATUS_OK)], [c.error for c in out.chunks]
    assert {c.engine_instance for c in out.chunks} == {"engine_0", "engine_1"}
    _assert_overlapped(log, core)
    assert not any(s.running for s in core.engines.values())


def test_runner_feeds_each_instance_its_own_thread(fleet):
    core, log = _two_instance_core(fleet)
    got, done, errors = [], threading.Event(), []
    lock = threading.Lock()

    def on_chunks(chunks):
        with lock:
            got.extend(chunks)
            if len(got) >= 2:
                done.set()

    runner = ServingThreads(core, on_chunks, lambda rid, rnd: None, errors.append).start()
    try:
        for r in fleet.robots[:2]:
            assert core.submit(make_obs(r, 20)) == []
        assert done.wait(BARRIER_TIMEOUT_S * 2), f"no chunks: {errors}"
    finally:
        runner.stop()
    assert not errors
    assert sorted(c.robot_id for c in got) == ["robot_0", "robot_1"]
    assert all(c.status == STATUS_OK for c in got), [c.error for c in got]
    assert {c.engine_instance for c in got} == {"engine_0", "engine_1"}
    _assert_overlapped(log, core)


def test_a_running_instance_gets_no_second_batch(fleet):
    """While engine_0 runs, the scheduler sees it busy even past its estimate; the next request
    goes to engine_1, and a third waits until one of them is free."""
    server = dataclasses.replace(fleet.server, engine_instances=2, max_batch=1,
                                 max_observation_age_s=30.0)
    core = build_core(dataclasses.replace(fleet, server=server), instance_id="busy")
    r = fleet.robots[0]
    assert core.register(RobotClientCore(r).registration()).accepted
    others = [dataclasses.replace(fleet.robots[k], id=f"x{k}", namespace=f"x{k}") for k in (1, 2)]
    for o in others:
        assert core.register(RobotClientCore(o).registration()).accepted
    core.submit(make_obs(r, 2))
    d1 = core.dispatch(now=100.0)
    assert [w.instance_id for w in d1.work] == ["engine_0"]
    core.submit(make_obs(others[0], 2))
    # Far past engine_0's estimated finish: it is still running, so it must not be chosen.
    d2 = core.dispatch(now=200.0)
    assert [w.instance_id for w in d2.work] == ["engine_1"]
    core.submit(make_obs(others[1], 2))
    assert core.dispatch(now=300.0).work == []
    assert not core.wait_for_work(0.0), "queued work but no free instance"
    chunks = core.run_batch(d1.work[0])
    assert [c.status for c in chunks] == [STATUS_OK]
    core.run_language("engine_0")  # the frame's text (the default fleet asks pick_place robots)
    assert core.wait_for_work(0.0)
    d3 = core.dispatch()
    assert [w.instance_id for w in d3.work] == ["engine_0"]
    for w in d2.work + d3.work:
        assert [c.status for c in core.run_batch(w)] == [STATUS_OK]
        core.run_language(w.instance_id)
    assert core.pending() == 0 and not any(s.running for s in core.engines.values())


def test_runner_submit_places_a_request_on_an_idle_instance_itself(fleet):
    """ServingThreads.submit dispatches in the caller's thread (the node's executor): with the
    dispatcher thread never started, the chunk still comes back; the chunk says how long the
    server's own pre- and post-processing took."""
    server = dataclasses.replace(fleet.server, engine_instances=1, max_observation_age_s=30.0)
    core = build_core(dataclasses.replace(fleet, server=server), instance_id="inline")
    r = fleet.robots[0]
    assert core.register(RobotClientCore(r).registration()).accepted
    got, done = [], threading.Event()
    runner = ServingThreads(core, lambda chunks: (got.extend(chunks), done.set()), lambda rid, rnd: None)
    (instance_thread,) = runner._instance_threads.values()  # the instance only: no dispatcher
    instance_thread.start()
    try:
        assert runner.submit(make_obs(r, 30)) == []
        assert done.wait(BARRIER_TIMEOUT_S), "the request never reached the idle instance"
    finally:
        runner.stop()
    assert [(c.robot_id, c.round_id, c.status) for c in got] == [("robot_0", 30, STATUS_OK)]
    assert 0.0 < got[0].prepare_ms < got[0].inference_ms + 1e3


def test_runner_instance_threads_compute_with_the_threads_they_are_given(fleet):
    """ServingThreads(torch_threads=n): each instance's engine runs with n intra-op threads,
    whatever the thread that built it used (serving.compute_threads)."""
    import torch

    server = dataclasses.replace(fleet.server, engine_instances=1, max_observation_age_s=30.0)
    core = build_core(dataclasses.replace(fleet, server=server), instance_id="threads")
    r = fleet.robots[0]
    assert core.register(RobotClientCore(r).registration()).accepted
    slot = next(iter(core.engines.values()))
    real, seen = slot.engine.infer, []
    slot.engine.infer = lambda inputs: (seen.append(torch.get_num_threads()), real(inputs))[1]
    want = 1 if torch.get_num_threads() != 1 else 2
    got, done = [], threading.Event()
    runner = ServingThreads(core, lambda chunks: (got.extend(chunks), done.set()), lambda rid, rnd: None,
                           torch_threads=want).start()
    try:
        assert runner.submit(make_obs(r, 50)) == []
        assert done.wait(BARRIER_TIMEOUT_S), "no chunk came back"
    finally:
        runner.stop()
    assert [c.status for c in got] == [STATUS_OK]
    assert seen == [want]


def test_runner_submit_leaves_a_busy_instance_to_the_dispatcher(fleet):
    """A request that finds the only instance busy is placed by the dispatcher thread once the
    running batch is done (submit wakes it instead of dropping the request)."""
    server = dataclasses.replace(fleet.server, engine_instances=1, max_batch=1, max_observation_age_s=30.0)
    core = build_core(dataclasses.replace(fleet, server=server), instance_id="busy1")
    gate, entered = threading.Event(), threading.Event()
    slot = next(iter(core.engines.values()))
    real = slot.engine

    class GatedEngine:
        config = real.config

        def infer(self, inputs):
            entered.set()
            assert gate.wait(BARRIER_TIMEOUT_S)
            return real.infer(inputs)

    slot.engine = GatedEngine()
    robots = [fleet.robots[0], dataclasses.replace(fleet.robots[1], id="y1", namespace="y1")]
    for rb in robots:
        assert core.register(RobotClientCore(rb).registration()).accepted
    got, lock, two = [], threading.Lock(), threading.Event()

    def on_chunks(chunks):
        with lock:
            got.extend(chunks)
            if len(got) >= 2:
                two.set()

    runner = ServingThreads(core, on_chunks, lambda rid, rnd: None).start()
    try:
        assert runner.submit(make_obs(robots[0], 40)) == []
        assert entered.wait(BARRIER_TIMEOUT_S)
        assert runner.submit(make_obs(robots[1], 41)) == []  # the instance is busy: queued
        assert core.pending() == 1
        gate.set()
        assert two.wait(BARRIER_TIMEOUT_S * 2), f"got {[(c.robot_id, c.error) for c in got]}"
    finally:
        gate.set()
        runner.stop()
    assert sorted((c.robot_id, c.status) for c in got) == [("robot_0", STATUS_OK), ("y1", STATUS_OK)]
