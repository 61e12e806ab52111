"""Scheduling benchmark: FIFO, Autellix and wait-ratio on the trace-driven fleet simulator.

    .venv/bin/python bench/scheduler.py --json [--workload bench/workloads/pi0_edge.yaml]
        [--seed 0] [--quick] [--out results.json] [--traces recorded.json]

Prints one JSON object: per arrival rate and per fleet size, avg/P25/P95 task latency for each
scheduler with static and dynamic horizon; reduction_vs_fifo_avg / reduction_vs_autellix_avg
(wait-ratio + dynamic horizon against each baseline with static horizon, highest load, as in
Kairos Table 2) plus the scheduler-only and horizon-only ablations; decision_ms per pending
count. Latencies are simulated seconds (deterministic per seed); decision_ms is wall time on
this machine (noisy on a shared box: min and median over repetitions are reported).

--libero (or a --workload file with `generator: libero`, e.g. bench/workloads/libero_a6000.yaml or
mixed_exec_a6000.yaml) runs the LIBERO-like benchmark of bench/sched_libero.py instead: rates
as fractions of the saturation rate up to the highest stable one, FIFO / Autellix / wait ratio
with static and dynamic horizon, Kairos Table-2 reductions, the §5.5 ablations, edge / cloud /
hybrid, and offline fleets; --chart PATH also draws the Figure-12-like PNG.

--traces replays recorded task traces (physai-trace/1, e.g. from `physai-fleet --record-trace`)
instead of the synthetic workload: tasks are drawn from the file with replacement and keep their
recorded horizons, so only the "recorded" horizon column exists; engines come from --workload,
arrival rates from --rates (default: the workload's).
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

import yaml

from physai_ros.scheduler import EngineInstanceInfo, LatencyProfile, Request, make_scheduler
from physai_bench import results
from physai_lab.fleet_sim import InstanceSpec, SimConfig, poisson_arrivals, run_offline, run_online
from physai_ros.sim.traces import WorkloadSpec, build_trace, sample_task_specs

SCHEDULERS = ("fifo", "autellix", "wait_ratio")
REPO = Path(__file__).resolve().parents[1]
DEFAULT_WORKLOAD = REPO / "bench" / "workloads" / "pi0_edge.yaml"


def load_workload(path: Path) -> dict:
    doc = yaml.safe_load(path.read_text())
    doc["spec"] = WorkloadSpec.from_dict(doc["workload"])
    return doc


def instances(doc: dict, n_edge: int = 1, cloud: bool = False) -> list[InstanceSpec]:
    e, c = doc["engines"]["edge"], doc["engines"]["cloud"]
    out = [InstanceSpec(f"edge{k}", "edge", LatencyProfile.from_pairs(e["profile"]), e["network_rtt_s"])
           for k in range(n_edge)]
    if cloud:
        out.append(InstanceSpec("cloud0", "cloud", LatencyProfile.from_pairs(c["profile"]), c["network_rtt_s"]))
    return out


def sim_config(doc: dict, name: str, insts: list[InstanceSpec], seed: int) -> SimConfig:
    params = dict(doc.get("scheduler", {}).get(name, {}) or {})
    params["stale_after_s"] = doc["sim"].get("stale_after_s")
    return SimConfig(scheduler=name, scheduler_params=params, instances=insts,
                     client_link_s=doc["sim"]["client_link_s"],
                     latency_jitter=doc["sim"]["latency_jitter"], seed=seed)


def summarize(res) -> dict:
    s = res.summary()
    return {"avg_s": round(s["avg_s"], 3), "p25_s": round(s["p25_s"], 3), "p95_s": round(s["p95_s"], 3),
            "robot_idle_avg_s": round(s["avg_robot_idle_s"], 3), "requests": s["requests"],
            "refreshes": res.scheduler_stats.get("refreshes_requested", 0),
            "by_tier": res.dispatched_by_tier}


def grid(run_fn, traces_static, traces_dyn) -> dict:
    out = {}
    for horizon, trs in (("static", traces_static), ("dynamic", traces_dyn)):
        if trs is None:
            continue
        for name in SCHEDULERS:
            out[f"{name}/{horizon}"] = summarize(run_fn(name, trs))
    return out


def reductions(cell: dict) -> dict:
    def red(a, b, key="avg_s"):
        return round(1.0 - cell[a][key] / cell[b][key], 4)
    return {
        "kairos_vs_fifo": {k: red("wait_ratio/dynamic", "fifo/static", k) for k in ("avg_s", "p25_s", "p95_s")},
        "kairos_vs_autellix": {k: red("wait_ratio/dynamic", "autellix/static", k) for k in ("avg_s", "p25_s", "p95_s")},
        "scheduler_only_vs_fifo_static": {k: red("wait_ratio/static", "fifo/static", k) for k in ("avg_s", "p25_s", "p95_s")},
        "scheduler_only_vs_autellix_static": {k: red("wait_ratio/static", "autellix/static", k) for k in ("avg_s", "p25_s", "p95_s")},
        "scheduler_only_vs_fifo_dynamic": {k: red("wait_ratio/dynamic", "fifo/dynamic", k) for k in ("avg_s", "p25_s", "p95_s")},
        "horizon_only_fifo": {k: red("fifo/dynamic", "fifo/static", k) for k in ("avg_s", "p25_s", "p95_s")},
    }


def decision_times(counts=(100, 1000, 10000), reps=15, seed=0) -> dict:
    """Wall time of one schedule() call with N queued requests from tasks with history."""
    rng = random.Random(seed)
    prof = LatencyProfile.from_pairs([[1, 0.075], [16, 0.3]])
    out = {}
    for n in counts:
        s = make_scheduler("wait_ratio")
        inst = [EngineInstanceInfo("e", "edge", prof, max_batch=16)]
        now = 0.0
        big = [EngineInstanceInfo("warm", "edge", prof, max_batch=n)]
        for i in range(n):   # round 0 of every task: dispatch and complete, so each has history
            s.submit(Request(f"t{i}#0", f"r{i}", f"t{i}", 0, now, now, None, 0, 1 / 30), now)
        s.schedule(now, big)
        for i in range(n):
            s.on_completed(f"t{i}#0", 0.1 + rng.random() * 0.2, 0.1)
        now = 1.0
        for i in range(n):
            s.submit(Request(f"t{i}#1", f"r{i}", f"t{i}", 1, now, now, 0.3, rng.randint(0, 20), 1 / 30), now)
        samples, nxt = [], 2
        for k in range(reps):
            now += 0.05
            t0 = time.perf_counter()
            d = s.schedule(now, inst)
            samples.append(time.perf_counter() - t0)
            for rid in d.dispatched_request_ids:   # keep the queue at n: the task comes back
                task = rid.split("#")[0]
                s.on_completed(rid, now, 0.1)
                s.submit(Request(f"{task}#{nxt}", "r", task, nxt, now, now, now, 5, 1 / 30), now)
            nxt += 1
        out[str(n)] = {"min_ms": round(min(samples) * 1e3, 3),
                       "median_ms": round(statistics.median(samples) * 1e3, 3)}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workload", type=Path, default=DEFAULT_WORKLOAD)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true", help="print the JSON result (default: a table)")
    ap.add_argument("--quick", action="store_true", help="fewer tasks, no 1,000-robot fleet")
    ap.add_argument("--out", type=Path, help="also write the JSON here")
    ap.add_argument("--traces", type=Path, help="replay recorded traces (physai-trace/1 file)")
    ap.add_argument("--rates", default=None,
                    help="with --traces or --libero: comma list of task arrival rates per second (default: the "
                         "workload's; recorded tasks from physai-fleet are long, so use lower ones)")
    ap.add_argument("--ablation", action="store_true",
                    help="only: wait-ratio parameter variants (incl. the paper-vs-earlier readings), "
                         "static horizon, peak rate and 100 robots; offload rule with a cloud tier")
    ap.add_argument("--libero", action="store_true",
                    help="the LIBERO-like workload (bench/workloads/libero_a6000.yaml unless --workload "
                         "names another `generator: libero` file)")
    ap.add_argument("--model", help="with --libero: which model of the workload file serves (pi05, pi0)")
    ap.add_argument("--edge-max-batch", type=int, help="with --libero: hard batch cap of the edge GPU")
    ap.add_argument("--chart", type=Path, help="with --libero: write the Figure-12-like PNG here")
    ap.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE",
                    help="with --libero: override a workload-file value (YAML syntax), e.g. "
                         "--set workload.suites.short_exec.weight=1; repeatable")
    args = ap.parse_args(argv)
    args.argv = argv
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
    if args.libero and args.workload == DEFAULT_WORKLOAD:
        args.workload = REPO / "bench" / "workloads" / "libero_a6000.yaml"
    if args.libero or yaml.safe_load(args.workload.read_text()).get("generator") == "libero":
        return libero_main(args)
    if args.traces:
        return replay_recorded(args)
    if args.ablation:
        return ablation(args)
    run = results.start_run(f"simulated fleet (physai_lab.fleet_sim), synthetic workload {args.workload.name}: tasks "
                            "drawn from horizon CDFs shaped like Kairos Fig. 3-4 (read by eye), an edge-GPU latency "
                            "profile assumed from published pi0 figures, Poisson arrivals; latencies in simulated "
                            "seconds, decision time measured on this CPU", __file__, args.argv, quick=args.quick)
    doc = load_workload(args.workload)
    spec = doc["spec"]
    on, off = doc["online"], doc["offline"]
    n_tasks = 80 if args.quick else int(on["tasks"])
    specs = sample_task_specs(spec, n_tasks, random.Random(args.seed))
    static = [build_trace(spec, t, False) for t in specs]
    dyn = [build_trace(spec, t, True) for t in specs]

    by_rate, hybrid = {}, {}
    for rate in on["rates_per_s"]:
        arr = poisson_arrivals(n_tasks, float(rate), random.Random(args.seed + 1))
        by_rate[str(rate)] = grid(lambda name, trs: run_online(
            trs, arr, sim_config(doc, name, instances(doc), args.seed)), static, dyn)
        if rate in on.get("cloud_at_rates", []):
            hybrid[str(rate)] = grid(lambda name, trs: run_online(
                trs, arr, sim_config(doc, name, instances(doc, cloud=True), args.seed)), static, dyn)
    peak = str(on["rates_per_s"][-1])
    red = reductions(by_rate[peak])

    by_fleet = {}
    for n_robots, n_edge in off["fleets"].items():
        n_robots = int(n_robots)
        if args.quick and n_robots > 100:
            continue
        fspecs = sample_task_specs(spec, n_robots * int(off["tasks_per_robot"]), random.Random(args.seed + 2))
        fs, fd = [build_trace(spec, t, False) for t in fspecs], [build_trace(spec, t, True) for t in fspecs]
        cell = grid(lambda name, trs: run_offline(
            trs, n_robots, sim_config(doc, name, instances(doc, int(n_edge)), args.seed)), fs, fd)
        cell["reductions"] = reductions(cell)
        by_fleet[str(n_robots)] = cell

    result = {
        "workload": results.from_repo(str(args.workload)),
        "seed": args.seed, "tasks_per_online_run": n_tasks, "peak_rate_per_s": float(peak),
        "reduction_vs_fifo_avg": red["kairos_vs_fifo"]["avg_s"],
        "reduction_vs_autellix_avg": red["kairos_vs_autellix"]["avg_s"],
        "reductions_at_peak": red,
        "by_rate": by_rate,
        "hybrid_edge_cloud": hybrid,
        "by_fleet_size": by_fleet,
        "decision_ms": decision_times(),  # the run's wall time is the header's wall_s
    }
    text = json.dumps(results.write_result(args.out, run, result), indent=1)
    if args.json:
        print(text)
    else:
        print(f"peak rate {peak}/s: wait-ratio+dynamic vs FIFO static {red['kairos_vs_fifo']}, "
              f"vs Autellix static {red['kairos_vs_autellix']}")
        for n, cell in by_fleet.items():
            print(f"fleet {n}: {cell['reductions']['kairos_vs_fifo']}")
        print("decision_ms", result["decision_ms"])
    return 0


ABLATIONS = {
    "fifo": ("fifo", {}),
    "wait_ratio (defaults)": ("wait_ratio", {}),
    "A=5": ("wait_ratio", {"aging_interval": 5}),
    "A=100": ("wait_ratio", {"aging_interval": 100}),
    "no aging (A=1e9)": ("wait_ratio", {"aging_interval": 10**9}),
    "B=2": ("wait_ratio", {"buckets": 2}),
    "B=1000 (~continuous)": ("wait_ratio", {"buckets": 1000}),
    "count_first_wait": ("wait_ratio", {"count_first_wait": True}),
    # the paper's readings are the defaults; these restore our earlier ones, one at a time.
    "provisional_wait=lookahead": ("wait_ratio", {"provisional_wait": "lookahead"}),
    "hold_ratio_floor=True": ("wait_ratio", {"hold_ratio_floor": True}),
    "lookahead + hold floor (pre-issue-20)": ("wait_ratio", {"provisional_wait": "lookahead",
                                                             "hold_ratio_floor": True}),
    "B=0 (infinite buckets)": ("wait_ratio", {"buckets": 0}),
    "intra_bucket=fifo": ("wait_ratio", {"intra_bucket": "fifo"}),
    "intra_bucket=shortest_exec": ("wait_ratio", {"intra_bucket": "shortest_exec"}),
}
# Edge + cloud at the peak rate: the paper's offload rule and our earlier completion-time rule.
CLOUD_ABLATIONS = {
    "edge+cloud, placement_rule=paper": ("wait_ratio", {}),
    "edge+cloud, placement_rule=completion": ("wait_ratio", {"placement_rule": "completion"}),
}


def ablation(args) -> int:
    """Scheduler-only comparison (static horizon) of wait-ratio parameter choices."""
    doc = load_workload(args.workload)
    spec = doc["spec"]
    n = int(doc["online"]["tasks"])
    rate = float(doc["online"]["rates_per_s"][-1])
    static = [build_trace(spec, t, False) for t in sample_task_specs(spec, n, random.Random(args.seed))]
    arr = poisson_arrivals(n, rate, random.Random(args.seed + 1))
    fleet = [build_trace(spec, t, False) for t in sample_task_specs(
        spec, 100 * int(doc["offline"]["tasks_per_robot"]), random.Random(args.seed + 2))]
    out = {}
    for label, (name, extra) in ABLATIONS.items():
        def cfg(cloud=False):
            c = sim_config(doc, name, instances(doc, cloud=cloud), args.seed)
            c.scheduler_params.update(extra)
            return c
        try:
            make_scheduler(name, **extra)
        except ValueError as exc:   # an option the scheduler does not have (yet)
            out[label] = {"skipped": str(exc)}
            continue
        out[label] = {f"online_{rate:g}_per_s": summarize(run_online(static, arr, cfg())),
                      "offline_100_robots": summarize(run_offline(fleet, 100, cfg()))}
    for label, (name, extra) in CLOUD_ABLATIONS.items():
        c = sim_config(doc, name, instances(doc, cloud=True), args.seed)
        c.scheduler_params.update(extra)
        try:
            out[label] = {f"online_{rate:g}_per_s": summarize(run_online(static, arr, c))}
        except ValueError as exc:
            out[label] = {"skipped": str(exc)}
    text = json.dumps(out, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    if args.json:
        print(text)
    else:
        for label, cell in out.items():
            print(f"{label:38s}", cell.get("skipped") or "  ".join(
                f"{k}: avg {v['avg_s']:.1f} p25 {v['p25_s']:.1f} p95 {v['p95_s']:.1f}" for k, v in cell.items()))
    return 0


def replay_recorded(args) -> int:
    """Online runs over recorded traces: same engines and rates as the workload file."""
    import dataclasses

    from physai_ros.sim.traces import load_traces

    run = results.start_run(f"simulated fleet (physai_lab.fleet_sim) replaying recorded tasks ({args.traces.name}: "
                            "each task keeps its recorded rounds and horizons), engines and rates from "
                            f"{args.workload.name}; latencies in simulated seconds", __file__, args.argv,
                            quick=args.quick)
    doc = load_workload(args.workload)
    traces = load_traces(args.traces)
    pool = traces.tasks
    rng = random.Random(args.seed)
    n_tasks = 80 if args.quick else int(doc["online"]["tasks"])
    picked = [dataclasses.replace(rng.choice(pool), task_id=f"r{i}") for i in range(n_tasks)]
    rates = [float(x) for x in args.rates.split(",")] if args.rates else doc["online"]["rates_per_s"]
    by_rate = {}
    for rate in rates:
        arr = poisson_arrivals(n_tasks, float(rate), random.Random(args.seed + 1))
        cell = {}
        for name in SCHEDULERS:
            cell[f"{name}/recorded"] = summarize(run_online(
                picked, arr, sim_config(doc, name, instances(doc), args.seed)))
        by_rate[str(rate)] = cell
    peak = by_rate[str(rates[-1])]
    result = {"traces": results.from_repo(str(args.traces)),
              "traces_meta": {k: traces.meta.get(k) for k in ("source", "model", "device", "duration_s")},
              "peak_rate_per_s": rates[-1], "tasks_in_file": len(pool), "tasks_per_run": n_tasks,
              "rounds_in_file": sum(len(t.rounds) for t in pool),
              "isolated_exec_s_in_file": round(sum(t.isolated_exec_s for t in pool), 3),
              "reduction_vs_fifo_avg": round(1 - peak["wait_ratio/recorded"]["avg_s"] / peak["fifo/recorded"]["avg_s"], 4),
              "reduction_vs_autellix_avg": round(1 - peak["wait_ratio/recorded"]["avg_s"] / peak["autellix/recorded"]["avg_s"], 4),
              "by_rate": by_rate}
    text = json.dumps(results.write_result(args.out, run, result), indent=1)
    print(text if args.json else f"peak: vs FIFO {result['reduction_vs_fifo_avg']}, vs Autellix {result['reduction_vs_autellix_avg']}")
    return 0


def libero_main(args) -> int:
    """The LIBERO-like benchmark (bench/sched_libero.py) and its chart (bench/sched_chart.py)."""
    import sched_libero  # bench/sched_libero.py, this script's folder

    t_start = time.time()
    run = results.start_run(f"simulated fleet (physai_lab.fleet_sim), {args.workload.name}: LIBERO-like tasks, "
                            "engine latency from a roofline profile of an edge GPU, Poisson arrivals; latencies in "
                            "simulated seconds, decision time measured on this CPU", __file__, args.argv,
                            quick=args.quick)
    doc = yaml.safe_load(args.workload.read_text())
    for item in args.set:
        path, _, value = item.partition("=")
        *parents, leaf = path.split(".")
        node = doc
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = yaml.safe_load(value)
    doc = sched_libero.prepare(doc, args.model, args.edge_max_batch)
    rates = [float(x) for x in args.rates.split(",")] if args.rates else None
    res = sched_libero.libero_bench(doc, args.seed, args.quick, rates,
                                    progress=lambda m: print(f"[{time.time() - t_start:6.1f}s] {m}", file=sys.stderr))
    res = {"workload_file": results.from_repo(str(args.workload)), "overrides": args.set,
           "edge_max_batch": args.edge_max_batch,
           **res}
    res = results.write_result(args.out, run, res)
    text = json.dumps(res, indent=1)
    if args.chart:
        import sched_chart
        sched_chart.figure12(res, args.chart)
    if args.json:
        print(text)
    else:
        top = res["highest_stable_rate_per_s"]
        print(f"saturation rate {res['saturation_rate_per_s']}/s, highest stable {top}/s")
        for rate, cell in res["by_rate"].items():
            print(f"rate {rate}/s{'' if cell['stable'] else ' (unstable)'}: " + "  ".join(
                f"{k} {cell[k]['avg_s']:.1f}/{cell[k]['p25_s']:.1f}/{cell[k]['p95_s']:.1f}"
                for k in sched_libero.POLICIES))
        print("Table 2 at the highest stable rate:", json.dumps(res["table2_at_highest_stable"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
