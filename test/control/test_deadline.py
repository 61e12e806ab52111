"""DeadlineMonitor: SLO misses, the three fallbacks, escalation and operator reset."""
import math
from types import SimpleNamespace

import pytest

from physai_ros.control.deadline import (ActionKind, DeadlineConfig, DeadlineMonitor,
                                         DeadlineState, Fallback)


def mon(fallback, slo=0.5, n=3):
    return DeadlineMonitor(DeadlineConfig(slo_s=slo, fallback=Fallback(fallback),
                                          max_consecutive_misses=n))


def kinds(actions):
    return [a.kind for a in actions]


@pytest.mark.parametrize("fb", [f.value for f in Fallback])
def test_on_time_chunk_is_executed_and_nothing_fires(fb):
    m = mon(fb)
    m.on_request(1, capture_time=10.0)
    assert m.check(10.4) == []
    v = m.on_chunk(1, 10.45)
    assert v.execute and not v.late and v.reason == "on_time"
    assert v.latency_s == pytest.approx(0.45)
    assert m.state is DeadlineState.NOMINAL and m.awaited_round is None
    assert m.check(20.0) == []  # nothing awaited


def test_hold_stops_waits_and_executes_the_late_chunk():
    m = mon("hold")
    m.on_request(1, 10.0)
    acts = m.check(10.5)
    assert kinds(acts) == [ActionKind.HOLD] and acts[0].round_id == 1
    assert acts[0].consecutive_misses == 1 and "SLO" in acts[0].detail
    assert m.state is DeadlineState.DEGRADED
    assert m.check(10.7) == []  # re-armed one SLO later, not every tick
    v = m.on_chunk(1, 10.8)
    assert v.execute and v.late and v.actions == ()  # the miss was already counted
    assert m.consecutive_misses == 1 and m.total_misses == 1


def test_use_last_plan_keeps_executing():
    m = mon("use_last_plan")
    m.on_request(1, 10.0)
    assert kinds(m.check(10.6)) == [ActionKind.CONTINUE]
    assert m.on_chunk(1, 10.9).execute


def test_stop_and_resend_gives_up_and_discards_the_late_answer():
    m = mon("stop_and_resend")
    m.on_request(1, 10.0)
    acts = m.check(10.5)
    assert kinds(acts) == [ActionKind.HOLD, ActionKind.RESEND]
    assert m.awaited_round is None and m.check(11.0) == []
    m.on_request(2, 10.5)
    v = m.on_chunk(1, 10.6)
    assert not v.execute and v.late and v.reason == "given_up"
    v = m.on_chunk(2, 10.7)
    assert v.execute and v.reason == "on_time"
    assert m.consecutive_misses == 0 and m.state is DeadlineState.NOMINAL


def test_late_chunk_before_any_check_counts_the_miss_and_applies_the_fallback():
    m = mon("stop_and_resend")
    m.on_request(1, 10.0)
    v = m.on_chunk(1, 10.7)
    assert not v.execute and v.late
    assert kinds(v.actions) == [ActionKind.HOLD, ActionKind.RESEND]
    assert m.total_misses == 1
    m2 = mon("hold")
    m2.on_request(1, 10.0)
    v = m2.on_chunk(1, 10.7)
    assert v.execute and kinds(v.actions) == [ActionKind.HOLD] and m2.total_misses == 1


@pytest.mark.parametrize("fb", [f.value for f in Fallback])
def test_consecutive_misses_escalate_to_stopped_until_operator_reset(fb):
    m = mon(fb, slo=0.5, n=3)
    t, rnd = 10.0, 0
    escalated = None
    for _ in range(3):
        if m.awaited_round is None:  # stop_and_resend gave up: the client resends
            rnd += 1
            m.on_request(rnd, t)
        t += 0.5
        acts = m.check(t)
        if ActionKind.ESCALATE in kinds(acts):
            escalated = acts
    assert escalated is not None and kinds(escalated) == [ActionKind.HOLD, ActionKind.ESCALATE]
    assert "operator" in escalated[-1].detail
    assert m.state is DeadlineState.STOPPED and not m.may_send()
    assert m.check(t + 10) == []
    v = m.on_chunk(rnd, t + 0.1)
    assert not v.execute and v.reason == "stopped"
    m.operator_reset()
    assert m.state is DeadlineState.NOMINAL and m.may_send() and m.consecutive_misses == 0
    m.on_request(rnd + 1, 100.0)
    assert m.on_chunk(rnd + 1, 100.1).execute


