#!/usr/bin/env python3
"""ROSA §4.2 end-to-end comparison, simulated: SLO-qualified action throughput of a robot factory
under dedicated serving (Baselines 1-2), shared FIFO pools (Baselines 3-4) and the ROSA solver's
schedule (physai_ros.scheduler.factory.solver), on the paper's workloads (Table 1 P1-P4, Table 2
Mix2 / Mix4) at 16-256 robots.

Sources of every number:
  - workloads, SLOs, rates, baselines: the paper (Table 1, Table 2, §4.1);
  - GPU service times and profiles L(b, lambda): roofline model (bench/physai_bench/factory/profiles.py), not
    measured on a GPU; --s1 paper-fit scales System 1 to the ~46 ms batch-1 time ROSA's own
    numbers imply for GR00T on the H200 (physai_bench.factory.profiles.PAPER_FIT_S1_B1_S);
  - throughputs, SLO attainment, p99: simulated (bench/physai_bench/factory/sim.py) on those service times;
  - solver time: measured wall time of solve() on this machine's CPU;
  - the paper's own figures (PAPER below) are printed for comparison, labelled "paper".
Pools: 8 GPUs as in the paper (8-GPU H200 server) for every fleet size, plus 32 GPUs for 256
robots (8 GPUs cannot hold 256 robots' safety and monitor load in this model).

    .venv/bin/python bench/factory.py --quick              # P1/P4 at 8-32 robots, 20 s simulated
    .venv/bin/python bench/factory.py --json bench/results/factory.json   # the paper's range, refined

Fleet sizes: the paper's range (8-64 robots on 8 H200s), refined around each system's peak and
collapse (physai_bench.factory.grid), with ROSA's peak over each baseline's peak (the paper's ratios)
and the equal-fleet ratios beside them; 128 and 256 robots (and 256 on 32 GPUs) are past the paper's
range and reported apart.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import time
from pathlib import Path

from physai_bench import results
from physai_bench.factory import baselines as factory_baselines
from physai_bench.factory import grid
from physai_bench.factory import profiles as factory_profiles
from physai_bench.factory import sim as factory_sim
from physai_ros.scheduler.factory.types import ComponentSpec, FactoryProblem, ServerPool, TaskClass

M = factory_profiles.MODEL_OF
# Table 1 (all SLOs p99; t_act 200 ms).
PIPELINES = {
    "P1": (ComponentSpec("system1", M["system1"], 0.2),),
    "P2": (ComponentSpec("system1", M["system1"], 0.2), ComponentSpec("monitor", M["monitor"], 2.0, 0.5)),
    "P3": (ComponentSpec("system1", M["system1"], 0.2), ComponentSpec("safety", M["safety"], 0.5, 2.0),
           ComponentSpec("monitor", M["monitor"], 2.0, 0.5)),
    "P4": (ComponentSpec("system1", M["system1"], 0.2), ComponentSpec("system2", M["system2"], 2.0),
           ComponentSpec("safety", M["safety"], 0.5, 2.0), ComponentSpec("monitor", M["monitor"], 2.0, 0.5)),
}
T_ACT_S, H_S2 = 0.2, 10  # Table 1: t_act 200 ms; System 2 once per 10 System 1 calls
MIXES = {"Mix2": ("P2", "P4"), "Mix4": ("P1", "P2", "P3", "P4")}  # Table 2: K / n each
WORKLOADS = ("P1", "P2", "P3", "P4", "Mix2", "Mix4")
# The paper's figures quoted in §4.2 (qualified actions/s, 8x H200), for the side-by-side table.
PAPER = {("P4", 8): {"B3 equal": 29.5, "ROSA": 23.9}, ("P4", 32): {"B3 equal": 0.0, "B4 weighted": 0.0, "ROSA": 89.4},
         ("P2", 32): {"best shared": 87.1, "ROSA": 106.9}, ("P3", 32): {"best shared": 0.0, "ROSA": 106.9},
         ("P4", 2): {"B2 GPU/model/robot": 7.4}}
PAPER_RATIOS = {"vs best dedicated (max)": 12.06, "vs best shared, Mix2 peak": 2.21, "vs best shared, Mix4 peak": 2.30,
                "headline vs shared": 2.44}


def task_class(pid: str, robots: int, start: int = 0) -> TaskClass:
    ids = tuple(f"{pid}-{i:03d}" for i in range(start, start + robots))
    return TaskClass(pid, ids, PIPELINES[pid], T_ACT_S, H_S2 if pid == "P4" else 1)


def problem(workload: str, robots: int, gpus: int, hardware: str = "H200") -> FactoryProblem:
    pids = MIXES.get(workload, (workload,))
    per, extra = divmod(robots, len(pids))
    classes = tuple(task_class(p, per + (1 if i < extra else 0)) for i, p in enumerate(pids))
    return FactoryProblem(classes, ServerPool(gpus, hardware, memory_gb=factory_profiles.HARDWARE[hardware][1]))


def rosa_schedule(prob: FactoryProblem, profiles, time_budget_s: float):
    """The solver's schedule and its wall time; None when the solver module is not there."""
    try:
        from physai_ros.scheduler.factory.solver import solve
    except ImportError as e:
        return None, 0.0, f"solver not available: {e}"
    t0 = time.perf_counter()
    sched = solve(prob, profiles, time_budget_s=time_budget_s)
    return sched, time.perf_counter() - t0, sched.reason


