"""The LIBERO-like scheduling benchmark behind `bench/scheduler.py --libero` (Kairos §5.3, §5.5).

Why a separate module: bench/scheduler.py keeps the original pi0_edge.yaml / recorded-trace
benches; this one drives workload files with `generator: libero` (lab/physai_lab/libero_workload.py)
and reports what the paper reports: per arrival rate and per fleet size, avg / P25 / P95 task
latency for FIFO, Autellix and wait ratio with the static horizon, FIFO / Autellix with the
dynamic horizon and full Kairos (wait ratio + dynamic horizon); Table-2 reductions; the §5.5
bucket-count and intra-bucket ablations and the paper-vs-earlier-reading variants at the highest
stable rate; edge / cloud / hybrid at that rate. Every run also counts how often the order of the
queue could matter at all (more requests queued than the idle instances take), and, per suite,
latency and robot idle time, so that each difference can be traced to a mechanism.
Latencies are simulated seconds, deterministic per seed.
"""
from __future__ import annotations

import random
import statistics
from typing import Any, Optional, Sequence

from physai_ros.scheduler import LatencyProfile, make_scheduler
from physai_lab.fleet_sim import FleetSim, InstanceSpec, SimConfig, poisson_arrivals
from physai_lab.libero_workload import (
    LiberoWorkload, build_traces, describe, mean_rounds, sample_tasks, saturation_rate,
)

# policy key -> (scheduler, dynamic horizon). Keys match bench/scheduler.py's grid.
POLICIES = {
    "fifo/static": ("fifo", False), "autellix/static": ("autellix", False),
    "wait_ratio/static": ("wait_ratio", False), "fifo/dynamic": ("fifo", True),
    "autellix/dynamic": ("autellix", True), "wait_ratio/dynamic": ("wait_ratio", True),
}
LABELS = {
    "fifo/static": "FIFO", "autellix/static": "Autellix", "wait_ratio/static": "wait ratio (static H)",
    "fifo/dynamic": "FIFO + dynamic H", "autellix/dynamic": "Autellix + dynamic H",
    "wait_ratio/dynamic": "Kairos (wait ratio + dynamic H)",
}
NO_EXEC_INFO = "_no_exec_info"
# §5.5 ablations and the paper-vs-earlier-reading variants (wait-ratio parameters).
BUCKETS = {"2": {"buckets": 2}, "5": {"buckets": 5}, "10": {"buckets": 10}, "20": {"buckets": 20},
           "inf": {"buckets": 0}}
INTRA = {m: {"intra_bucket": m} for m in ("longest_exec", "fifo", "shortest_exec")}
VARIANTS = {
    "paper (defaults)": {},
    # Not a scheduler option: the robots send no execution info (exec_phase_start), so the
    # bookkeeping measures every wait on the generation side -- wait ratio without execution
    # awareness, to isolate what the execution phase contributes.
    "no execution info (sim)": {NO_EXEC_INFO: True},
    "provisional_wait=lookahead": {"provisional_wait": "lookahead"},
    "hold_ratio_floor=True": {"hold_ratio_floor": True},
    "all earlier readings": {"provisional_wait": "lookahead", "hold_ratio_floor": True},
    "count_first_wait=True": {"count_first_wait": True},
}


def supported(name: str, params: dict) -> Optional[str]:
    """None when make_scheduler accepts these parameters, else its error (options the scheduler
    owner has not landed yet are reported as skipped, not failed)."""
    try:
        make_scheduler(name, **params)
        return None
    except ValueError as exc:
        return str(exc)


