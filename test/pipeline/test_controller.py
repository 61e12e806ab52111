"""PipelineController: exact decisions and counts for each rule of docs/pipelines.md "Semantics".

Times are seconds on an explicit clock. The INSPECT task (pipeline_helpers): System 2 every 2
System 1 predictions (SLO 1 s, use_last_plan), safety at 2 Hz (SLO 0.4 s, stop_and_replan),
monitor at 0.5 Hz (SLO 1 s, stop_and_resend), 2 task retries, 2 safety replans, 3 SLO
violations."""
from __future__ import annotations

import pytest

from physai_ros.pipeline.controller import PipelineController
from physai_ros.pipeline.decisions import (Acknowledged, DropPlan, EndTask, Escalate, GraspLost, Hold, Replan,
                                           ResetEpisode, Resume, SetPrompt, kinds)

from pipeline_helpers import err, ok, pipeline_config


def started(**changes) -> tuple[PipelineController, dict[str, int]]:
    """A controller started at t=0 whose first step asked every component; returns it and the
    query ids by component."""
    c = PipelineController("robot_0", pipeline_config(**changes))
    c.start(0.0)
    step = c.step(0.0)
    return c, {q.component: q.query_id for q in step.queries}


def planned(**changes) -> tuple[PipelineController, dict[str, int]]:
    """As started(), with the first subgoal accepted and safety and monitor answered at t=0.1."""
    c, ids = started(**changes)
    if "system2" in ids:
        c.on_answer(ids["system2"], ok("pick the red cube"), 0.1)
    c.on_answer(ids["safety"], ok("safe"), 0.1)
    c.on_answer(ids["monitor"], ok("ongoing"), 0.1)
    return c, ids


def test_start_holds_for_the_first_plan_and_asks_every_component():
    c = PipelineController("robot_0", pipeline_config())
    assert c.start(0.0) == [Hold("system2", "awaiting first plan")]
    step = c.step(0.0)
    assert step.decisions == ()
    assert [(q.query_id, q.component, q.asked_at, q.deadline) for q in step.queries] == [
        (1, "system2", 0.0, 1.0), (2, "safety", 0.0, 0.4), (3, "monitor", 0.0, 1.0)]
    assert step.queries[0].question == "next subgoal for: inspect the package"
    assert c.held and c.in_flight == {"system2": 1, "safety": 2, "monitor": 3}
    assert c.step(0.1).queries == ()  # nothing new is due, nothing is asked twice


def test_a_task_without_system2_starts_unheld_on_its_prompt():
    c = PipelineController("robot_0", pipeline_config(components__system2=None,
                                                       pipeline__system2_to_system1_call_ratio=None))
    assert c.start(0.0) == []
    assert not c.held and c.system1_prompt == "inspect the package"
    assert [q.component for q in c.step(0.0).queries] == ["safety", "monitor"]


def test_subgoal_handoff_and_the_call_ratio():
    c, ids = started()
    c.on_answer(ids["safety"], ok("safe"), 0.1)
    c.on_answer(ids["monitor"], ok("ongoing"), 0.1)
    assert c.on_answer(ids["system2"], ok(" pick the red cube\n"), 0.5) == [SetPrompt("pick the red cube", 1),
                                                                             Resume()]
    assert c.system1_prompt == "pick the red cube" and not c.held
    c.on_system1_prediction(1.0)
    step = c.step(1.0)
    assert [q.component for q in step.queries] == ["safety"]  # 1 of 2 predictions: no System 2 yet
    c.on_answer(step.queries[0].query_id, ok("safe"), 1.1)
    c.on_system1_prediction(1.5)
    assert [q.component for q in c.step(1.5).queries] == ["system2", "safety"]
    s2 = c.in_flight["system2"]
    assert c.system1_prompt == "pick the red cube"  # the last subgoal until the next answer
    assert c.on_answer(s2, ok("place it in bin A"), 2.0) == [SetPrompt("place it in bin A", s2)]
    assert c.system1_prompt == "place it in bin A"
    cc = c.counters.components["system2"]
    assert (cc.asked, cc.answered, cc.on_time, cc.late) == (2, 2, 2, 0)
    assert c.counters.system1_predictions == 2


