"""Kairos multi-agent language-request scheduling in a deterministic discrete-event
simulation (bench/physai_bench/agents_sim.py) of a robot factory's language components sharing VLM instances:
this module is the CLI - it runs the policies at several loads and seeds, prints the comparison
table and the scheduler's decision time at 1,000 queued requests, and writes the results as JSON (--json).

The policies compared, the workload, the engine model and where every number comes from are in
bench/physai_bench/agents_sim.py's docstring (Kairos §7 baselines and ablations).
"""
from __future__ import annotations

import argparse
import sys
import time
from typing import List

import numpy as np

from physai_bench import results
from physai_bench.agents_sim import AGENTS, KV_BYTES, POLICIES, REPLAN_P, TASKS, Flow, Sim, simulate
from physai_ros.scheduler.agents import MemoryDemand


def decision_time_us(policy: str, queued: int = 1000, reps: int = 200, seed: int = 0) -> dict:
    """Microseconds per scheduling decision with `queued` requests waiting: take the queue's
    order (up to the scan limit) and place its first placeable request, as Sim.schedule does.
    Kairos's background refresh (Wasserstein matrix + MDS + KDE modes) is timed separately."""
    rng = np.random.default_rng(seed)
    sim, agents = Sim(policy, 1.0, 1.0, seed), list(AGENTS)
    for a in agents:                    # profiles as after a warm run: a few hundred ms to seconds
        for v in rng.lognormal(np.log(0.04 * AGENTS[a].out_median), 0.3, 512):
            sim.profiler.add_single(a, float(v))
            sim.profiler.add_remaining(a, float(v) + 0.2)
    t0 = time.perf_counter()
    sim.refresh()
    refresh_ms = (time.perf_counter() - t0) * 1e3
    flow = sim.flows["w0"] = Flow("w0", "assembly", 0.0, False)
    for i in range(queued):
        sim.submit(flow, agents[i % len(agents)], None, float(i) * 1e-3)
    times: List[float] = []
    placed: List[int] = []
    for k in range(reps):
        now = 1.0 + 0.01 * k
        t0 = time.perf_counter()
        for req in sim.queue.ordered(sim.scan_limit):
            d = MemoryDemand(req.prompt_tokens * KV_BYTES, sim.decode_rate, sim.expected_time(req.agent))
            if sim.dispatcher.dispatch(req.request_id, d, now, set(sim.insts)) is not None:
                placed.append(sim.queue.remove(req.request_id).request_id)
                break
        times.append((time.perf_counter() - t0) * 1e6)
        sim.submit(flow, agents[k % len(agents)], None, now)        # keep `queued` waiting
        if k % 40 == 39:                   # completions keep the dispatcher from filling up
            for rid in placed:
                sim.dispatcher.complete(rid, now)
            placed.clear()
    return {"policy": policy, "queued": len(sim.queue), "median_us": float(np.median(times)),
            "p95_us": float(np.percentile(times, 95)), "priority_refresh_ms": refresh_ms}


def _report(rows: List[dict], dec: List[dict]) -> None:
    for r in rows:
        print(f"kv {r['kv_tokens']:6d} rate {r['rate_wf_s']:5.1f}/s {r['policy']:10s} mean {r['mean_e2e_s']:7.2f} s"
              f"  p95 {r['p95_e2e_s']:7.2f} s  queue {r['mean_queue_wait_s']:6.2f} s  oom {r['oom_risk_events']:7.1f}"
              f"  kv {r['kv_utilisation']:5.1%}  once {r['each_request_once']}  ({r['wall_s']:.1f} s wall)")
    print("\nvs fifo_rr (1 - x / fifo_rr: positive = lower latency)")
    for c in compare(rows, "fifo_rr"):
        print(f"kv {c['kv_tokens']:6d} rate {c['rate_wf_s']:5.1f}/s {c['policy']:10s} mean {c['mean_change']:+6.1%}"
              f"  p95 {c['p95_change']:+6.1%}")
    print("\ndecision time at 1,000 queued requests:")
    for d in dec:
        print(f"  {d['policy']:10s} median {d['median_us']:8.1f} us  p95 {d['p95_us']:8.1f} us"
              f"  (priority refresh {d['priority_refresh_ms']:.1f} ms)")


