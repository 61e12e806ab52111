"""Algorithm 1's policy steps, hand-computed: binning, promotion, in-bucket order, aging,
placement, batching, refresh, baselines, and bad input."""
import math

import pytest

from physai_ros.scheduler import (
    EngineInstanceInfo, LatencyProfile, Request, Scheduler, make_scheduler,
)
from physai_ros.scheduler.wait_ratio import bucket_of, exec_estimate

P = 0.05


def req(rid, task=None, rnd=0, t=0.0, hint=None, captured=None):
    return Request(rid, "robot_" + (task or rid), task or rid, rnd, t, t if captured is None else captured,
                   None, 0, P, last_exec_duration=hint)


def edge(cap_latency=None, busy_until=0.0, max_batch=None, iid="edge0"):
    prof = cap_latency or LatencyProfile.constant(0.1)
    return EngineInstanceInfo(iid, "edge", prof, 0.0, busy_until, max_batch)


def test_make_scheduler_names_and_errors():
    for name in ("fifo", "autellix", "wait_ratio"):
        s = make_scheduler(name)
        assert isinstance(s, Scheduler) and s.name == name
    with pytest.raises(ValueError, match="unknown scheduler"):
        make_scheduler("lifo")
    with pytest.raises(ValueError, match="bad parameters"):
        make_scheduler("fifo", buckets=3)


def test_bucket_binning_and_promotion():
    B, A = 10, 4
    assert bucket_of(0.0, 0, B, A) == 0
    assert bucket_of(0.09, 0, B, A) == 0
    assert bucket_of(0.1, 0, B, A) == 1
    assert bucket_of(0.55, 0, B, A) == 5
    assert bucket_of(1.0, 0, B, A) == 9          # w = 1 belongs to the top bucket
    assert bucket_of(0.55, 3, B, A) == 5         # fewer than A skips: no promotion
    assert bucket_of(0.55, 4, B, A) == 6         # ceil(4/4) = 1
    assert bucket_of(0.55, 5, B, A) == 7         # ceil(5/4) = 2
    assert bucket_of(0.55, 40, B, A) == 9        # capped at the top
    assert exec_estimate(0.5, 3) == pytest.approx(2.0)


def test_bucket_promotion_through_skips():
    s = make_scheduler("wait_ratio", buckets=10, aging_interval=2)
    inst = [edge(max_batch=1)]
    s.submit(req("old", hint=0.1), 0.0)
    buckets, order = [], []
    for k in range(3):
        # A newcomer with a longer execution wins every in-bucket comparison.
        s.submit(req(f"new{k}", hint=10.0), float(k))
        buckets.append((s.bucket("old", float(k)), s.bucket(f"new{k}", float(k))))
        order += s.schedule(float(k), inst).dispatched_request_ids
    # skipped 0, 1, 2: promoted by ceil(2/2) = 1 bucket at 2 skips, above the newcomers.
    assert buckets == [(0, 0), (0, 0), (1, 0)]
    assert order == ["new0", "new1", "old"]


def test_longest_estimated_execution_first_with_aging():
    s = make_scheduler("wait_ratio")
    inst = [edge(max_batch=1)]
    s.submit(req("long", hint=2.0), 0.0)
    s.submit(req("short", hint=0.5), 0.0)
    order = [s.schedule(0.0, inst).dispatched_request_ids[0]]
    for k in range(3):
        # 0.5 x (1 + skipped) against a fresh 2.0 each cycle: 1.0 < 2, 1.5 < 2, 2.0 == 2 (older wins)
        s.submit(req(f"n{k}", hint=2.0), 1.0 + k)
        order.append(s.schedule(1.0 + k, inst).dispatched_request_ids[0])
    assert order == ["long", "n0", "n1", "short"]


def test_intra_bucket_and_bucket_count_ablations():
    """§5.5: the in-bucket order is a parameter (longest estimated execution first, the
    paper's; FIFO; shortest first), and buckets=0 orders by the raw wait ratio."""
    def sched(**kw):
        s = make_scheduler("wait_ratio", **kw)
        for rid, hint, t in (("long", 2.0, 0.0), ("short", 0.2, 0.01), ("mid", 1.0, 0.02)):
            s.submit(req(rid, t=t, hint=hint), t)   # first rounds: ratio 0, one bucket
        return s
    assert [e.request.request_id for e in sched().order(0.1)] == ["long", "mid", "short"]
    assert [e.request.request_id for e in sched(intra_bucket="fifo").order(0.1)] == ["long", "short", "mid"]
    assert [e.request.request_id for e in sched(intra_bucket="shortest_exec").order(0.1)] == ["short", "mid", "long"]
    inf = sched(buckets=0)
    assert inf.bucket("long", 0.1) == -1 and len(inf.order(0.1)) == 3
    with pytest.raises(ValueError, match="intra_bucket"):
        make_scheduler("wait_ratio", intra_bucket="random")
    with pytest.raises(ValueError, match="buckets"):
        make_scheduler("wait_ratio", buckets=-1)