def test_a_periodic_component_still_in_flight_is_skipped():
    c, ids = started(components__safety__slo_ms=800)  # longer than its 0.5 s period
    assert [q.component for q in c.step(0.5).queries] == []
    assert c.counters.components["safety"].skipped == 1
    c.on_answer(ids["safety"], ok("safe"), 0.7)
    assert [q.component for q in c.step(1.0).queries] == ["safety"]


def test_system2_use_last_plan_keeps_the_subgoal_and_takes_the_late_answer():
    c, ids = planned()
    c.on_system1_prediction(0.2)
    c.on_system1_prediction(0.3)
    s2 = c.step(0.3).queries[0].query_id
    assert c.check(1.31) == []  # missed (deadline 1.3): no hold, the last subgoal stays
    assert c.system1_prompt == "pick the red cube" and not c.held
    cc = c.counters.components["system2"]
    assert (cc.slo_misses, cc.consecutive_violations) == (1, 1)
    assert c.check(1.5) == []  # re-armed one SLO later: not missed again yet
    assert c.on_answer(s2, ok("place it in bin A"), 1.6) == [SetPrompt("place it in bin A", s2)]
    assert (cc.late, cc.answered, cc.consecutive_violations) == (1, 2, 1)  # a late answer does not reset the count
    assert cc.slo_attainment == pytest.approx(1 / 2)


def test_system2_stop_and_replan_gives_up_and_reasks():
    c, ids = planned(components__system2__fallback="stop_and_replan")
    c.on_system1_prediction(0.2)
    c.on_system1_prediction(0.3)
    s2 = c.step(0.3).queries[0].query_id
    step = c.step(1.31)
    assert kinds(step.decisions) == ["hold:system2", "drop_plan", "replan"]
    assert [q.component for q in step.queries] == ["system2", "safety"]  # re-asked at once
    assert c.subgoal is None and c.holds == {"system2": step.decisions[0].reason}
    assert c.on_answer(s2, ok("stale plan"), 1.4) == []  # given up: stale
    assert c.counters.components["system2"].stale == 1 and c.counters.replans == 1
    new = step.queries[0].query_id
    assert c.on_answer(new, ok("fresh plan"), 1.5) == [SetPrompt("fresh plan", new), Resume()]


def test_system2_hold_waits_one_slo_more_then_reasks_and_escalates_after_three():
    c, ids = planned(components__system2__fallback="hold")
    c.on_system1_prediction(0.2)
    c.on_system1_prediction(0.3)
    s2 = c.step(0.3).queries[0].query_id
    first = c.step(1.31)
    assert kinds(first.decisions) == ["hold:system2"]
    assert "system2" not in [q.component for q in first.queries]  # still awaited
    for q in first.queries:
        c.on_answer(q.query_id, ok({"safety": "safe", "monitor": "ongoing"}[q.component]), 1.35)
    assert c.check(2.0) == []
    second = c.step(2.32)  # one SLO after the first miss: the second, and System 2 is asked afresh
    assert kinds(second.decisions) == ["hold:system2"]
    again = [q for q in second.queries if q.component == "system2"]
    assert len(again) == 1 and again[0].query_id != s2
    assert c.on_answer(s2, ok("too late"), 2.4) == []  # given up: stale
    assert c.counters.components["system2"].stale == 1
    third = c.check(again[0].deadline + 0.01)
    assert kinds(third) == ["hold:escalation", "escalate"]
    assert third[1].source == "system2" and third[1].policy == "stop_and_call_human"
    assert third[1].reason.startswith("3 consecutive SLO violations of system2")
    assert c.counters.components["system2"].slo_misses == 3 and c.counters.escalations == 1
    assert c.on_answer(again[0].query_id, ok("too late"), 3.4) == []  # the latch gave it up