# ---- configuration ---------------------------------------------------------------------------
def prepare(doc: dict, model: Optional[str] = None, edge_max_batch: Optional[int] = None) -> dict:
    """Parse a `generator: libero` workload file's dict in place; returns it."""
    doc["wl"] = LiberoWorkload.from_dict(doc["workload"])
    doc["model"] = model or doc.get("model", "pi05")
    m = doc["models"][doc["model"]]
    if int(m.get("chunk_size", doc["wl"].chunk_size)) != doc["wl"].chunk_size:
        doc["wl"].chunk_size = int(m["chunk_size"])   # the model decides the chunk
    doc["edge_profile"] = LatencyProfile.from_pairs(m["edge"])
    doc["cloud_profile"] = LatencyProfile.from_pairs(m["cloud"])
    if edge_max_batch is not None:
        doc["edge_max_batch"] = edge_max_batch
    doc.setdefault("edge_max_batch", None)
    return doc


def instances(doc: dict, n_edge: int = 1, cloud: bool = False, edge: bool = True) -> list[InstanceSpec]:
    out = [InstanceSpec(f"edge{k}", "edge", doc["edge_profile"], 0.0, doc["edge_max_batch"])
           for k in range(n_edge if edge else 0)]
    if cloud:
        out.append(InstanceSpec("cloud0", "cloud", doc["cloud_profile"], doc["network"]["cloud_rtt_s"]))
    return out


def sim_config(doc: dict, name: str, insts: list[InstanceSpec], seed: int, extra: Optional[dict] = None) -> SimConfig:
    params = dict(doc.get("scheduler", {}).get(name, {}) or {})
    params["stale_after_s"] = doc["sim"].get("stale_after_s")
    if extra:
        params.update(extra)
    return SimConfig(scheduler=name, scheduler_params=params, instances=insts,
                     client_link_s=doc["network"]["client_link_s"],
                     latency_jitter=doc["sim"]["latency_jitter"], seed=seed)


# ---- an instrumented run ---------------------------------------------------------------------
class _CountingSim(FleetSim):
    """FleetSim that also counts scheduling cycles in which more requests were queued than the
    idle instances take (only then can the order of the queue change who is served), and each
    task's first wait (task start -> first chunk at the robot: Algorithm 1 does not count it)."""

    def __init__(self, config: SimConfig) -> None:
        super().__init__(config)
        self.cycles = 0
        self.contended = 0
        self.first_wait: dict[str, float] = {}

    strip_exec_info = False

    def _on_request(self, now: float, data: tuple) -> None:
        if self.strip_exec_info:
            data = (data[0], None) + tuple(data[2:])
        super()._on_request(now, data)

    def _on_chunk(self, now: float, data: tuple) -> None:
        run, rnd = data
        if rnd == 0:
            self.first_wait[run.trace.task_id] = now - run.start
        super()._on_chunk(now, data)

    def _schedule(self, now: float) -> None:
        tol = self.sched.saturation_tolerance if hasattr(self.sched, "saturation_tolerance") else 0.05
        room = sum(i.batch_cap(tol) for i in self.instances if i.busy_until <= now)
        self.cycles += 1
        self.contended += self.sched.pending() > room
        super()._schedule(now)


def run(traces, cfg: SimConfig, arrivals: Optional[Sequence[float]] = None, n_robots: int = 0):
    strip = bool(cfg.scheduler_params.pop(NO_EXEC_INFO, False))
    sim = _CountingSim(cfg)
    sim.strip_exec_info = strip
    if arrivals is not None:
        for tr, t in zip(traces, arrivals):
            sim.push(float(t), "task_start", (tr, f"robot_{tr.task_id}"))
    else:
        sim._backlog = list(reversed(traces))
        for k in range(min(n_robots, len(traces))):
            sim.push(0.0, "task_start", (sim._backlog.pop(), f"robot_{k}"))
    res = sim.run()
    res.contended_share = sim.contended / max(1, sim.cycles)
    res.first_wait = sim.first_wait
    return res


def drift(res) -> float:
    """Relative rise of mean latency from the 2nd to the 3rd quarter of tasks by start time
    (first quarter: warm-up; last: the queue drains after the last arrival). ~0 when stable."""
    by = sorted(res.tasks, key=lambda t: t.start)
    k = len(by) // 4
    if k < 2:
        return 0.0
    q2 = statistics.fmean(t.latency for t in by[k:2 * k])
    q3 = statistics.fmean(t.latency for t in by[2 * k:3 * k])
    return q3 / q2 - 1.0