def compare(rows: List[dict], baseline: str) -> List[dict]:
    """Each policy against `baseline` at the same KV budget and load, as relative change of the mean
    and P95 end-to-end latency (negative: lower), with the per-seed changes of the mean (a seed gives
    every policy the same random stream, but its draws interleave with the policy's own events, so
    the workloads are alike in law, not identical: the per-seed spread shows the noise)."""
    out = []
    for r in rows:
        base = next((b for b in rows if b["policy"] == baseline and b["kv_tokens"] == r["kv_tokens"]
                     and b["rate_wf_s"] == r["rate_wf_s"]), None)
        if base is None or r is base:
            continue
        per_seed = [x["mean_e2e_s"] / y["mean_e2e_s"] - 1 for x, y in zip(r["runs"], base["runs"])]
        out.append({"policy": r["policy"], "baseline": baseline, "kv_tokens": r["kv_tokens"],
                    "rate_wf_s": r["rate_wf_s"], "mean_change": r["mean_e2e_s"] / base["mean_e2e_s"] - 1,
                    "p95_change": r["p95_e2e_s"] / base["p95_e2e_s"] - 1,
                    "mean_change_per_seed": per_seed})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small run (seconds)")
    ap.add_argument("--loads", default="", help="workflow arrivals per second, comma-separated")
    ap.add_argument("--duration", type=float, default=0.0, help="simulated seconds of arrivals")
    ap.add_argument("--seeds", type=int, default=0)
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--instances", type=int, default=3)
    ap.add_argument("--kv-tokens", default="16000,32000,64000",
                    help="instance KV budgets in tokens, comma-separated (16,000 tokens: ~0.27 GiB)")
    ap.add_argument("--max-seqs", type=int, default=32)
    ap.add_argument("--step-model", choices=("measured", "roofline"), default="measured")
    ap.add_argument("--oom-resume", choices=("recovered", "drain"), default="recovered",
                    help="lift an OOM suspension when no preempted request is left, or when drained")
    ap.add_argument("--converge-threshold", type=float, default=0.05,
                    help="Wasserstein / mean below which a distribution counts as converged (§4.3)")
    ap.add_argument("--slot-s", type=float, default=0.5, help="time-slot length (Kairos §6: 0.5 s)")
    ap.add_argument("--json", default="", help="write the results here")
    a = ap.parse_args(argv)
    loads = [float(x) for x in a.loads.split(",")] if a.loads else (
        [18.0, 22.0] if a.quick else [16.0, 20.0, 24.0, 28.0])
    budgets = [16_000] if a.quick and a.kv_tokens == ap.get_default("kv_tokens") else [
        int(x) for x in a.kv_tokens.split(",")]
    duration, seeds = a.duration or (60.0 if a.quick else 300.0), a.seeds or (1 if a.quick else 3)
    run = results.start_run(f"simulated factory language requests (Kairos §7 workload), {a.instances} instances, "
                            f"{a.step_model} decode steps, {duration:.0f} s of arrivals x {seeds} seed(s); decision "
                            "time measured on this CPU", __file__, argv, quick=a.quick)
    kw = dict(n_instances=a.instances, max_seqs=a.max_seqs, step_model=a.step_model,
              oom_resume=a.oom_resume, converge_threshold=a.converge_threshold, slot_s=a.slot_s)
    rows = []
    for kv in budgets:
        for rate in loads:
            for pol in a.policies.split(","):
                runs = []
                for s in range(seeds):
                    t0 = time.perf_counter()
                    runs.append(dict(simulate(pol, rate, duration, seed=s, kv_tokens=kv, **kw),
                                     wall_s=time.perf_counter() - t0))
                agg = {k: float(np.mean([r[k] for r in runs])) for k in (
                    "mean_e2e_s", "p95_e2e_s", "p99_e2e_s", "mean_queue_wait_s", "oom_risk_events", "kv_utilisation",
                    "wall_s")}
                rows.append(dict(agg, policy=pol, kv_tokens=kv, rate_wf_s=rate, seeds=seeds,
                                 each_request_once=all(r["each_request_once"] for r in runs),
                                 unfinished_workflows=sum(r["unfinished_workflows"] for r in runs),
                                 workflows_measured=sum(r["workflows_measured"] for r in runs),
                                 priority_order=runs[0]["priority_order"], priority_source=runs[0]["priority_source"],
                                 runs=runs))
                print(f"done: kv {kv} rate {rate} {pol} ({agg['wall_s']:.1f} s wall per run)", flush=True)
    dec = [decision_time_us(p) for p in a.policies.split(",")]
    _report(rows, dec)
    cfg = dict(kw, kv_tokens=budgets, loads=loads, duration_s=duration, seeds=seeds, tasks=TASKS, replan_p=REPLAN_P,
               agents={k: vars(v) for k, v in AGENTS.items()})
    results.write_result(a.json, run, {"config": cfg, "rows": rows, "decision_time": dec,
                                       "vs_fifo_rr": compare(rows, "fifo_rr"), "vs_spf_rr": compare(rows, "spf_rr")})
    return 0


if __name__ == "__main__":
    sys.exit(main())