def run_cell(workload: str, robots: int, gpus: int, hardware: str, sim_cfg, time_budget_s: float,
             profile_requests: int = 2000, s1_mode: str = "roofline") -> dict:
    prob = problem(workload, robots, gpus, hardware)
    services = factory_profiles.services(hardware, s1_mode)
    profiles = factory_profiles.profiles(hardware, profile_requests, 0, s1_mode)
    weights = {name: svc.weights_gb for name, svc in services.items()}
    schedules = factory_baselines.all_baselines(prob, weights)
    sched, solve_s, reason = rosa_schedule(prob, profiles, time_budget_s)
    row = {"workload": workload, "robots": robots, "gpus": gpus, "hardware": hardware, "systems": {}}
    for name, s in schedules.items():
        row["systems"][name] = factory_sim.simulate(prob, s, services, sim_cfg).summary() | {"reason": s.reason}
    if sched is not None and sched.feasible:
        res = factory_sim.simulate(prob, sched, services, sim_cfg).summary()
        free = factory_sim.simulate(prob, sched, services, dataclasses.replace(sim_cfg, cap_rates=False))
        sync = factory_sim.simulate(prob, sched, services, dataclasses.replace(sim_cfg, synchronized_start=True))
        paced = factory_sim.simulate(prob, sched, services, dataclasses.replace(sim_cfg, cap_mode="average"))
        row["systems"]["ROSA"] = res | {"reason": reason, "solver_s": round(solve_s, 3),
                                        "predicted_actions_per_s": round(sched.factory_throughput, 2),
                                        "rates_hz": {k: round(v, 3) for k, v in sched.action_rate_hz.items()},
                                        "servers": _server_split(sched),
                                        # Fig. 10's ablation: the same placement, robots not capped
                                        "uncapped": free.summary(),
                                        # worst case: every robot starts within one t_act and plans first
                                        "synchronized_start": sync.summary(),
                                        # the cap as an average rate (eq. 4's amortization), not a min interval
                                        "average_paced": paced.summary()}
    else:  # infeasible, or the solver is not there: no ROSA number at all (not a zero)
        row["systems"]["ROSA"] = {"qualified_actions_per_s": 0.0 if sched is not None else None,
                                  "raw_actions_per_s": 0.0, "robots_served": 0, "reason": reason,
                                  "solver_s": round(solve_s, 3), "components": {}}
    q = {k: v["qualified_actions_per_s"] for k, v in row["systems"].items()}
    row["best_dedicated"] = max(q["B1 GPU/robot"], q["B2 GPU/model/robot"])
    row["best_shared"] = max(q["B3 equal"], q["B4 weighted"])
    row["rosa_vs_dedicated"] = _ratio(q["ROSA"], row["best_dedicated"])
    row["rosa_vs_shared"] = _ratio(q["ROSA"], row["best_shared"])
    return row