def test_a_lost_safety_query_is_asked_again_at_the_next_period_and_the_arm_holds_until_answered():
    # The first question never reaches the safety model (a subscriber not yet matched): the miss
    # holds the arm, the next period (0.5 s) asks afresh, and only an answer to that lets it go.
    c, ids = started(components__system2=None, pipeline__system2_to_system1_call_ratio=None,
                     components__safety__slo_ms=300, components__safety__fallback="hold")
    lost = ids["safety"]
    c.on_answer(ids["monitor"], ok("ongoing"), 0.1)
    miss = c.step(0.31)
    assert kinds(miss.decisions) == ["hold:safety"] and miss.queries == ()
    fresh = [q for q in c.step(0.5).queries if q.component == "safety"]
    assert len(fresh) == 1 and fresh[0].query_id != lost and c.held
    assert c.on_answer(lost, ok("safe"), 0.55) == [] and c.held  # given up: stale, still held
    assert c.on_answer(fresh[0].query_id, ok("safe"), 0.6) == [Resume()] and not c.held
    cc = c.counters.components["safety"]
    assert (cc.slo_misses, cc.stale, cc.on_time, cc.skipped, cc.consecutive_violations) == (1, 1, 1, 0, 0)


def test_hold_accepts_the_late_answer_and_resumes():
    c, ids = planned(components__system2__fallback="hold")
    c.on_system1_prediction(0.2)
    c.on_system1_prediction(0.3)
    s2 = c.step(0.3).queries[0].query_id
    c.check(1.31)
    assert c.on_answer(s2, ok("next"), 1.5) == [SetPrompt("next", s2), Resume()]


def test_monitor_stop_and_resend():
    c, ids = planned()
    m = c.step(2.0).queries  # safety and monitor are due again at 2.0
    assert [q.component for q in m] == ["safety", "monitor"]
    mon = m[1].query_id
    c.on_answer(m[0].query_id, ok("safe"), 2.1)
    step = c.step(3.01)
    assert kinds(step.decisions) == ["hold:monitor"]
    assert [q.component for q in step.queries] == ["safety", "monitor"]  # resent at once
    assert c.on_answer(mon, ok("done"), 3.05) == []  # the given-up query's answer is stale
    assert c.counters.components["monitor"].stale == 1 and c.counters.tasks_done == 0
    assert c.on_answer(step.queries[1].query_id, ok("ongoing"), 3.1) == [Resume()]


def test_unsafe_stops_drops_the_plan_and_replans():
    c, ids = planned()
    saf = c.step(0.5).queries[0].query_id
    out = c.on_answer(saf, ok("Unsafe."), 0.6)
    assert out == [Hold("safety", "unsafe"), DropPlan("safety: unsafe (1 in a row)"),
                   Replan("safety: unsafe (1 in a row)"), Hold("system2", "replanning")]
    assert c.subgoal is None and c.counters.safety_stops == 1 and c.counters.replans == 1
    step = c.step(0.6)
    assert [q.component for q in step.queries] == ["system2"]  # replanned at once
    assert c.on_answer(step.queries[0].query_id, ok("wait for the person to leave"), 0.7) == [
        SetPrompt("wait for the person to leave", step.queries[0].query_id)]  # still held by safety
    saf2 = c.step(1.0).queries[0].query_id
    assert c.on_answer(saf2, ok("safe"), 1.1) == [Resume()]
    assert c.counters.consecutive_unsafe == 0


def test_consecutive_unsafe_escalates_after_max_replans_and_safe_resets_the_count():
    c, ids = planned()
    t = 0.5

    def safety_says(text):
        nonlocal t
        q = [q for q in c.step(t).queries if q.component == "safety"][0]
        out = c.on_answer(q.query_id, ok(text), t + 0.1)
        t += 0.5
        return kinds(out)

    assert safety_says("unsafe") == ["hold:safety", "drop_plan", "replan", "hold:system2"]
    assert safety_says("safe") == []  # still held by system2 (replanning)
    assert safety_says("unsafe") == ["hold:safety", "drop_plan", "replan"]
    assert safety_says("unsafe") == ["hold:safety", "drop_plan", "replan"]  # 2 in a row: the 2nd replan
    assert safety_says("unsafe") == ["hold:escalation", "escalate"]  # the 3rd in a row: escalated
    assert (c.counters.safety_stops, c.counters.replans, c.counters.escalations) == (4, 3, 1)
    assert c.escalated.startswith("unsafe 3 times in a row")


