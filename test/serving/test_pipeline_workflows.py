"""A robot's pipeline steps cut into Kairos workflows from the answers the server sees
(serving.pipeline.workflows): remaining latencies to each step's end, steps ended by the
planner's next subgoal or the monitor's verdict, and steps that never end dropped."""
import pytest

from physai_ros.scheduler.agents import AgentLatencyProfiler
from physai_ros.scheduler.agents.workflow import WorkflowAnalyzer
from physai_ros.serving.pipeline.workflows import StepLedger


def ledger(stale_s=300.0):
    prof = AgentLatencyProfiler()
    return StepLedger(WorkflowAnalyzer(prof, record_single=False), stale_s), prof


def remaining(prof):
    return {a: sorted(round(float(x), 6) for x in v) for a, v in prof.remaining_samples().items()}


def test_a_step_from_the_planner_to_the_monitors_verdict_gives_each_question_its_remaining_work():
    steps, prof = ledger()
    assert not steps.answered("r0", "t/system2", "system2", 0.0, 1.0, "pick the red cube")
    assert not steps.answered("r0", "t/safety", "safety", 1.5, 1.6, "safe")
    assert not steps.answered("r0", "t/monitor", "monitor", 2.0, 2.5, "ongoing")
    assert steps.answered("r0", "t/monitor", "monitor", 4.0, 4.5, "Done.")  # the verdict ends the step
    assert remaining(prof) == {"t/system2": [4.5], "t/safety": [3.0], "t/monitor": [0.5, 2.5]}
    assert prof.single == {}  # single latencies are the caller's to record
    assert (steps.steps_completed, steps.open_steps()) == (1, 0)


def test_the_next_subgoal_ends_a_step_and_a_question_beside_the_planner_is_a_root_of_its_own():
    steps, prof = ledger()
    steps.answered("r0", "t/system2", "system2", 0.0, 1.0, "pick")
    steps.answered("r0", "t/safety", "safety", 0.5, 0.6, "safe")  # asked while the planner worked
    steps.answered("r0", "t/monitor", "monitor", 2.0, 2.5, "failed")  # ends the step
    steps.answered("r1", "t/system2", "system2", 0.0, 1.0, "place")
    steps.answered("r1", "t/safety", "safety", 1.0, 1.1, "safe")
    assert steps.answered("r1", "t/system2", "system2", 3.0, 4.0, "replan")  # a replan ends r1's step
    assert remaining(prof) == {"t/system2": [1.1, 2.5], "t/safety": [0.1, 2.0], "t/monitor": [0.5]}
    assert steps.open_steps() == 1  # r1's new step


def test_a_task_without_a_planner_has_steps_rooted_at_their_first_question():
    steps, prof = ledger()
    steps.answered("r0", "t/safety", "safety", 0.0, 0.1, "safe")
    steps.answered("r0", "t/monitor", "monitor", 1.0, 1.2, "done")
    steps.answered("r0", "t/safety", "safety", 2.0, 2.1, "safe")  # the next step
    assert remaining(prof) == {"t/safety": [1.2], "t/monitor": [0.2]} and steps.open_steps() == 1


@pytest.mark.parametrize("how", ["stale", "forget"])
def test_a_step_that_never_ends_is_dropped_unmeasured(how):
    steps, prof = ledger(stale_s=60.0)
    steps.answered("r0", "t/system2", "system2", 0.0, 1.0, "pick")
    steps.answered("r0", "t/monitor", "monitor", 2.0, 2.5, "ongoing")
    if how == "stale":
        steps.answered("r0", "t/safety", "safety", 100.0, 100.1, "safe")  # opens a new step
        assert steps.open_steps() == 1
    else:
        steps.forget("r0")
        assert steps.open_steps() == 0
    assert steps.steps_dropped == 1 and prof.remaining_samples() == {}
    assert steps.analyzer.open_workflows() == (1 if how == "stale" else 0)
