"""A real engine_worker process and the server's RemoteEngine proxy in this process, over DDS."""
import signal
import threading
import time

import pytest
import torch
from physai_ros_interfaces.msg import EngineBatchRequest, EngineBatchResult

from physai_ros.engine.engine import Pi0Engine
from physai_ros.engine.types import EngineInputError
from physai_ros.fleet.processes import start_process, stop_processes
from physai_ros.protocol.topics import request_topic, result_topic
from physai_ros.ros.qos import reliable_qos
from physai_ros.ros.remote_engine import (RemoteEngine, RemoteEngineError, RemoteEngineTimeout,
                                       RemoteEngineUnavailable)

from auth_rig import server_auth
from ros_rig import SpunNode, log_of, wait_for
from worker_harness import STARTUP_S, worker_spec
from worker_inputs import make_inputs

pytestmark = [pytest.mark.ros, pytest.mark.slow]
IID = "test_worker"


@pytest.fixture(scope="module")
def env(tmp_path_factory, tiny):
    log_dir = tmp_path_factory.mktemp("worker_logs")
    spec = worker_spec(IID)
    # The worker starts inside the try: a failure before it (the in-test node once failed to
    # start here) must not leave it running after the session.
    spun = SpunNode("remote_engine_test")
    procs = []
    try:
        proc = start_process(spec, str(log_dir))
        procs.append(proc)
        proxy = RemoteEngine(spun.node, IID, tiny, auth=server_auth(workers=[IID]))
        wait_for(lambda: proxy.alive, STARTUP_S, "the worker to be alive",
                 lambda: f"{proxy.why_not_alive()}\n{log_of(log_dir, spec.name)}")
        yield proxy, proc, spun, (lambda: log_of(log_dir, spec.name))
    finally:
        spun.close()
        stop_processes(procs)


def test_worker_advertises_its_measured_profile(env):
    proxy, *_ = env
    st = proxy.status
    assert st.ready and st.tier == "edge" and st.max_batch == 3 and proxy.max_batch == 3
    assert proxy.profile.batch_sizes == (1, 2, 3)
    assert all(t > 0 for t in proxy.profile.latencies_s)
    assert list(proxy.profile.latencies_s) == sorted(proxy.profile.latencies_s)
    assert proxy.heartbeat_age() < proxy.liveness_timeout_s
    assert proxy.diagnostics()["alive"] is True


