"""One queue per instance (scheduler.routed): without routes it is the policy alone; with routes
each instance serves only its robots; a route change moves queued rounds and histories with no
round lost or served twice; in-flight and lost rounds follow their robot."""
import random

from physai_ros.scheduler import EngineInstanceInfo, LatencyProfile, Request, make_scheduler
from physai_ros.scheduler.routed import RoutedScheduler

P = 0.05


def req(robot, rnd, t=0.0, n=0):
    return Request(f"{robot}#{rnd}#{n}", robot, f"{robot}/pick", rnd, t, t, None, 0, P)


def inst(iid, busy_until=0.0, max_batch=4):
    return EngineInstanceInfo(iid, "edge", LatencyProfile((1, 2, 4), (0.1, 0.1, 0.1)), 0.0, busy_until, max_batch)


def served(decision):
    return {b.instance_id: sorted(b.request_ids) for b in decision.batches}


def routed(routes=None, now=0.0):
    s = RoutedScheduler(make_scheduler("wait_ratio"))
    if routes:
        s.set_routes(routes, now)
        s.serve_lanes({iid: iid for iid in set(routes.values())})
    return s


def test_without_routes_it_decides_exactly_as_the_policy_alone():
    rng = random.Random(3)
    plain, wrapped = make_scheduler("wait_ratio"), RoutedScheduler(make_scheduler("wait_ratio"))
    rounds = {f"r{k}": 0 for k in range(6)}
    inflight: list[str] = []
    for step in range(200):
        now = step * 0.02
        robot = rng.choice(sorted(rounds))
        rounds[robot] += 1
        r = req(robot, rounds[robot], now)
        assert plain.submit(r, now) == wrapped.submit(r, now)
        infos = [inst("e0", busy_until=now + rng.choice([0, 0.05])), inst("e1", busy_until=now)]
        a, b = plain.schedule(now, infos), wrapped.schedule(now, infos)
        assert served(a) == served(b) and a.refresh_request_ids == b.refresh_request_ids
        for batch in a.batches:
            plain.on_dispatched(batch, now)
            wrapped.on_dispatched(batch, now)
            inflight += batch.request_ids
        while inflight and rng.random() < 0.6:
            rid = inflight.pop(0)
            plain.on_completed(rid, now, 0.05)
            wrapped.on_completed(rid, now, 0.05)
    assert plain.stats() == wrapped.stats()


def test_each_instance_serves_only_the_robots_routed_to_it():
    s = routed({"a": "e0", "b": "e0", "c": "e1"})
    for robot in "abc":
        assert s.submit(req(robot, 1), 0.0).accepted
    assert served(s.schedule(0.0, [inst("e0"), inst("e1")])) == {"e0": ["a#1#0", "b#1#0"], "e1": ["c#1#0"]}
    # Only e1 is idle: a's round waits for e0 even though e1 could run it.
    assert s.submit(req("a", 2), 0.1).accepted
    assert s.schedule(0.1, [inst("e0", busy_until=1.0), inst("e1")]).batches == []
    assert s.queued_by_lane() == {"": 0, "e0": 1, "e1": 0}


def test_a_standby_serves_the_queue_of_the_instance_it_stands_in_for():
    s = routed({"a": "e0", "c": "e1"})
    s.serve_lanes({"sb": "e0", "e1": "e1"})  # e0 is down, its standby serves its robots
    s.submit(req("a", 1), 0.0)
    s.submit(req("c", 1), 0.0)
    assert served(s.schedule(0.0, [inst("sb"), inst("e1")])) == {"sb": ["a#1#0"], "e1": ["c#1#0"]}


def test_a_route_change_moves_queued_rounds_and_history_with_none_lost_or_served_twice():
    s = routed({"a": "e0", "b": "e0"})
    s.submit(req("a", 1), 0.0)
    d = s.schedule(0.0, [inst("e0")])
    s.on_dispatched(d.batches[0], 0.0)
    s.on_completed("a#1#0", 0.1, 0.1)
    s.submit(req("a", 2, 0.2), 0.2)
    s.submit(req("b", 1, 0.2), 0.2)
    assert s.schedule(0.2, [inst("e0", busy_until=5.0)]).batches == []  # e0 busy: both wait there
    assert s.set_routes({"a": "e1", "b": "e0"}, 0.3) == ["a"]
    s.serve_lanes({"e0": "e0", "e1": "e1"})
    assert s.queued_by_lane() == {"": 0, "e0": 1, "e1": 1} and s.moves == {"robots": 3, "rounds": 1}  # 2 placed at first, a moved with its round
    assert served(s.schedule(0.3, [inst("e0", busy_until=5.0), inst("e1")])) == {"e1": ["a#2#0"]}
    # The history moved with it: a round a served already is refused in the new queue too.
    again = s.submit(req("a", 1, 0.4, n=1), 0.4)
    assert not again.accepted and "already served" in again.reason
    assert s.pending() == 1 and s.lane_of("a") == "e1" and s.lane_of("b") == "e0"


def test_a_round_in_flight_during_a_move_completes_and_a_lost_one_follows_its_robot():
    s = routed({"a": "e0"})
    s.submit(req("a", 1), 0.0)
    batch = s.schedule(0.0, [inst("e0")]).batches[0]
    s.on_dispatched(batch, 0.0)
    s.set_routes({"a": "e1"}, 0.05)
    s.serve_lanes({"e1": "e1"})
    # e0 is lost with the round: it goes back first in line, on a's instance now.
    assert s.requeue("a#1#0", 0.1)
    assert s.queued_by_lane() == {"": 0, "e0": 0, "e1": 1}
    s.submit(req("a", 2, 0.1), 0.1)
    d = s.schedule(0.1, [inst("e1", max_batch=1)])
    assert served(d) == {"e1": ["a#1#0"]}  # the lost round ahead of the newer one
    s.on_dispatched(d.batches[0], 0.1)
    s.on_completed("a#1#0", 0.2, 0.1)
    assert s.stats().get("unknown_completion", 0) == 0 and s.pending() == 1


def test_a_finished_task_is_dropped_from_every_queue():
    s = routed({"a": "e0", "c": "e1"})
    s.submit(req("a", 1), 0.0)
    s.submit(req("c", 1), 0.0)
    assert [r.request_id for r in s.on_task_finished("a/pick")] == ["a#1#0"]
    assert s.pending() == 1 and s.queued()[0].robot_id == "c"