def solver_scaling(fleets: list[int], hardware: str, profile_requests: int, s1_mode: str,
                   time_budget_s: float) -> list[dict]:
    """Solver wall time as the fleet grows (no simulation): P4 and Mix4, one GPU per 8 robots."""
    profiles = factory_profiles.profiles(hardware, profile_requests, 0, s1_mode)
    out = []
    for w in ("P4", "Mix4"):
        for k in fleets:
            sched, solve_s, reason = rosa_schedule(problem(w, k, max(8, k // 8), hardware), profiles, time_budget_s)
            if sched is None:
                return []
            out.append({"workload": w, "robots": k, "gpus": max(8, k // 8), "solver_s": round(solve_s, 3),
                        "feasible": sched.feasible, "predicted_actions_per_s": round(sched.factory_throughput, 1),
                        "reason": reason})
    return out


def _server_split(sched) -> str:
    count: dict[str, int] = {}
    for a in sched.assignments:
        if a.standby_for is None:
            count[a.component] = count.get(a.component, 0) + 1
    return ":".join(f"{c}={n}" for c, n in count.items())


def _ratio(a: float | None, b: float) -> float | None:
    if a is None:
        return None
    return round(a / b, 2) if b > 0 else (None if a <= 0 else math.inf)


def peaks(rows: list[dict], gpus: int) -> dict:
    """Per workload on `gpus` GPUs: the peak over fleet sizes of each system, and ROSA's peak
    over the best dedicated and best shared peaks (how the paper states 12.06x / 2.21x / 2.30x)."""
    out = {}
    for w in WORKLOADS:
        rs = [r for r in rows if r["workload"] == w and r["gpus"] == gpus]
        if not rs:
            continue
        got = [r["systems"]["ROSA"]["qualified_actions_per_s"] for r in rs]
        rosa = max(got) if None not in got else None
        ded = max(r["best_dedicated"] for r in rs)
        sh = max(r["best_shared"] for r in rs)
        out[w] = {"rosa_peak": rosa, "dedicated_peak": ded, "shared_peak": sh,
                  "vs_dedicated": _ratio(rosa, ded), "vs_shared": _ratio(rosa, sh)}
    return out


def _fmt(x) -> str:
    return "n/a" if x is None else ("inf" if x == math.inf else f"{x:.2f}" if isinstance(x, float) else str(x))


def _q1(x) -> str:
    return "n/a" if x is None else f"{x:.1f}"


def markdown(result: dict) -> str:
    lines = [f"Qualified actions/s (simulated, bench/physai_bench/factory/sim.py, on roofline-model profiles of "
             f"{result['hardware']}, System 1 {result['s1']}; {result['duration_s']:.0f} s simulated, seed {result['seed']}). "
             "Dedicated columns: qualified (robots served). ROSA: the solver's schedule, robots capped at "
             "f_c as a min send interval; uncapped: same placement, no cap (Fig. 10); avg-paced: the cap as an "
             "average rate (n-th send not before start + n / f_c).", "",
             "| workload | robots | GPUs | B1 GPU/robot | B2 GPU/model | B3 equal | B4 weighted | ROSA | ROSA uncapped | ROSA avg-paced | ROSA S1 SLO | "
             "best-shared S1 SLO | ROSA servers | x best dedicated | x best shared | solver s (measured) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        s = r["systems"]

        def q(name):
            v = s[name]["qualified_actions_per_s"]
            return math.nan if v is None else v

        def slo(name):
            c = s[name].get("components", {}).get("system1")
            return f"{100 * c['slo_attainment']:.1f}%" if c else "-"

        unc = f"{s['ROSA']['uncapped']['qualified_actions_per_s']:.1f}" if "uncapped" in s["ROSA"] else "-"
        pace = f"{s['ROSA']['average_paced']['qualified_actions_per_s']:.1f}" if "average_paced" in s["ROSA"] else "-"
        best_sh = "B3 equal" if q("B3 equal") >= q("B4 weighted") else "B4 weighted"
        lines.append(
            f"| {r['workload']} | {r['robots']} | {r['gpus']} | {q('B1 GPU/robot'):.1f} ({s['B1 GPU/robot']['robots_served']}) "
            f"| {q('B2 GPU/model/robot'):.1f} ({s['B2 GPU/model/robot']['robots_served']}) | {q('B3 equal'):.1f} "
            f"| {q('B4 weighted'):.1f} | {_q1(s['ROSA']['qualified_actions_per_s'])} | {unc} | {pace} | {slo('ROSA')} | {slo(best_sh)} | {s['ROSA'].get('servers', '-')} "
            f"| {_fmt(r['rosa_vs_dedicated'])} | {_fmt(r['rosa_vs_shared'])} | {s['ROSA'].get('solver_s', 0):.2f} |")
    for g, pk in result["peaks"].items():
        lines += ["", f"Peaks over fleet sizes on {g} GPUs (simulated): ROSA peak / best dedicated peak, "
                  "ROSA peak / best shared peak", "", "| workload | ROSA | dedicated | shared | x dedicated | x shared |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {w} | {_q1(p['rosa_peak'])} | {p['dedicated_peak']:.1f} | {p['shared_peak']:.1f} "
                  f"| {_fmt(p['vs_dedicated'])} | {_fmt(p['vs_shared'])} |" for w, p in pk.items()]
    if result.get("solver_scaling"):
        lines += ["", "Solver wall time as the fleet grows (measured on this CPU; one GPU per 8 robots, no simulation)",
                  "", "| workload | robots | GPUs | solver s | feasible | predicted actions/s |", "|---|---|---|---|---|---|"]
        lines += [f"| {r['workload']} | {r['robots']} | {r['gpus']} | {r['solver_s']:.2f} | {r['feasible']} "
                  f"| {r['predicted_actions_per_s']:.1f} |" for r in result["solver_scaling"]]
    for w, v in result.get("within_paper_range", {}).items():
        if w == next(iter(result["within_paper_range"])):
            rng = result["paper_range"]
            lines += ["", f"Within the paper's range (<= {rng['max_robots']} robots on {rng['gpus']} GPUs, fleet "
                      "sizes refined around each peak): peak (robots) of each system, ROSA's peak over each "
                      "baseline's peak (the paper's ratios), and ROSA over the best baseline at the same fleet size",
                      "", "| workload | ROSA peak | dedicated peak | shared peak | x dedicated (peaks) | x shared (peaks) "
                      "| ROSA S1 SLO at peak | same fleet x dedicated (robots) | same fleet x shared (robots) |", "|---|---|---|---|---|---|---|---|---|"]
        p = v["peaks"]
        slo = v["rosa_system1_slo_at_peak"]
        eq = v["equal_fleet"]
        # The two smallest fleets of the coarse grid: where dedicated serving serves (nearly) all robots.
        small = [k for k in map(str, result["paper_range"].get("coarse", [])) if k in eq][:2] or sorted(eq, key=int)[:2]
        same_d = ", ".join(f"{_fmt(eq[k]['vs_dedicated'])} ({k})" for k in small)
        same_s = ", ".join(f"{_fmt(eq[k]['vs_shared'])} ({k})" for k in small)
        lines.append(
            f"| {w} | {_q1(p['ROSA']['qualified_actions_per_s'])} ({p['ROSA']['robots']}) "
            f"| {p['best dedicated']['qualified_actions_per_s']:.1f} ({p['best dedicated']['robots']}) "
            f"| {p['best shared']['qualified_actions_per_s']:.1f} ({p['best shared']['robots']}) "
            f"| {_fmt(v['rosa_peak_vs_dedicated_peak'])} | {_fmt(v['rosa_peak_vs_shared_peak'])} "
            f"| {'-' if slo is None else f'{100 * slo:.1f}%'} "
            f"| {same_d} | {same_s} |")
    lines += ["", "Paper (ROSA §4.2, 8x H200, measured there): " +
              "; ".join(f"{w} {k} robots: " + ", ".join(f"{n} {v}" for n, v in d.items()) for (w, k), d in PAPER.items()),
              "Paper ratios: " + ", ".join(f"{k} {v}x" for k, v in PAPER_RATIOS.items())]
    return "\n".join(lines)


def sweep(workload: str, gpus: int, coarse: list[int], resolution: int, run) -> list[dict]:
    """run_cell over `coarse` fleet sizes, refined around each system's peak and collapse."""
    rows: dict[int, dict] = {}

    def measure(k: int) -> dict:
        rows[k] = run(workload, k, gpus)
        return {name: v["qualified_actions_per_s"] for name, v in rows[k]["systems"].items()}
    grid.refine(measure, coarse, resolution)
    return [rows[k] for k in sorted(rows)]


def paper_view(rows: list[dict], gpus: int, paper_max_robots: int) -> dict:
    """Per workload, within the paper's range (<= paper_max_robots on `gpus` GPUs): each system's
    peak and fleet size, ROSA's peak over each baseline's peak (how the paper states its ratios),
    and the equal-fleet ratios (ROSA and the best dedicated / shared at the same fleet size)."""
    out = {}
    for w in WORKLOADS:
        rs = {r["robots"]: {n: v["qualified_actions_per_s"] for n, v in r["systems"].items()} | {
            "best dedicated": r["best_dedicated"], "best shared": r["best_shared"]}
            for r in rows if r["workload"] == w and r["gpus"] == gpus and r["robots"] <= paper_max_robots}
        if not rs:
            continue
        pk = {name: grid.peak(rs, name) for name in ("ROSA", "best dedicated", "best shared")}
        slo = {r["robots"]: r["systems"]["ROSA"].get("components", {}).get("system1", {}).get("slo_attainment")
               for r in rows if r["workload"] == w and r["gpus"] == gpus}
        out[w] = {"fleet_sizes": sorted(rs),
                  "peaks": {n: {"robots": k, "qualified_actions_per_s": round(v, 2)} for n, (k, v) in pk.items()},
                  "rosa_peak_vs_dedicated_peak": _ratio(pk["ROSA"][1], pk["best dedicated"][1]),
                  "rosa_peak_vs_shared_peak": _ratio(pk["ROSA"][1], pk["best shared"][1]),
                  "rosa_system1_slo_at_peak": slo.get(pk["ROSA"][0]),
                  "equal_fleet": {k: {"vs_dedicated": _ratio(v["ROSA"], v["best dedicated"]),
                                      "vs_shared": _ratio(v["ROSA"], v["best shared"])} for k, v in sorted(rs.items())}}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="P1/P4 at 8-32 robots, 20 s simulated, a coarse refinement")
    ap.add_argument("--hardware", default="H200", choices=sorted(factory_profiles.HARDWARE))
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--robots", default="8,16,32,48,64",
                    help="the coarse grid on --gpus GPUs (the paper: up to 64 robots on 8 H200s), refined")
    ap.add_argument("--resolution", type=int, default=2, help="refine until neighbouring fleet sizes are this close")
    ap.add_argument("--beyond", default="128,256", help="fleet sizes past the paper's range, reported apart ('' none)")
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--big-pool", type=int, default=32, help="also run 256 robots on this many GPUs (0: no)")
    ap.add_argument("--duration", type=float, default=60.0, help="simulated seconds per run")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--time-budget", type=float, default=10.0, help="solver time budget (s)")
    ap.add_argument("--s1", default="paper-fit", choices=factory_profiles.S1_MODES,
                    help="System 1 service times: scaled to the s(1) ROSA's numbers imply (the paper's condition), "
                         "or the roofline model")
    ap.add_argument("--scaling", default="64,256,1024,2048",
                    help="fleet sizes for the solver-time table (one GPU per 8 robots; '' to skip)")
    ap.add_argument("--profile-requests", type=int, default=2000, help="requests per profiled rate")
    ap.add_argument("--json", type=Path, help="write the full result here")
    args = ap.parse_args(argv)
    workloads = args.workloads.split(",")
    coarse = [int(x) for x in args.robots.split(",")]
    beyond = [int(x) for x in args.beyond.split(",") if x]
    if args.quick:
        workloads, coarse, beyond, args.duration, args.big_pool = ["P1", "P4"], [8, 16, 32], [], 20.0, 0
        args.resolution, args.scaling, args.profile_requests = 8, "64", 500
    run = results.start_run(f"simulated factory on {args.gpus}x {args.hardware} (roofline-model profiles, System 1 "
                            f"{args.s1}), {args.duration:.0f} s simulated per cell, seed {args.seed}; solver time "
                            "measured on this CPU", __file__, argv, quick=args.quick)
    cfg = factory_sim.SimConfig(duration_s=args.duration, warmup_s=min(5.0, args.duration / 4), seed=args.seed)
    t0 = time.perf_counter()

    def cell(w: str, k: int, g: int) -> dict:
        row = run_cell(w, k, g, args.hardware, cfg, args.time_budget, args.profile_requests, args.s1)
        print(f"# {w} {k} robots {g} GPUs: ROSA {_fmt(row['systems']['ROSA']['qualified_actions_per_s'])}, "
              f"best shared {row['best_shared']:.1f} ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
        return row
    rows = []
    for w in workloads:
        rows += sweep(w, args.gpus, coarse, args.resolution, cell)
        rows += [cell(w, k, args.gpus) for k in beyond]
        if args.big_pool and 256 in beyond:
            rows.append(cell(w, 256, args.big_pool))
    result = {"hardware": args.hardware, "s1": args.s1, "duration_s": args.duration, "seed": args.seed, "rows": rows,
              "paper_range": {"gpus": args.gpus, "max_robots": max(coarse), "coarse": coarse},
              "within_paper_range": paper_view(rows, args.gpus, max(coarse)),
              "peaks": {g: peaks(rows, g) for g in sorted({r["gpus"] for r in rows})},
              "sources": {"workloads": "paper Table 1/2", "service_times": "roofline model (physai_bench.factory.profiles)",
                          "throughputs": "simulated (physai_bench.factory.sim)", "solver_s": "measured wall time"},
              "paper": {f"{w}@{k}": d for (w, k), d in PAPER.items()} | {"ratios": PAPER_RATIOS}}
    if args.scaling:
        result["solver_scaling"] = solver_scaling([int(x) for x in args.scaling.split(",")], args.hardware,
                                                  args.profile_requests, args.s1, args.time_budget)
    print(markdown(result))
    results.write_result(args.json, run, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
