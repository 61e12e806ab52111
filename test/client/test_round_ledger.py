"""The robot's own round ledger: sent, answered, lost, late, orphaned, duplicated."""
import dataclasses

import pytest

from physai_ros.client.round_ledger import KEEP_IDS, RoundLedger
from physai_ros.protocol.chunk import STATUS_ERROR, STATUS_OK, STATUS_REFUSED

from observation_builders import make_image
from test_robot_client_core import client, ok_chunk, register


def test_every_answer_kind_closes_a_round_and_a_refetch_is_not_a_new_round():
    led = RoundLedger(lost_after_s=5.0)
    for rid in (2, 4, 6):
        led.on_sent(rid, 0.0)
    led.on_sent(4, 0.5)  # the server asked for a fresher observation of round 4
    led.on_answer(2, STATUS_OK, "", 1.0)
    led.on_answer(4, STATUS_REFUSED, "stale_timestamp: 2.3 s old", 1.0)
    led.on_answer(6, STATUS_ERROR, "engine_error: boom", 1.0)
    s = led.summary(100.0)
    assert (s.sent, s.answered, s.pending, s.lost, s.duplicated) == (3, 3, 0, 0, 0)
    assert s.answers == {"ok": 1, "refused:stale_timestamp": 1, "error:engine_error": 1}


def test_an_unanswered_round_is_pending_then_lost_and_a_late_answer_takes_it_back():
    led = RoundLedger(lost_after_s=5.0)
    led.on_sent(2, 0.0)
    assert (led.summary(4.9).pending, led.summary(4.9).lost) == (1, 0)
    s = led.summary(5.1)
    assert (s.pending, s.lost, s.lost_ids) == (0, 1, (2,))
    led.on_answer(2, STATUS_OK, "", 7.0)
    s = led.summary(8.0)
    assert (s.lost, s.answered, s.answered_late, s.lost_ids) == (0, 1, 1, ())


def test_two_ok_answers_for_one_round_are_a_duplicate_an_unknown_round_is_not_an_answer():
    led = RoundLedger(lost_after_s=5.0)
    led.on_sent(2, 0.0)
    for _ in range(3):
        led.on_answer(2, STATUS_OK, "", 1.0)
    led.on_answer(99, STATUS_OK, "", 1.0)
    s = led.summary(2.0)
    assert (s.answered, s.duplicated, s.duplicated_ids, s.unknown_answers) == (1, 1, (2,), 1)


def test_rounds_held_by_a_replaced_server_are_orphaned_not_lost():
    led = RoundLedger(lost_after_s=5.0)
    led.on_sent(2, 0.0)
    led.on_sent(4, 0.0)
    led.on_server_replaced()
    led.on_answer(4, STATUS_OK, "", 1.0)  # the old server's answer came through after all
    s = led.summary(60.0)
    assert (s.pending, s.lost, s.orphaned, s.answered) == (0, 0, 1, 1)


def test_memory_stays_bounded_over_a_long_run():
    led = RoundLedger(lost_after_s=1.0)
    for k in range(5 * KEEP_IDS):
        rid = 2 * k
        led.on_sent(rid, float(k))
        if k % 2:
            led.on_answer(rid, STATUS_OK, "", float(k))
    s = led.summary(1e9)
    assert s.sent == 5 * KEEP_IDS and s.lost == s.sent - s.answered == 5 * KEEP_IDS // 2
    assert len(led._ok_answers) <= KEEP_IDS and len(led._lost) <= KEEP_IDS and len(s.lost_ids) == 10


def test_lost_after_must_be_positive():
    with pytest.raises(ValueError, match="lost_after_s"):
        RoundLedger(lost_after_s=0.0)


def test_the_client_core_keeps_its_ledger(fleet):
    c = client(fleet)
    register(c, "A")
    o1 = c.tick(10.0).observation
    c.on_chunk(ok_chunk(c, o1.round_id, 10.0), 10.05)
    c.on_chunk(ok_chunk(c, o1.round_id, 10.0), 10.06)  # delivered twice
    c.on_chunk(dataclasses.replace(ok_chunk(c, o1.round_id, 10.0), robot_id="robot_9"), 10.06)  # foreign
    for v in range(c.robot.num_views):
        c.on_image(v, make_image(), 11.0)
    o2 = c.tick(11.0).observation
    assert o2 is not None
    register(c, "B")  # a restarted server never saw round o2
    s = c.ledger.summary(100.0)
    assert (s.sent, s.answered, s.duplicated, s.orphaned, s.lost, s.unknown_answers) == (2, 1, 1, 1, 0, 0)