def summarize(res, suite_of: dict[str, str]) -> dict:
    s = res.summary()
    out = {"avg_s": round(s["avg_s"], 3), "p25_s": round(s["p25_s"], 3), "p95_s": round(s["p95_s"], 3),
           "robot_idle_avg_s": round(s["avg_robot_idle_s"], 3), "requests": s["requests"],
           "contended_share": round(res.contended_share, 3), "drift": round(drift(res), 3),
           "first_wait_avg_s": round(statistics.fmean(res.first_wait.values()), 3),
           "by_tier": res.dispatched_by_tier, "by_suite": {}}
    for suite in sorted(set(suite_of.values())):
        ts = [t for t in res.tasks if suite_of.get(t.task_id) == suite]
        if ts:
            out["by_suite"][suite] = {"avg_s": round(statistics.fmean(t.latency for t in ts), 3),
                                      "idle_avg_s": round(statistics.fmean(t.robot_idle_s for t in ts), 3),
                                      "first_wait_avg_s": round(statistics.fmean(
                                          res.first_wait[t.task_id] for t in ts), 3)}
    return out


# ---- the report --------------------------------------------------------------------------------
def _red(cell: dict, a: str, b: str) -> dict:
    return {k: round(1.0 - cell[a][k] / cell[b][k], 4) for k in ("p25_s", "avg_s", "p95_s")}


def table2(cell: dict) -> dict:
    """Kairos Table 2: reductions over each static baseline of Kairos, Kairos without the
    dynamic horizon (wait ratio, static) and Kairos without the scheduler (baseline + dynamic)."""
    return {f"vs_{b}": {"kairos": _red(cell, "wait_ratio/dynamic", f"{b}/static"),
                        "kairos_wo_dynamic_horizon": _red(cell, "wait_ratio/static", f"{b}/static"),
                        "kairos_wo_scheduler": _red(cell, f"{b}/dynamic", f"{b}/static")}
            for b in ("fifo", "autellix")}


def policy_grid(doc: dict, static, dyn, suite_of, seed: int, run_kw: dict, insts_kw: Optional[dict] = None,
                policies: Sequence[str] = tuple(POLICIES)) -> dict:
    out = {}
    for key in policies:
        name, dynamic = POLICIES[key]
        cfg = sim_config(doc, name, instances(doc, **(insts_kw or {})), seed)
        out[key] = summarize(run(dyn if dynamic else static, cfg, **run_kw), suite_of)
    return out


def param_grid(doc: dict, variants: dict, static, dyn, suite_of, seed: int, run_kw: dict) -> dict:
    """Wait-ratio parameter variants, static and dynamic horizon (skipped where not supported)."""
    out = {}
    for label, extra in variants.items():
        err = supported("wait_ratio", {k: v for k, v in extra.items() if k != NO_EXEC_INFO})
        if err:
            out[label] = {"skipped": err}
            continue
        out[label] = {h: summarize(run(trs, sim_config(doc, "wait_ratio", instances(doc), seed, extra), **run_kw),
                                   suite_of) for h, trs in (("static", static), ("dynamic", dyn))}
    return out