def test_fifo_and_autellix_orders():
    inst = [edge(max_batch=1)]
    fifo = make_scheduler("fifo")
    for rid, t in (("b", 2.0), ("a", 1.0), ("c", 3.0)):
        fifo.submit(req(rid, t=t), 3.0)
    got = [fifo.schedule(3.0 + k, inst).dispatched_request_ids[0] for k in range(3)]
    assert got == ["a", "b", "c"]

    aut = make_scheduler("autellix")
    # Task "heavy" has 0.9 s of attained generation service, task "light" 0.2 s.
    for task, gen in (("heavy", 0.9), ("light", 0.2)):
        aut.submit(req(task + "#0", task=task), 0.0)
        aut.schedule(0.0, inst)
        aut.on_completed(task + "#0", gen, gen)
    aut.submit(req("heavy#1", task="heavy", rnd=1, t=5.0), 5.0)
    aut.submit(req("light#1", task="light", rnd=1, t=6.0), 6.0)
    assert aut.schedule(6.0, inst).dispatched_request_ids == ["light#1"]
    assert aut.schedule(6.1, inst).dispatched_request_ids == ["heavy#1"]


def test_latency_profile_saturation_and_interpolation():
    p = LatencyProfile.from_pairs([[1, 0.1], [2, 0.12], [4, 0.16], [8, 0.3], [16, 0.6]])
    # throughput 10, 16.7, 25, 26.7, 26.7 per s: within 5 % of the best from batch 8 on
    assert p.saturation_batch() == 8
    assert p.latency(3) == pytest.approx(0.14)
    assert p.latency(32) == pytest.approx(1.2)
    with pytest.raises(ValueError):
        LatencyProfile.from_pairs([[1, -0.1]])


def test_batches_stop_at_the_saturation_point():
    s = make_scheduler("fifo")
    prof = LatencyProfile.from_pairs([[1, 0.1], [2, 0.12], [4, 0.16], [8, 0.32]])
    for k in range(10):
        s.submit(req(f"r{k}", t=k * 0.001), 0.01)
    d = s.schedule(0.01, [edge(prof)])
    assert [len(b.request_ids) for b in d.batches] == [4]
    assert s.pending() == 6


@pytest.mark.parametrize("rule", ["paper", "completion"])
def test_edge_first_then_cloud_only_when_it_pays(rule):
    prof_e = LatencyProfile.from_pairs([[1, 0.15], [2, 0.2], [4, 0.4]])   # saturates at 2
    prof_c = LatencyProfile.from_pairs([[1, 0.05], [2, 0.06], [4, 0.1]])   # saturates at 4
    fast_cloud = EngineInstanceInfo("cloud0", "cloud", prof_c, network_rtt_s=0.1)
    s = make_scheduler("fifo", placement_rule=rule)
    for k in range(4):
        s.submit(req(f"r{k}", t=k * 0.01), 0.05)
    d = s.schedule(0.05, [edge(prof_e), fast_cloud])
    # Edge takes r0, r1 and is then busy 0.2 s. r2 on the cloud: 0.1 + 0.05 = 0.15 s, less than
    # its edge queueing delay 0.2 (paper) and its edge completion 0.2 + 0.2 (completion rule);
    # r3 at cloud batch 2: 0.16 s, also less -> both go to the cloud under either rule.
    assert {b.instance_id: b.request_ids for b in d.batches} == {"edge0": ("r0", "r1"), "cloud0": ("r2", "r3")}

    slow_cloud = EngineInstanceInfo("cloud0", "cloud", prof_c, network_rtt_s=0.5)
    s = make_scheduler("fifo", placement_rule=rule)
    for k in range(3):
        s.submit(req(f"r{k}", t=k * 0.01), 0.05)
    d = s.schedule(0.05, [edge(prof_e), slow_cloud])
    # cloud 0.5 + 0.05 = 0.55 s: more than 0.2 and than 0.4: r2 stays queued for the edge.
    assert [b.instance_id for b in d.batches] == ["edge0"] and s.pending() == 1

    # Busy edge (0.01 s more): nothing is placed on it. Fast cloud 0.15 s against an edge
    # queueing delay of 0.01 s (paper: stay) or an edge completion of 0.21 s (completion: go).
    s = make_scheduler("fifo", placement_rule=rule)
    s.submit(req("r0"), 0.0)
    busy = edge(prof_e, busy_until=0.01)
    assert s.schedule(0.0, [busy, slow_cloud]).batches == []
    d = s.schedule(0.0, [busy, fast_cloud])
    assert [b.instance_id for b in d.batches] == ([] if rule == "paper" else ["cloud0"])