def test_done_ends_the_task_and_starts_an_episode():
    c, ids = planned()
    c.on_system1_prediction(0.2)
    c.on_system1_prediction(0.3)
    s2 = c.step(0.3).queries[0].query_id
    mon = [q for q in c.step(2.0).queries if q.component == "monitor"][0].query_id
    assert c.on_answer(mon, ok("done"), 2.1) == [EndTask("monitor: done"), Hold("system2", "awaiting first plan")]
    assert c.counters.tasks_done == 1 and c.counters.episodes == 2 and c.subgoal is None
    assert c.on_answer(s2, ok("old episode's plan"), 2.2) == []  # given up at the episode start
    assert [q.component for q in c.step(2.2).queries] == ["system2"]


def test_failed_retries_then_escalates_and_the_latch_clears():
    c, ids = planned()
    t = 2.0
    results = []
    for _ in range(3):
        qs = {q.component: q.query_id for q in c.step(t).queries}
        if "system2" in qs:
            c.on_answer(qs["system2"], ok("pick the cube"), t)
        c.on_answer(qs["safety"], ok("safe"), t)
        results.append(c.on_answer(qs["monitor"], ok("failed"), t + 0.1))
        t += 2.0
    assert results[0] == [ResetEpisode(1, "monitor: failed (retry 1 of 2)"), Hold("system2", "awaiting first plan")]
    assert results[1] == [ResetEpisode(2, "monitor: failed (retry 2 of 2)"), Hold("system2", "awaiting first plan")]
    assert kinds(results[2]) == ["hold:escalation", "escalate"]
    esc = results[2][1]
    assert (esc.source, esc.reason, esc.policy) == ("monitor", "task failed 3 times (2 retries)", "stop_and_call_human")
    cnt = c.counters
    assert (cnt.retries, cnt.total_retries, cnt.task_failures, cnt.escalations, cnt.episodes) == (2, 2, 3, 1, 3)
    # Latched: nothing asked, nothing checked, a second escalation is not reported.
    assert c.step(20.0).queries == () and c.check(30.0) == []
    assert c.escalate("system1", "deadline", 30.0) == [] and cnt.escalations == 1
    out = c.acknowledge(31.0)
    assert out == [Acknowledged("task failed 3 times (2 retries)"),
                   DropPlan("acknowledged: a plan from before the stop is stale"),
                   Hold("system2", "awaiting a plan after acknowledge")]
    assert c.holds == {"system2": "awaiting a plan after acknowledge"}
    assert (cnt.retries, cnt.escalated) == (0, "")
    assert [q.component for q in c.step(31.0).queries] == ["system2", "safety", "monitor"]
    assert c.acknowledge(31.0) == []  # nothing latched


def test_a_lost_grasp_is_reported_and_acted_on_as_grasp_watch_on_lost_says():
    """ignore (the default): reported only; replan: the buffered plan is dropped, the subgoal
    kept (System 1 replans from the scene as it is); reset: a retry as for the monitor's
    "failed", escalating past max_task_retries; nothing but the report while escalated."""
    c, _ = planned()
    assert c.on_grasp_lost(1.0) == [GraspLost("ignore")] and c.counters.grasp_losses == 1
    assert not c.held and c.subgoal == "pick the red cube"

    c, _ = planned(task_retry__grasp_watch={"on_lost": "replan"})
    assert c.on_grasp_lost(1.0) == [GraspLost("replan"), DropPlan("monitor: grasp lost")]
    assert not c.held and c.subgoal == "pick the red cube" and c.counters.replans == 0

    c, _ = planned(task_retry__grasp_watch={"on_lost": "reset"})
    out = [c.on_grasp_lost(t) for t in (1.0, 2.0, 3.0)]
    assert out[0] == [GraspLost("reset"), ResetEpisode(1, "monitor: grasp lost (retry 1 of 2)"),
                      Hold("system2", "awaiting first plan")]
    assert kinds(out[2]) == ["grasp_lost", "hold:escalation", "escalate"]
    assert (c.counters.grasp_losses, c.counters.total_retries, c.counters.task_failures) == (3, 2, 0)
    assert c.on_grasp_lost(4.0) == [GraspLost("reset")]  # latched: reported, nothing more

    c, _ = planned(task_retry__grasp_watch=False)
    assert c.on_grasp_lost(1.0) == [GraspLost("ignore")]  # an adapter that reports one anyway


