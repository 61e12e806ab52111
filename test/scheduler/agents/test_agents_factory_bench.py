"""bench/physai_bench/agents_sim.py's simulation (run by the CLI bench/factory_agents.py) at a tiny
scale: every policy runs, every request finishes exactly once, every workflow ends, and the counts
agree. No timing is asserted."""
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod          # dataclasses look their module up by name
    spec.loader.exec_module(mod)
    return mod


cli = _load("factory_agents")             # the CLI (decision time)
from physai_bench import agents_sim as bench  # noqa: E402  (the simulation)


@pytest.mark.parametrize("policy", bench.POLICIES)
def test_tiny_run_completes_every_request_once(policy):
    sim = bench.Sim(policy, rate=20.0, duration_s=8.0, seed=1, kv_tokens=6000, max_seqs=8, refresh_s=2.0)
    res = sim.run()
    assert res["workflows"] == len(sim.flows) > 50
    assert res["requests"] == res["requests_completed"] == len(sim.reqs)
    assert res["each_request_once"] and all(n == 1 for n in sim.completions.values())
    assert all(r.done and r.generated == r.out_len for r in sim.reqs.values())
    assert res["unfinished_workflows"] == 0 and all(f.end_s >= f.app_start for f in sim.flows.values())
    assert len(sim.queue) == 0 and all(i.load() == 0 for i in sim.insts.values())
    # every request was dispatched once, and the analyzer saw every workflow
    assert len(sim.queue_wait) == res["requests"]
    assert sim.analyzer.completed == res["workflows"] and sim.analyzer.open_workflows() == 0
    # workflow request counts follow the templates: one root (two for inspection) + replan
    roots = {"assembly": 1, "inspection": 2, "transport": 1, "narration": 1}
    per_flow = {}
    for r in sim.reqs.values():
        per_flow[r.req.msg_id] = per_flow.get(r.req.msg_id, 0) + 1
    for f in sim.flows.values():
        assert per_flow[f.msg_id] == roots[f.task] + int(f.replan)


def test_same_seed_same_result_and_memory_pressure_is_counted():
    a = bench.simulate("fifo_rr", 20.0, 8.0, seed=3, kv_tokens=6000, max_seqs=8)
    b = bench.simulate("fifo_rr", 20.0, 8.0, seed=3, kv_tokens=6000, max_seqs=8)
    assert a == b
    assert a["oom_risk_events"] > 0          # 6,000 tokens for up to 8 requests: preemptions happen


def test_decision_time_keeps_the_queue_full():
    d = cli.decision_time_us("kairos", queued=200, reps=20)
    assert d["queued"] == 200 and d["median_us"] > 0