def test_cloud_offload_rule_worked_example():
    """docs/scheduler.md: the edge is busy 0.15 s more, an edge batch takes 0.10 s; the cloud
    takes 0.10 s RTT + 0.08 s. Paper (Alg. 1 l.17): cloud latency 0.18 < edge queueing delay
    0.15? No: the request waits for the edge and completes at 0.15 + 0.10 = 0.25 s. Completion
    rule: 0.18 < 0.25: cloud, done at 0.18 s."""
    e = EngineInstanceInfo("edge0", "edge", LatencyProfile.constant(0.10), 0.0, busy_until=0.15, max_batch=1)
    c = EngineInstanceInfo("cloud0", "cloud", LatencyProfile.constant(0.08), network_rtt_s=0.10)
    got = {}
    for rule in ("paper", "completion"):
        s = make_scheduler("fifo", placement_rule=rule)
        s.submit(req("r0"), 0.0)
        got[rule] = [b.instance_id for b in s.schedule(0.0, [e, c]).batches]
    assert got == {"paper": [], "completion": ["cloud0"]}
    with pytest.raises(ValueError, match="placement_rule"):
        make_scheduler("fifo", placement_rule="fastest")


def test_stale_observation_is_refreshed_before_dispatch():
    s = make_scheduler("wait_ratio", stale_after_s=0.1, refresh_timeout_s=0.2)
    inst = [edge()]
    s.submit(req("old", captured=0.0), 0.5)
    s.submit(req("fresh", t=0.5), 0.5)
    d = s.schedule(0.5, inst)
    assert d.refresh_request_ids == ["old"] and d.dispatched_request_ids == ["fresh"]
    s.submit(Request("old", "robot_old", "old", 0, 0.0, 0.55, None, 0, P, refresh=True), 0.55)
    s.submit(req("newer", t=0.55), 0.55)
    d = s.schedule(0.6, inst)
    assert d.refresh_request_ids == [] and d.batches[0].request_ids[0] == "old"
    assert s.stats()["refreshed"] == 1

    # No fresh observation: after the timeout it is served with the one it has.
    s = make_scheduler("fifo", stale_after_s=0.1, refresh_timeout_s=0.2)
    s.submit(req("r", captured=0.0), 0.5)
    assert s.schedule(0.5, inst).refresh_request_ids == ["r"]
    assert s.schedule(0.6, inst).batches == []
    assert s.schedule(0.71, inst).dispatched_request_ids == ["r"]
    assert s.stats()["refresh_timeouts"] == 1


def test_refreshed_requests_keep_their_aging_and_the_order_they_were_selected_in():
    """Two stale requests selected in one cycle, the higher-priority one submitted later: once
    both fresh observations are in they are served in the order they were selected (not the
    order they arrived in), and being held for a refresh does not reset a skip counter (Alg. 1
    l.24 resets it at dispatch)."""
    s = make_scheduler("fifo", stale_after_s=0.1, refresh_timeout_s=5.0)
    s.submit(req("a", t=0.02, captured=0.0), 0.5)
    s.submit(req("b", t=0.01, captured=0.0), 0.5)   # older arrival: FIFO selects b first
    two = [edge(iid="e0", max_batch=1), edge(iid="e1", max_batch=1)]
    assert s.schedule(0.5, two).refresh_request_ids == ["b", "a"]
    s.submit(req("c", t=0.6), 0.6)
    assert s.schedule(0.6, [edge(iid="e2", max_batch=1)]).dispatched_request_ids == ["c"]
    skipped_before = s.skipped("b")
    # Fresh observations arrive, a's first (submission order a, b).
    s.submit(Request("a", "robot_a", "a", 0, 0.02, 0.7, None, 0, P, refresh=True), 0.7)
    s.submit(Request("b", "robot_b", "b", 0, 0.01, 0.71, None, 0, P, refresh=True), 0.71)
    assert s.skipped("b") == skipped_before >= 1
    d = s.schedule(0.72, [edge(iid="e3", max_batch=1)])
    assert d.dispatched_request_ids == ["b"]


