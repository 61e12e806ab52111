"""Kairos §4.2 workflow reconstruction and §4.3 remaining-latency samples from system identifiers."""
import pytest

from physai_ros.scheduler.agents.latency_dist import AgentLatencyProfiler
from physai_ros.scheduler.agents.workflow import ExecRecord, WorkflowAnalyzer, reconstruct


def _r(agent, up, s, e, msg="m1"):
    return ExecRecord(agent, msg, up, s, e)


def test_parallel_then_sequential_children_and_remaining_latency():
    # safety and monitor in parallel from the root, then a replan after safety; the planner is
    # called by safety only.  root [0,1], safety [1,1.2], monitor [1,1.5], planner [1.2,3.0]
    recs = [_r("planner", "safety", 1.2, 3.0), _r("root", None, 0.0, 1.0),
            _r("monitor", "root", 1.0, 1.5), _r("safety", "root", 1.0, 1.2)]
    wf = reconstruct("m1", recs)
    names = [r.agent for r in wf.records]
    assert names == ["root", "safety", "monitor", "planner"]   # by start, then end
    root, saf, mon, plan = range(4)
    assert wf.parent == (-1, root, root, saf)
    assert wf.groups[root] == ((saf, mon),)   # overlapping spans: one parallel stage
    assert wf.groups[saf] == ((plan,),)
    assert wf.end_s == 3.0
    assert [wf.remaining_latency(i) for i in range(4)] == pytest.approx([3.0, 2.0, 2.0, 1.8])
    assert wf.path_of(saf) == ("planner",)
    assert wf.path_of(root) == ("monitor", "safety", "planner")


def test_sequential_children_of_one_upstream_are_not_a_chain():
    # Fig. 11(c): A calls B, then C, then D sequentially; all three have upstream A.
    recs = [_r("A", None, 0, 1), _r("B", "A", 1, 2), _r("C", "A", 2, 3), _r("D", "A", 3, 4)]
    wf = reconstruct("m1", recs)
    assert wf.parent == (-1, 0, 0, 0)
    assert wf.groups[0] == ((1,), (2,), (3,))


def test_repeated_agent_links_to_latest_finished_upstream():
    # planner -> safety -> planner (replan) -> safety: each safety follows the planner before it.
    recs = [_r("planner", None, 0, 1), _r("safety", "planner", 1, 1.1),
            _r("planner", "safety", 1.1, 2), _r("safety", "planner", 2, 2.1)]
    wf = reconstruct("m1", recs)
    assert wf.parent == (-1, 0, 1, 2)


def test_missing_upstream_is_an_error():
    with pytest.raises(ValueError):
        reconstruct("m1", [_r("safety", "planner", 0, 1)])


def test_analyzer_feeds_profiler_and_weights_paths_by_frequency():
    prof = AgentLatencyProfiler()
    an = WorkflowAnalyzer(prof)
    # three workflows: safety alone twice (remaining 0.1), safety + replan once (remaining 2.1)
    for i, replan in enumerate([False, True, False]):
        msg = f"m{i}"
        an.add(_r("safety", None, 10.0 * i, 10.0 * i + 0.1, msg))
        if replan:
            an.add(_r("planner", "safety", 10.0 * i + 0.1, 10.0 * i + 2.1, msg))
        assert an.complete(msg) is not None
    assert an.complete("never") is None
    assert sorted(prof.remaining["safety"].samples()) == pytest.approx([0.1, 0.1, 2.1])
    assert prof.remaining["planner"].samples() == pytest.approx([2.0])
    assert sorted(prof.single["safety"].samples()) == pytest.approx([0.1, 0.1, 0.1])
    assert an.path_frequencies("safety") == pytest.approx({(): 2 / 3, ("planner",): 1 / 3})
    assert an.completed == 3 and an.open_workflows() == 0