def test_unparseable_answers_are_counted_and_handled_like_misses():
    c, ids = planned()
    saf = c.step(0.5).queries[0].query_id
    out = c.on_answer(saf, ok("probably fine"), 0.6)
    assert kinds(out) == ["hold:safety", "drop_plan", "replan", "hold:system2"]
    cc = c.counters.components["safety"]
    assert cc.errors == {"unknown_label": 1} and cc.consecutive_violations == 1 and cc.slo_misses == 0
    assert cc.on_time == 2 and cc.answered == 1  # the first answer (planned()) and this one
    assert [q.component for q in c.step(0.6).queries] == ["system2", "safety"]  # safety re-asked at once


def test_unparseable_under_use_last_plan_reasks_without_holding():
    c, ids = planned()
    c.on_system1_prediction(0.2)
    c.on_system1_prediction(0.3)
    s2 = c.step(0.3).queries[0].query_id
    assert c.on_answer(s2, ok("line one\nline two"), 0.4) == []
    assert c.counters.components["system2"].errors == {"bad_charset": 1}
    assert c.system1_prompt == "pick the red cube" and not c.held
    assert [q.component for q in c.step(0.4).queries] == ["system2"]


def test_three_errors_in_a_row_escalate():
    c, ids = planned()
    t = 2.0
    outs = []
    for _ in range(3):
        qs = {q.component: q.query_id for q in c.step(t).queries}
        outs.append(kinds(c.on_answer(qs["monitor"], err("backend down"), t + 0.1)))
        t += 0.2
    assert outs == [["hold:monitor"], ["hold:monitor"], ["hold:escalation", "escalate"]]
    assert c.counters.components["monitor"].errors == {"backend_error": 3}


def test_an_on_time_valid_answer_resets_the_consecutive_count():
    c, ids = planned()
    t = 2.0
    qs = {q.component: q.query_id for q in c.step(t).queries}
    c.on_answer(qs["monitor"], err("x"), 2.1)
    qs = {q.component: q.query_id for q in c.step(2.1).queries}
    c.on_answer(qs["monitor"], ok("ongoing"), 2.2)
    assert c.counters.components["monitor"].consecutive_violations == 0


def test_periodic_asks_follow_freq_hz_without_catch_up():
    c, ids = planned()
    asked = []
    for k in range(1, 41):
        t = k * 0.1
        for q in c.step(t).queries:
            asked.append((round(t, 1), q.component))
            c.on_answer(q.query_id, ok("safe" if q.component == "safety" else "ongoing"), t)
    assert [t for t, comp in asked if comp == "safety"] == [0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0]
    assert [t for t, comp in asked if comp == "monitor"] == [2.0, 4.0]
    c2, _ = planned()
    qs = c2.step(7.3).queries  # a long gap: one ask, then the next boundary after now
    assert [q.component for q in qs] == ["safety", "monitor"]
    for q in qs:
        c2.on_answer(q.query_id, ok("safe" if q.component == "safety" else "ongoing"), 7.3)
    assert c2.step(7.4).queries == () and [q.component for q in c2.step(7.5).queries] == ["safety"]


def test_stale_and_unknown_answers():
    c, ids = planned()
    assert c.on_answer(ids["safety"], ok("unsafe"), 0.2) == []  # already answered
    assert c.on_answer(999, ok("safe"), 0.2) == []
    assert c.counters.components["safety"].stale == 1 and c.counters.unknown_answers == 1
    assert c.counters.safety_stops == 0