def test_an_on_time_chunk_resets_the_consecutive_count():
    m = mon("stop_and_resend", n=2)
    m.on_request(1, 0.0)
    m.check(0.5)
    m.on_request(2, 0.5)
    assert m.on_chunk(2, 0.6).execute
    m.on_request(3, 1.0)
    assert kinds(m.check(1.5)) == [ActionKind.HOLD, ActionKind.RESEND]  # 1 miss, not 2
    assert m.state is DeadlineState.DEGRADED


def test_unexpected_chunks_are_discarded():
    m = mon("hold")
    assert m.on_chunk(5, 1.0).reason == "unexpected"
    m.on_request(6, 1.0)
    assert not m.on_chunk(5, 1.1).execute
    assert m.discarded_chunks == 2


def test_a_new_request_gives_up_the_old_one():
    m = mon("hold")
    m.on_request(1, 0.0)
    m.on_request(2, 0.2)
    v = m.on_chunk(1, 0.3)
    assert v.reason == "given_up" and v.execute  # hold/use_last_plan execute late answers
    assert m.awaited_round == 2


def test_config_from_fleet_task_and_bad_values():
    task = SimpleNamespace(slo_ms=250, fallback="use_last_plan", max_consecutive_slo_violation=4)
    cfg = DeadlineConfig.from_task(task)
    assert cfg == DeadlineConfig(0.25, Fallback.USE_LAST_PLAN, 4)
    assert DeadlineConfig(0.1, "hold").fallback is Fallback.HOLD
    with pytest.raises(ValueError, match="hold, stop_and_resend, use_last_plan"):
        DeadlineConfig(0.1, "panic")
    with pytest.raises(ValueError, match="slo"):
        DeadlineConfig(math.nan)
    with pytest.raises(ValueError, match="max_consecutive_misses"):
        DeadlineConfig(0.1, "hold", 0)


def test_config_from_the_shipped_fleet_yaml():
    from physai_ros.config.fleet import load_fleet

    fleet = load_fleet()
    for robot in fleet.robots:
        cfg = DeadlineConfig.from_task(robot.task)
        assert cfg.slo_s == pytest.approx(robot.task.slo_ms / 1000.0)
        assert cfg.fallback.value == robot.task.fallback


@pytest.mark.parametrize("fb", [f.value for f in Fallback])
def test_slow_first_rounds_do_not_stop_the_robot_for_good(fb):
    """A fresh server's first rounds are slow: within the start-up grace misses run the fallback
    and are counted but never escalate, an on-time chunk in between included; once the grace has
    passed three misses in a row stop the robot as before."""
    m = DeadlineMonitor(DeadlineConfig(slo_s=0.5, fallback=Fallback(fb), max_consecutive_misses=3,
                                       startup_grace_s=30.0))
    t, rnd = 0.0, 0
    for _ in range(10):  # ten slow rounds in the first 5 s
        if m.awaited_round is None:
            rnd += 1
            m.on_request(rnd, t)
        t += 0.5
        acts = m.check(t)
        assert ActionKind.ESCALATE not in kinds(acts)
        assert ActionKind.HOLD in kinds(acts) or ActionKind.CONTINUE in kinds(acts)
    assert m.startup_misses == 10 and m.total_misses == 10 and m.consecutive_misses == 0
    assert "start-up" in acts[0].detail and m.may_send()
    rnd += 1
    m.on_request(rnd, t)
    assert m.on_chunk(rnd, t + 0.1).reason == "on_time"
    for _ in range(6):  # slow again right after one lucky answer: still the start-up
        if m.awaited_round is None:
            rnd += 1
            m.on_request(rnd, t)
        t += 0.5
        assert ActionKind.ESCALATE not in kinds(m.check(t))
    assert m.startup_misses == 16 and m.state is not DeadlineState.STOPPED
    t = 30.0  # the grace has passed
    escalated = False
    for _ in range(3):
        if m.awaited_round is None:
            rnd += 1
            m.on_request(rnd, t)
        t += 0.5
        escalated = escalated or ActionKind.ESCALATE in kinds(m.check(t))
    assert escalated and m.state is DeadlineState.STOPPED and m.startup_misses == 16


def test_a_server_never_on_time_escalates_once_the_grace_has_passed():
    m = DeadlineMonitor(DeadlineConfig(slo_s=1.0, fallback=Fallback.HOLD, max_consecutive_misses=3,
                                       startup_grace_s=5.0))
    m.on_request(1, 0.0)
    t, escalated_at = 0.0, None
    while escalated_at is None and t < 20:
        t += 1.0
        if ActionKind.ESCALATE in kinds(m.check(t)):
            escalated_at = t
    # Misses at 1..4 s are start-up misses; from 5 s on they count: the third at 7 s stops it.
    assert escalated_at == 7.0 and m.startup_misses == 4
    with pytest.raises(ValueError, match="startup_grace_s"):
        DeadlineConfig(0.1, "hold", 3, -1.0)
