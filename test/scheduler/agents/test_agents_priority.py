"""Kairos §5.1 agent priority (Wasserstein + 1-D MDS + zero anchor) and §5.2 queue order."""
import numpy as np
import pytest

import physai_ros.scheduler.agents.priority as prio
from physai_ros.scheduler.agents.ordering import LanguageRequest, make_queue
from physai_ros.scheduler.agents.priority import agent_priorities


def _dists(seed=0):
    rng = np.random.default_rng(seed)
    return {"planner": rng.normal(3.0, 0.3, 200).clip(0), "safety": rng.normal(0.2, 0.03, 200).clip(0),
            "monitor": rng.normal(0.6, 0.05, 200).clip(0), "text": rng.normal(1.5, 0.2, 200).clip(0)}


def test_separated_distributions_order_shortest_remaining_first():
    p = agent_priorities(_dists())
    assert p.order == ("safety", "monitor", "text", "planner")
    assert set(p.source.values()) == {"mds"}
    # The distance to the anchor approximates W1 to zero latency, i.e. the mean remaining latency.
    assert p.keys["planner"] == pytest.approx(3.0, rel=0.1)


def test_order_is_invariant_to_the_mds_sign_flip(monkeypatch):
    real = prio.mds_coordinates

    def flipped(dist, random_state=0):
        coords, stress = real(dist, random_state)
        return -coords, stress
    base = agent_priorities(_dists())
    monkeypatch.setattr(prio, "mds_coordinates", flipped)
    flip = agent_priorities(_dists())
    assert flip.order == base.order
    assert flip.keys == pytest.approx(base.keys)
    assert flip.coordinates["planner"] == pytest.approx(-base.coordinates["planner"])


def test_unconverged_agents_use_their_mean_and_unknown_agents_go_last():
    d = _dists()
    conv = {"planner": True, "safety": True, "monitor": False, "text": True}
    p = agent_priorities(d, conv, agents=["new"])
    assert p.source["monitor"] == "mean" and p.keys["monitor"] == pytest.approx(d["monitor"].mean())
    assert p.source["new"] == "unknown"
    assert p.order == ("safety", "monitor", "text", "planner", "new")


def _req(i, agent, app_start, arrival):
    return LanguageRequest(i, agent, f"m{i}", app_start, arrival, prompt_tokens=100)


def test_kairos_queue_orders_by_agent_then_application_start():
    p = agent_priorities(_dists())
    q = make_queue("kairos", priority=lambda: p)
    reqs = [_req(0, "planner", 0.0, 0.0), _req(1, "safety", 5.0, 5.0), _req(2, "safety", 1.0, 6.0),
            _req(3, "monitor", 0.5, 0.5), _req(4, "planner", -1.0, 7.0)]
    for r in reqs:
        q.push(r)
    # safety (older application start first, although it arrived later), monitor, planners.
    assert [r.request_id for r in q.ordered()] == [2, 1, 3, 4, 0]
    assert [r.request_id for r in q.ordered(limit=2)] == [2, 1]
    q.remove(1)
    assert q.pop().request_id == 2 and len(q) == 3


def test_fifo_and_spf_baselines():
    reqs = [_req(0, "planner", 0.0, 0.0), _req(1, "safety", 0.0, 1.0), _req(2, "text", 0.0, 2.0)]
    fifo = make_queue("fifo")
    spf = make_queue("spf", expected_time={"planner": 3.0, "safety": 0.1, "text": 1.0}.get)
    for r in reqs:
        fifo.push(r)
        spf.push(r)
    assert [r.request_id for r in fifo.ordered()] == [0, 1, 2]
    assert [r.request_id for r in spf.ordered()] == [1, 2, 0]


def test_reprioritize_applies_new_agent_priorities():
    state = {"p": None}
    q = make_queue("kairos", priority=lambda: state["p"])
    q.push(_req(0, "planner", 0.0, 0.0))
    q.push(_req(1, "safety", 1.0, 1.0))
    assert [r.request_id for r in q.ordered()] == [0, 1]      # no priorities yet: app start
    state["p"] = agent_priorities(_dists())
    q.reprioritize()
    assert [r.request_id for r in q.ordered()] == [1, 0]


def test_queue_handles_many_requests_with_removals():
    q = make_queue("fifo")
    for i in range(1000):
        q.push(_req(i, "a", 0.0, float(i)))
    for i in range(0, 1000, 2):
        q.remove(i)
    assert len(q) == 500
    assert [r.request_id for r in q.ordered(limit=3)] == [1, 3, 5]
    with pytest.raises(ValueError):
        q.push(_req(1, "a", 0.0, 1.0))