def libero_bench(doc: dict, seed: int = 0, quick: bool = False, rates: Optional[list[float]] = None,
                 progress=lambda msg: None) -> dict:
    """The whole report for a prepared `generator: libero` workload (see the module docstring)."""
    wl, on, off = doc["wl"], doc["online"], doc["offline"]
    n = 120 if quick else int(on["tasks"])
    tasks = sample_tasks(wl, n, random.Random(seed))
    suite_of = {t.task_id: t.suite for t in tasks}
    static, dyn = build_traces(wl, tasks, False), build_traces(wl, tasks, True)
    sat = saturation_rate(static, doc["edge_profile"]) if doc["edge_max_batch"] is None else \
        doc["edge_max_batch"] / doc["edge_profile"].latency(doc["edge_max_batch"]) / mean_rounds(static)
    if rates is None:
        rates = [round(f * sat, 3) for f in on["rates_frac"]]
    g1 = doc["edge_profile"].latency(1)
    gcap = doc["edge_profile"].latency(min(doc["edge_profile"].saturation_batch(), doc["edge_max_batch"] or 10**6))
    result: dict[str, Any] = {
        "workload": {"static": describe(tasks, static, (g1, gcap)), "dynamic": describe(tasks, dyn, (g1, gcap)),
                     "model": doc["model"],
                     "edge_batch_cap": doc["edge_max_batch"] or doc["edge_profile"].saturation_batch(),
                     "edge_latency_s_at_1_and_cap": [g1, gcap]},
        "saturation_rate_per_s": round(sat, 4), "tasks_per_online_run": n, "seed": seed}

    by_rate = {}
    for rate in rates:
        progress(f"online rate {rate}")
        arr = poisson_arrivals(n, rate, random.Random(seed + 1))
        cell = policy_grid(doc, static, dyn, suite_of, seed, {"arrivals": arr})
        cell["stable"] = cell["fifo/static"]["drift"] < float(on.get("drift_limit", 0.25))
        cell["table2"] = table2(cell)
        by_rate[str(rate)] = cell
    result["by_rate"] = by_rate
    top = min(rates)   # the highest rate below which every rate of the sweep is stable
    for r in sorted(rates):
        if not by_rate[str(r)]["stable"]:
            break
        top = r
    result["highest_stable_rate_per_s"] = top
    result["table2_at_highest_stable"] = by_rate[str(top)]["table2"]

    progress(f"ablations at {top}")
    arr = poisson_arrivals(n, top, random.Random(seed + 1))
    kw = {"arrivals": arr}
    result["ablations"] = {"rate_per_s": top,
                           "buckets": param_grid(doc, BUCKETS, static, dyn, suite_of, seed, kw),
                           "intra_bucket": param_grid(doc, INTRA, static, dyn, suite_of, seed, kw),
                           "variants": param_grid(doc, VARIANTS, static, dyn, suite_of, seed, kw)}
    progress("edge / cloud / hybrid")
    result["hybrid"] = hybrid(doc, static, dyn, suite_of, seed, kw)

    by_fleet = {}
    n_off = 60 if quick else int(off["tasks"])
    ftasks = sample_tasks(wl, n_off, random.Random(seed + 2), prefix="f")
    fsuite = {t.task_id: t.suite for t in ftasks}
    fs, fd = build_traces(wl, ftasks, False), build_traces(wl, ftasks, True)
    for n_robots, n_edge in off["fleets"].items():
        progress(f"offline {n_robots} robots")
        cell = policy_grid(doc, fs, fd, fsuite, seed, {"n_robots": int(n_robots)}, {"n_edge": int(n_edge)})
        cell["table2"] = table2(cell)
        by_fleet[str(n_robots)] = cell
    result["by_fleet_size"] = by_fleet
    return result


def hybrid(doc: dict, static, dyn, suite_of, seed: int, run_kw: dict) -> dict:
    """Kairos and FIFO (dynamic / static H) on the edge only, the cloud only, and both (§5.3,
    Figure 13), with the paper's offload rule and the earlier completion-time rule."""
    setups = {"edge only": {"cloud": False}, "cloud only": {"cloud": True, "edge": False},
              "hybrid": {"cloud": True}}
    out: dict[str, Any] = {}
    for label, ikw in setups.items():
        for key in ("fifo/static", "wait_ratio/dynamic"):
            name, dynamic = POLICIES[key]
            cfg = sim_config(doc, name, instances(doc, **ikw), seed)
            out[f"{label}/{key}"] = summarize(run(dyn if dynamic else static, cfg, **run_kw), suite_of)
    extra = {"placement_rule": "completion"}
    err = supported("wait_ratio", extra)
    if err:
        out["hybrid completion-rule/wait_ratio/dynamic"] = {"skipped": err}
    else:
        cfg = sim_config(doc, "wait_ratio", instances(doc, cloud=True), seed, extra)
        out["hybrid completion-rule/wait_ratio/dynamic"] = summarize(run(dyn, cfg, **run_kw), suite_of)
    return out


