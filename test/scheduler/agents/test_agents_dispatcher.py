"""Kairos §6 memory-aware time-slot dispatcher and the round-robin baseline."""
import pytest

from physai_ros.scheduler.agents.dispatcher import (
    InstanceSpec,
    MemoryDemand,
    RoundRobinDispatcher,
    TimeSlotDispatcher,
)


def _d(prompt, rate, expected):
    return MemoryDemand(prompt_bytes=prompt, decode_bytes_per_s=rate, expected_s=expected)


def test_request_slots_follow_the_linear_memory_model():
    disp = TimeSlotDispatcher([InstanceSpec("a", 100.0)], slot_s=0.5)
    slots = disp.request_slots(_d(10.0, 20.0, 1.2), now_s=0.3)     # ends at 1.5
    # each slot holds m at its end (or at the request's end): 10 + 20 * (t - 0.3)
    assert slots == pytest.approx({0: 14.0, 1: 24.0, 2: 34.0})


def test_refuses_an_instance_whose_slot_would_overflow():
    disp = TimeSlotDispatcher([InstanceSpec("a", 100.0), InstanceSpec("b", 100.0)])
    assert disp.dispatch(1, _d(50.0, 40.0, 1.0), 0.0).instance == "a"   # a: 70, 90
    # a second such request only fits b; a third fits nowhere and stays queued.
    assert disp.dispatch(2, _d(50.0, 40.0, 1.0), 0.0).instance == "b"
    assert disp.evaluate(_d(50.0, 40.0, 1.0), 0.0) == {"a": None, "b": None}
    assert disp.dispatch(3, _d(50.0, 40.0, 1.0), 0.0) is None
    # a small request still fits (only the span's slots are checked against capacity)
    assert disp.dispatch(4, _d(5.0, 0.0, 0.4), 0.0) is not None


def test_picks_the_lowest_expected_peak():
    disp = TimeSlotDispatcher([InstanceSpec("a", 1000.0), InstanceSpec("b", 1000.0)])
    disp.dispatch(1, _d(100.0, 0.0, 10.0), 0.0)                 # a: 100 for 10 s
    disp.dispatch(2, _d(300.0, 0.0, 1.0), 0.0)                  # lower peak on b (300 < 400)
    assert disp.instance_of(2) == "b"
    # a long request: a's peak 100 + 50 = 150 < b's 300 + 50: goes to a, though b frees sooner
    p = disp.dispatch(3, _d(50.0, 0.0, 10.0), 0.0)
    assert p.instance == "a" and p.expected_peak_bytes == pytest.approx(150.0)


def test_frees_remaining_slots_on_early_completion():
    disp = TimeSlotDispatcher([InstanceSpec("a", 100.0)])
    disp.dispatch(1, _d(60.0, 0.0, 5.0), 0.0)
    assert disp.dispatch(2, _d(60.0, 0.0, 1.0), 1.0) is None    # 120 > 100 while 1 runs
    disp.complete(1, 1.2)                                       # done 3.8 s early
    assert all(k < 2 for k in disp.usage("a"))                   # only past/current slots remain
    assert disp.dispatch(2, _d(60.0, 0.0, 1.0), 1.5).instance == "a"


def test_suspends_an_instance_after_oom_until_it_drains():
    disp = TimeSlotDispatcher([InstanceSpec("a", 1000.0), InstanceSpec("b", 1000.0)])
    disp.dispatch(1, _d(10.0, 0.0, 1.0), 0.0)
    disp.dispatch(2, _d(10.0, 0.0, 1.0), 0.0)
    assert {disp.instance_of(1), disp.instance_of(2)} == {"a", "b"}
    oom = disp.instance_of(1)
    disp.report_oom(oom, 0.5)
    assert disp.suspended() == {oom}
    for i in range(3, 6):
        assert disp.dispatch(i, _d(1.0, 0.0, 0.1), 0.5).instance != oom
    disp.complete(1, 2.0)                                        # drained
    assert disp.suspended() == set()
    disp.report_oom(oom, 2.0)                                    # idle: nothing to drain
    assert disp.suspended() == set()


def test_round_robin_ignores_memory_and_respects_eligibility():
    rr = RoundRobinDispatcher([InstanceSpec("a", 1.0), InstanceSpec("b", 1.0), InstanceSpec("c", 1.0)])
    got = [rr.dispatch(i, _d(1e9, 1e9, 9.0), 0.0).instance for i in range(4)]
    assert got == ["a", "b", "c", "a"]
    assert rr.dispatch(9, _d(1, 0, 1), 0.0, eligible={"c"}).instance == "c"
    assert rr.dispatch(10, _d(1, 0, 1), 0.0, eligible=set()) is None


def test_resume_lifts_the_suspension_before_the_instance_drains():
    disp = TimeSlotDispatcher([InstanceSpec("a", 1000.0)])
    disp.dispatch(1, _d(10.0, 0.0, 5.0), 0.0)
    disp.report_oom("a", 1.0)
    assert disp.dispatch(2, _d(1.0, 0.0, 0.1), 1.0) is None         # suspended, request 1 still runs
    disp.resume("a")                                                 # preempted backlog re-admitted
    assert disp.dispatch(2, _d(1.0, 0.0, 0.1), 1.0).instance == "a"