def test_external_escalation_latches_and_acknowledge_keeps_the_safety_hold():
    c, ids = planned(components__system2=None, pipeline__system2_to_system1_call_ratio=None)
    saf = c.step(0.5).queries[0].query_id
    c.on_answer(saf, ok("unsafe"), 0.6)
    out = c.escalate("system1", "3 consecutive SLO misses", 0.7)
    assert out == [Hold("escalation", "3 consecutive SLO misses"),
                   Escalate("system1", "3 consecutive SLO misses", "stop_and_call_human")]
    assert c.clear(1.0) == [Acknowledged("3 consecutive SLO misses"),
                            DropPlan("acknowledged: a plan from before the stop is stale")]
    assert c.holds == {"safety": "unsafe"}  # an acknowledgement does not make the workcell safe
    saf2 = c.step(1.0).queries[0]
    assert saf2.component == "safety"
    assert c.on_answer(saf2.query_id, ok("safe"), 1.1) == [Resume()]


def test_due_before_start_is_an_error():
    c = PipelineController("robot_0", pipeline_config())
    with pytest.raises(RuntimeError):
        c.due(0.0)
    c.start(0.0)
    with pytest.raises(RuntimeError):
        c.start(0.0)


# Every fallback of every component on one SLO miss: the decisions, whether the query is given up
# (re-asked at once) and whether a late answer is still taken.
@pytest.mark.parametrize("comp,fallback,decisions,given_up", [
    ("system2", "use_last_plan", [], False),
    ("system2", "hold", ["hold:system2"], False),
    ("system2", "stop_and_resend", ["hold:system2"], True),
    ("system2", "stop_and_replan", ["hold:system2", "drop_plan", "replan"], True),
    ("safety", "hold", ["hold:safety"], False),
    ("safety", "stop_and_resend", ["hold:safety"], True),
    ("safety", "stop_and_replan", ["hold:safety", "drop_plan", "replan", "hold:system2"], True),
    ("monitor", "hold", ["hold:monitor"], False),
    ("monitor", "stop_and_resend", ["hold:monitor"], True),
])
def test_every_fallback_on_a_miss(comp, fallback, decisions, given_up):
    c, ids = planned(**{f"components__{comp}__fallback": fallback})
    t = 2.0
    c.on_system1_prediction(t)
    c.on_system1_prediction(t)
    qs = {q.component: q for q in c.step(t).queries}
    assert set(qs) == {"system2", "safety", "monitor"}
    for other, q in qs.items():
        if other != comp:
            c.on_answer(q.query_id, ok({"system2": "next", "safety": "safe", "monitor": "ongoing"}[other]), t)
    miss = c.step(qs[comp].deadline + 0.01)
    assert kinds(miss.decisions) == decisions
    assert (comp in [q.component for q in miss.queries]) == given_up
    late = c.on_answer(qs[comp].query_id, ok({"system2": "late plan", "safety": "safe", "monitor": "ongoing"}[comp]),
                       qs[comp].deadline + 0.02)
    cc = c.counters.components[comp]
    assert (cc.slo_misses, cc.consecutive_violations) == (1, 1)
    if given_up:
        assert late == [] and cc.stale == 1
    else:
        assert cc.late == 1 and cc.answered == 2
        assert kinds(late) == (["set_prompt"] if comp == "system2" else []) + (["resume"] if decisions else [])


def test_unsafe_without_system2_drops_the_plan_and_holds_until_safe():
    c, ids = planned(components__system2=None, pipeline__system2_to_system1_call_ratio=None)
    q = c.step(0.5).queries[0]
    assert kinds(c.on_answer(q.query_id, ok("unsafe"), 0.6)) == ["hold:safety", "drop_plan", "replan"]
    assert c.system1_prompt == "inspect the package"  # no subgoal to drop
    q = c.step(1.0).queries[0]
    assert c.on_answer(q.query_id, ok("safe"), 1.1) == [Resume()]