def test_bad_input_is_rejected_counted_and_never_raises():
    s = make_scheduler("wait_ratio")
    inst = [edge()]
    bad = [
        req(""),
        Request("x", "r", "t", -1, 0.0, 0.0, None, 0, P),
        Request("x", "r", "t", 0, math.nan, 0.0, None, 0, P),
        Request("x", "r", "t", 0, 0.0, 0.0, None, -3, P),
        Request("x", "r", "t", 0, 0.0, 0.0, None, 0, 0.0),
        "not a request",
    ]
    for b in bad:
        res = s.submit(b, 0.0)
        assert not res.accepted and res.reason
    assert s.submit(req("a", task="t"), 0.0).accepted
    assert not s.submit(req("a", task="other"), 0.0).accepted           # duplicate id
    s.schedule(0.0, inst)
    assert not s.submit(req("a0", task="t", rnd=0), 0.1).accepted       # round already served
    s.on_completed("nonexistent", 0.2, 0.1)                             # ignored, counted
    st = s.stats()
    assert st["rejected"] == 8 and st["unknown_completion"] == 1
    assert sum(st["rejected_by_reason"].values()) == 8


def test_newer_round_supersedes_a_queued_one():
    s = make_scheduler("fifo")
    s.submit(req("t#1", task="t", rnd=1), 0.0)
    res = s.submit(req("t#2", task="t", rnd=2), 0.1)
    assert res.accepted and [r.request_id for r in res.superseded] == ["t#1"] and s.pending() == 1
    assert not s.submit(req("t#1b", task="t", rnd=1), 0.2).accepted
    assert [r.request_id for r in s.on_task_finished("t")] == ["t#2"]
    assert s.pending() == 0


@pytest.mark.parametrize("name", ["fifo", "autellix", "wait_ratio"])
def test_requeued_work_goes_first_through_the_scheduler(name):
    """An instance lost with a batch: its requests go back to the scheduler's queue (the only
    queue), ahead of everything queued meanwhile, beside (not replaced by) their task's next
    round, and are placed on an instance like any other work."""
    s = make_scheduler(name)
    s.submit(req("a#1", task="a", rnd=1), 0.0)
    d = s.schedule(0.01, [edge(iid="e0")])
    assert d.dispatched_request_ids == ["a#1"]
    s.submit(req("b#1", task="b", rnd=1, t=0.02), 0.02)
    s.submit(req("a#2", task="a", rnd=2, t=0.03), 0.03)
    assert s.requeue("a#1", 0.04) and not s.requeue("a#1", 0.04)  # no longer in flight
    assert s.pending() == 3 and s.stats()["requeued_waiting"] == 1
    assert sorted(r.request_id for r in s.queued()) == ["a#1", "a#2", "b#1"]
    d = s.schedule(0.05, [edge(iid="e1", max_batch=1)])
    assert d.dispatched_request_ids == ["a#1"] and d.refresh_request_ids == []
    assert s.stats()["requeued_waiting"] == 0
    s.on_completed("a#1", 0.1, 0.05)
    assert not s.requeue("zz", 0.1) and s.stats()["requeue_refused"] == 2


def test_requeue_of_a_finished_task_is_refused_and_finishing_drops_requeued_work():
    s = make_scheduler("fifo")
    for t in ("a", "b"):
        s.submit(req(f"{t}#1", task=t, rnd=1), 0.0)
    s.schedule(0.01, [edge(iid="e0")])
    assert s.requeue("a#1", 0.02)
    assert [r.request_id for r in s.on_task_finished("a")] == ["a#1"]
    s.on_task_finished("b")
    assert not s.requeue("b#1", 0.03) and s.pending() == 0


def test_abandoned_task_histories_are_forgotten():
    s = make_scheduler("fifo", task_ttl_s=10.0)
    inst = [edge()]
    s.submit(req("gone#0", task="gone"), 0.0)
    s.schedule(0.0, inst)
    s.on_completed("gone#0", 0.1, 0.1)              # the robot never comes back
    s.submit(req("live#0", task="live", t=1.0), 1.0)
    for k in range(1, 1100):                         # the sweep runs every 1024 decisions
        s.schedule(1.0 + k * 0.01, [edge(busy_until=100.0)])
    st = s.stats()
    assert st["tasks_forgotten"] == 1 and st["tasks"] == 1 and st["pending"] == 1


def test_a_requeued_older_round_does_not_reopen_a_newer_served_round():
    """Round 6 was dispatched after round 5; 5 is lost and served again: a late refresh of 6
    must still be refused as already served (otherwise 6 would be answered twice)."""
    s = make_scheduler("fifo")
    s.submit(req("t#5", task="t", rnd=5), 0.0)
    s.schedule(0.01, [edge(iid="e0")])
    s.submit(req("t#6", task="t", rnd=6, t=0.02), 0.02)
    s.schedule(0.03, [edge(iid="e1")])
    assert s.requeue("t#5", 0.04)
    assert s.schedule(0.05, [edge(iid="e2")]).dispatched_request_ids == ["t#5"]
    late = s.submit(req("t#6b", task="t", rnd=6, t=0.06), 0.06)
    assert not late.accepted and "already served" in late.reason

