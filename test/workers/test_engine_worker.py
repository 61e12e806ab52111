"""WorkerCore without ROS: measured profile, results equal to the local engine, errors as results."""
import array

import pytest
import torch
from physai_ros_interfaces.msg import EngineBatchResult

from physai_ros.engine.engine import Pi0Engine
from physai_ros.workers import codec
from physai_ros.workers.engine_worker import WorkerCore
from physai_ros.workers.profiling import measure_profile, synthetic_inputs

from worker_inputs import make_inputs

OK, ERROR = EngineBatchResult.STATUS_OK, EngineBatchResult.STATUS_ERROR


@pytest.fixture(scope="module")
def core(tiny):
    return WorkerCore(Pi0Engine(tiny, seed=7), "w_0", "edge", max_batch=3, model="tiny")


def test_profile_is_measured_for_every_batch_size_and_advertised(core):
    assert not core.status().ready
    prof = core.measure(reps=1, views=1, tokens=8)
    assert prof.batch_sizes == (1, 2, 3)
    assert all(t > 0 for t in prof.latencies_s)
    assert list(prof.latencies_s) == sorted(prof.latencies_s)
    st = core.status()
    assert st.ready and st.profile == prof and st.max_batch == 3
    assert codec.config_from_json(st.model_config) == core.config


def test_measure_profile_counts_calls_and_smooths_noise(tiny):
    calls = []
    ticks = iter([0, 5, 5, 6, 6, 7,   10, 12, 12, 13, 13, 13.5])  # batch 2 times faster than 1
    prof = measure_profile(lambda b: calls.append(len(b)), tiny, 2, reps=3, clock=lambda: next(ticks))
    assert calls == [1, 1, 1, 1, 2, 2, 2, 2]  # one warm-up then 3 timed calls per size
    assert prof.latencies_s == (1.0, 1.0)  # medians 1 and 0.5, made non-decreasing


def test_a_profile_for_raw_frames_runs_the_engine_on_frames_of_that_size(tiny):
    """A LeRobot checkpoint's profile is measured on raw frames of the fleet's camera size, so the
    engine's resize is in the latency the scheduler plans with."""
    seen = []

    def infer(batch):
        for x in batch:
            x.validate(tiny)
            seen.append({tuple(f.shape) for f in x.images})

    measure_profile(infer, tiny, 2, reps=1, views=2, frame_size=(48, 64))
    assert seen and all(shapes == {(3, 48, 64)} for shapes in seen)
    eng = Pi0Engine(tiny)
    assert len(eng.infer(synthetic_inputs(tiny, 2, 2, 8, frame_size=(48, 64)))) == 2


def test_served_batch_equals_the_local_engine(core, tiny):
    inputs = make_inputs(tiny, 3, seed=3)
    res = core.serve(codec.encode_request(inputs, tiny, "b-1", "w_0"), received_at=core.clock())
    assert res.status == OK and res.batch_id == "b-1" and res.queue_ms >= 0
    got = codec.decode_result(res, tiny, 3)
    # Same batch as the worker ran (padding and GEMM shapes equal, so bit-equal); only rows
    # with noise given are deterministic, the third robot drew its own.
    ref = Pi0Engine(tiny, seed=7).infer(inputs)
    for g, r in zip(got[:2], ref[:2]):
        assert torch.equal(g.actions, r.actions) and torch.equal(g.updates, r.updates)
    assert torch.isfinite(got[2].actions).all()
    assert core.status().batches_served >= 1 and core.status().robots_served >= 3


def test_bad_requests_become_error_results_and_the_worker_keeps_serving(core, tiny):
    before = core.errors
    msg = codec.encode_request(make_inputs(tiny, 2), tiny, "bad-1")
    msg.state = array.array("f", [0.0])
    res = core.serve(msg)
    assert res.status == ERROR and res.batch_id == "bad-1" and res.error.startswith("bad request: state:")
    big = codec.encode_request(make_inputs(tiny, 4), tiny, "bad-2")
    assert "exceeds this worker's max_batch 3" in core.serve(big).error
    assert core.errors == before + 2 and core.errors_by_kind["bad_request"] >= 2
    assert core.status().last_error.startswith("bad request: batch_size")
    ok = core.serve(codec.encode_request(make_inputs(tiny, 1, seed=5), tiny, "good"))
    assert ok.status == OK and ok.batch_id == "good"


def test_engine_failure_is_an_error_result(tiny):
    class Broken:
        config = tiny

        def infer(self, batch):
            raise RuntimeError("device lost")

    core = WorkerCore(Broken(), "w_1")
    res = core.serve(codec.encode_request(make_inputs(tiny, 1), tiny, "b"))
    assert res.status == ERROR and res.error == "engine failed: RuntimeError: device lost"
    assert core.errors_by_kind == {"engine": 1}


def test_worker_settings_are_checked(tiny):
    with pytest.raises(ValueError, match="instance_id"):
        WorkerCore(Pi0Engine(tiny), "bad id")
    with pytest.raises(ValueError, match="tier"):
        WorkerCore(Pi0Engine(tiny), "w", tier="moon")