def test_remote_batch_equals_local_engine_with_same_weights_and_noise(env, tiny):
    proxy, *_ = env
    inputs = make_inputs(tiny, 3, seed=11)
    for x in inputs:
        if x.noise is None:
            x.noise = torch.randn(tiny.chunk_size, tiny.max_action_dim)
    got = proxy.infer(inputs)
    ref = Pi0Engine(tiny, seed=7).infer(inputs)  # the worker's seed: identical weights
    assert len(got) == 3
    for g, r in zip(got, ref):
        # Same batch, weights and noise in another process: equal up to float32 rounding of
        # thread-count dependent reductions.
        torch.testing.assert_close(g.actions, r.actions, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(g.updates, r.updates, rtol=1e-5, atol=1e-6)
        assert g.timings_ms["roundtrip_ms"] >= g.timings_ms["total_ms"] > 0
    assert proxy.stats.batches >= 1 and proxy.network_rtt_s >= 0


def test_bad_requests_get_error_results_and_the_worker_keeps_serving(env, tiny):
    proxy, _, spun, log = env
    results = []
    spun.node.create_subscription(EngineBatchResult, result_topic(IID), results.append, reliable_qos(50))
    pub = spun.node.create_publisher(EngineBatchRequest, request_topic(IID), reliable_qos())
    wait_for(lambda: pub.get_subscription_count() > 0, 10, "the worker's request subscription")
    time.sleep(0.5)  # the worker's result publisher must match our new subscription too
    junk = EngineBatchRequest(batch_id="junk-1", batch_size=2, image_size=56)  # no arrays at all
    pub.publish(_signed(junk))  # from the server, so it is validated
    wait_for(lambda: any(r.batch_id == "junk-1" for r in results), 20, "the error result", log)
    res = next(r for r in results if r.batch_id == "junk-1")
    assert res.status == EngineBatchResult.STATUS_ERROR
    assert res.error.startswith("bad request: num_views: expected 2 values"), res.error
    # Through the proxy: a batch over the worker's max_batch is its error, raised clearly.
    with pytest.raises(RemoteEngineError, match="exceeds this worker's max_batch 3"):
        proxy.infer(make_inputs(tiny, 4, seed=1))
    # A bad input never leaves this process (same error type as the local engine).
    bad = make_inputs(tiny, 1)
    bad[0].state = bad[0].state[:2]
    with pytest.raises(EngineInputError, match="^robot 0: state"):
        proxy.infer(bad)
    assert len(proxy.infer(make_inputs(tiny, 2, seed=4))) == 2
    wait_for(lambda: proxy.status.errors >= 2, 5, "the worker to count its errors")


def test_concurrent_callers_get_their_own_results(env, tiny):
    proxy, *_ = env
    batches = [make_inputs(tiny, 1, seed=20 + i) for i in range(3)]
    out = {}
    threads = [threading.Thread(target=lambda i=i: out.__setitem__(i, proxy.infer(batches[i])))
               for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    ref = Pi0Engine(tiny, seed=7)
    for i in range(3):
        torch.testing.assert_close(out[i][0].actions, ref.infer(batches[i])[0].actions, rtol=1e-5, atol=1e-6)


def _signed(msg):
    from physai_ros.ros.message_digest import digest
    from physai_ros.security.endpoints import BATCH_REQUEST

    msg.auth = server_auth().sign(BATCH_REQUEST, digest(msg))
    return msg


def test_requests_not_signed_by_the_server_are_not_run(env, tiny, tmp_path):
    """A rogue node sending the worker batches (unsigned, or signed by a key that is not the
    fleet's server's) gets nothing: no result, no inference; the worker keeps serving."""
    from physai_ros.ros.message_digest import digest
    from physai_ros.security.config import SecurityConfig
    from physai_ros.security.endpoints import BATCH_REQUEST, ServerAuth
    from physai_ros.security.keystore import Keystore
    from physai_ros.workers.codec import encode_request

    proxy, _, spun, log = env
    results = []
    spun.node.create_subscription(EngineBatchResult, result_topic(IID), results.append, reliable_qos(50))
    pub = spun.node.create_publisher(EngineBatchRequest, request_topic(IID), reliable_qos())
    wait_for(lambda: pub.get_subscription_count() > 0, 10, "the worker's request subscription")
    time.sleep(0.5)
    served = proxy.status.batches_served
    unsigned = encode_request(make_inputs(tiny, 1, seed=2), tiny, "rogue-1", IID)
    pub.publish(unsigned)
    rogue_ks = Keystore.init(tmp_path / "rogue")  # a server key, but not the fleet's
    forged = encode_request(make_inputs(tiny, 1, seed=2), tiny, "rogue-2", IID)
    forged.auth = ServerAuth(rogue_ks, SecurityConfig().server).sign(BATCH_REQUEST, digest(forged))
    pub.publish(forged)
    # A real batch after them is answered: the rogue ones were seen (in order) and dropped.
    assert len(proxy.infer(make_inputs(tiny, 1, seed=5))) == 1
    wait_for(lambda: proxy.status.batches_served > served, 5, "the worker's next heartbeat")
    assert not any(r.batch_id.startswith("rogue") for r in results), [r.batch_id for r in results]
    assert "refused 2 unauthenticated request(s)" in proxy.status.last_error, proxy.status.last_error
    assert "bad_signature" in proxy.status.last_error


def test_a_fake_worker_cannot_answer_batches(env, tiny, tmp_path):
    """Results on the worker's topic from another process (unsigned, or signed with a key that is
    not this worker's) are refused and counted; the caller gets the real worker's answer. The fake
    answers the very batch id the proxy sends, the moment it sees the request: it is ahead of the
    real worker, which first runs the engine."""
    from physai_ros.ros.message_digest import digest
    from physai_ros.security.endpoints import BATCH_RESULT, PeerSigner
    from physai_ros.security.keystore import Identity, Keystore

    proxy, _, spun, _ = env
    rogue = Keystore.init(tmp_path / "rogue")
    rogue.add(Identity("worker", IID))  # the worker's name, not its key
    forger = PeerSigner(rogue, Identity("worker", IID))
    fake = spun.node.create_publisher(EngineBatchResult, result_topic(IID), reliable_qos())
    sent = []

    def answer_first(req):
        for signed in (False, True):
            res = EngineBatchResult(batch_id=req.batch_id, instance_id=IID, batch_size=req.batch_size,
                                    chunk_size=tiny.chunk_size, action_dim=tiny.max_action_dim, num_steps=1)
            res.actions = [9.0] * (req.batch_size * tiny.chunk_size * tiny.max_action_dim)
            res.updates = [0.0] * (req.batch_size * tiny.chunk_size * tiny.max_action_dim)
            if signed:
                res.auth = forger.sign(BATCH_RESULT, digest(res))
            fake.publish(res)
            sent.append(req.batch_id)

    spy = spun.node.create_subscription(EngineBatchRequest, request_topic(IID), answer_first, reliable_qos(50))
    try:
        wait_for(lambda: fake.get_subscription_count() > 0, 10, "the proxy's result subscription matching the fake")
        time.sleep(0.5)  # our request subscription must match the proxy's publisher too
        inputs = make_inputs(tiny, 1, seed=13)
        inputs[0].noise = torch.randn(tiny.chunk_size, tiny.max_action_dim)
        before = dict(proxy.stats.auth_refused)
        got = proxy.infer(inputs)
    finally:  # the node outlives this test: the fake must not answer later tests' batches
        spun.node.destroy_subscription(spy)
    ref = Pi0Engine(tiny, seed=7).infer(inputs)
    torch.testing.assert_close(got[0].actions, ref[0].actions, rtol=1e-5, atol=1e-6)
    wait_for(lambda: len(sent) == 2, 10, "the fake answering the request")
    wait_for(lambda: proxy.stats.auth_refused.get("missing", 0) > before.get("missing", 0)
             and proxy.stats.auth_refused.get("bad_signature", 0) > before.get("bad_signature", 0), 10,
             "both fake answers refused", lambda: str(proxy.stats))
    spun.node.destroy_publisher(fake)


def test_killed_worker_times_out_cleanly_and_is_reported_dead(env, tiny):
    proxy, proc, spun, _ = env
    inputs = make_inputs(tiny, 1, seed=2)
    # A second proxy that still trusts a 30 s old heartbeat: its call goes out to the dead worker
    # and must time out (the default proxy may already know better on a slow machine).
    trusting = RemoteEngine(spun.node, IID, tiny, timeout_s=2.0, liveness_timeout_s=30.0)
    wait_for(lambda: trusting.alive, 20, "the second proxy to see the worker", trusting.why_not_alive)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    t0 = time.monotonic()
    with pytest.raises(RemoteEngineTimeout, match=f"engine worker {IID}: no result for batch .* within 2.00 s"):
        trusting.infer(inputs)
    assert 2.0 <= time.monotonic() - t0 < 10.0
    assert trusting.stats.timeouts == 1 and trusting.diagnostics()["timeouts"] == 1
    wait_for(lambda: not proxy.alive, 10, "the proxy to report the worker dead")
    assert "last heartbeat" in proxy.why_not_alive()
    with pytest.raises(RemoteEngineUnavailable, match="not alive: last heartbeat"):
        proxy.infer(inputs)
    assert proxy.stats.unavailable == 1 and proxy.diagnostics()["alive"] is False
