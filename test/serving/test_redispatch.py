"""Requests lost with their instance (serving.redispatch) through the real FIFO scheduler: queued
again first in line, at most MAX_DISPATCH_ATTEMPTS dispatches each, never for a task that ended,
work that never ran not counted, and every outcome in the failover counters."""
from collections import Counter

from physai_ros.scheduler import EngineInstanceInfo, LatencyProfile, Request, make_scheduler
from physai_ros.serving.redispatch import MAX_DISPATCH_ATTEMPTS, Redispatch

INSTANCE = EngineInstanceInfo("engine_0", "edge", LatencyProfile.from_pairs([[1, 0.05], [4, 0.1]]))


def dispatched(scheduler, now, robots=("r0",)):
    """Submit one request per robot and dispatch them all; returns the requests in flight."""
    reqs = [Request(f"{r}#2#1", r, f"{r}/task", 2, now, now, None, 0, 0.02) for r in robots]
    for req in reqs:
        assert scheduler.submit(req, now).accepted
    decision = scheduler.schedule(now, [INSTANCE])
    for batch in decision.batches:
        scheduler.on_dispatched(batch, now)
    assert sum(len(b.request_ids) for b in decision.batches) == len(reqs)
    return reqs


def test_a_lost_request_goes_back_to_the_queue_until_its_attempts_run_out():
    s, failover = make_scheduler("fifo"), Counter()
    r = Redispatch(s, failover)
    (req,) = dispatched(s, 1.0)
    for attempt in range(1, MAX_DISPATCH_ATTEMPTS):
        again, given_up = r.retry([req], now=1.0 + attempt)
        assert again == {req.request_id} and given_up == [] and s.pending() == 1
        d = s.schedule(2.0 + attempt, [INSTANCE])
        s.on_dispatched(d.batches[0], 2.0 + attempt)
    again, given_up = r.retry([req], now=9.0)
    assert again == set() and given_up == [(req, f"after {MAX_DISPATCH_ATTEMPTS} instances")]
    assert failover == Counter(redispatched=MAX_DISPATCH_ATTEMPTS - 1, redispatch_exhausted=1)


def test_work_that_never_ran_is_not_a_dispatch_and_is_never_given_up_for_it():
    s = make_scheduler("fifo")
    r = Redispatch(s, Counter(), max_attempts=1)
    (req,) = dispatched(s, 1.0)
    again, given_up = r.retry([req], now=2.0, limit=False, count=False)
    assert again == {req.request_id} and not given_up


def test_a_request_whose_task_ended_is_given_up_and_done_forgets_it():
    s, failover = make_scheduler("fifo"), Counter()
    r = Redispatch(s, failover)
    (req,) = dispatched(s, 1.0)
    s.on_task_finished(req.task_id)
    again, given_up = r.retry([req], now=2.0)
    assert again == set() and given_up == [(req, "its task ended meanwhile")]
    r.done(req.request_id)
    assert failover["redispatched"] == 0