# ---- mechanism trace ---------------------------------------------------------------------------
class _PrioritySim(_CountingSim):
    """Records, for every dispatched request, its suite, the wait-ratio bucket it was served
    from, and whether its robot had already run dry (and for how long) or still had slack."""

    def __init__(self, config: SimConfig, suite_of: dict[str, str]) -> None:
        super().__init__(config)
        self.suite_of = suite_of
        self.rows: list[tuple[str, int, float, float]] = []   # suite, bucket, ratio, now - E.end

    def _schedule(self, now: float) -> None:
        ranked = hasattr(self.sched, "bucket")
        before = {r.request_id for r in self.sched.queued()}
        buckets = {rid: (self.sched.bucket(rid, now), self.sched.wait_ratio(rid, now)) if ranked
                   else (-1, float("nan")) for rid in before}
        super()._schedule(now)
        after = {r.request_id for r in self.sched.queued()}
        for rid in before - after:
            task_id, rnd = rid.rsplit("#", 1)
            run_ = self._runs.get(task_id)
            if run_ is None or int(rnd) == 0 or rid not in buckets:
                continue
            b, w = buckets[rid]
            self.rows.append((self.suite_of[task_id], b, w, now - run_.prev_e_end))


def trace_priorities(doc: dict, rate: float, name: str = "wait_ratio", n: int = 300, seed: int = 0) -> dict:
    """Per suite, for scheduler `name` with the static horizon at `rate`: the median bucket and
    ratio its requests were served from (wait ratio only), the share served after the robot had
    run dry, the median time it had been dry, and the median slack left otherwise."""
    wl = doc["wl"]
    tasks = sample_tasks(wl, n, random.Random(seed))
    suite_of = {t.task_id: t.suite for t in tasks}
    traces = build_traces(wl, tasks, False)
    sim = _PrioritySim(sim_config(doc, name, instances(doc), seed), suite_of)
    for tr, t in zip(traces, poisson_arrivals(n, rate, random.Random(seed + 1))):
        sim.push(float(t), "task_start", (tr, f"robot_{tr.task_id}"))
    sim.run()
    out = {}
    for suite in sorted(set(suite_of.values())):
        rows = [r for r in sim.rows if r[0] == suite]
        if not rows:
            continue
        med = lambda xs: round(statistics.median(xs), 3)
        out[suite] = {"served": len(rows), **({"bucket_median": med([r[1] for r in rows]),
                                               "ratio_median": med([r[2] for r in rows])} if rows[0][1] >= 0 else {}),
                      "served_after_running_dry": round(sum(r[3] > 0 for r in rows) / len(rows), 3),
                      "dry_s_median_when_dry": med([r[3] for r in rows if r[3] > 0] or [0.0]),
                      "slack_s_median_when_not": med([-r[3] for r in rows if r[3] <= 0] or [0.0])}
    return out


if __name__ == "__main__":
    # .venv/bin/python bench/sched_libero.py WORKLOAD.yaml RATE [EDGE_MAX_BATCH]: the mechanism
    # trace (trace_priorities) for FIFO and wait ratio, static horizon.
    import json
    import sys

    import yaml
    d = prepare(yaml.safe_load(open(sys.argv[1])), None, int(sys.argv[3]) if len(sys.argv) > 3 else None)
    print(json.dumps({p: trace_priorities(d, float(sys.argv[2]), p) for p in ("fifo", "wait_ratio")}, indent=1))
