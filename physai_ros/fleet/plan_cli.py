"""`physai-fleet plan`: the factory schedule (ROSA §3.4) for the cluster a fleet file describes,
without starting anything, so an operator can size a factory (docs/factory.md).

    physai-fleet plan --fleet config/fleet_factory.yaml
    physai-fleet plan --fleet config/fleet_factory.yaml --servers 4 --robots place_in_order=32 --json out.json

Prints the task classes with their planned action rates, each server's placement (component,
model, batch size, robots, load, predicted mean and p99 against the SLO), the hot standbys, the
routing, the predicted SLO attainment and the factory throughput. Exit status 0 when a feasible
schedule exists, 1 when none does (the reason is printed), 2 for a bad command line or fleet file.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path

from physai_ros.config_fields import FleetConfigError
from physai_ros.scheduler.factory.schedule import hosted_components
from physai_ros.scheduler.factory.types import FactoryProblem, FactorySchedule


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="physai-fleet plan", description=__doc__.split("\n\n")[0])
    ap.add_argument("--fleet", default=None, help="fleet.yaml with a factory: block (default: the embedded "
                                                  "config/fleet_factory.yaml)")
    ap.add_argument("--profiles", default=None, metavar="JSON", help="profile file instead of factory.profiles")
    ap.add_argument("--servers", type=int, default=None, help="serving servers instead of factory.servers")
    ap.add_argument("--standby", type=int, default=None, help="hot standbys instead of factory.standby")
    ap.add_argument("--robots", action="append", default=[], metavar="TASK=K",
                    help="plan K robots for TASK instead of factory.robots (repeatable)")
    ap.add_argument("--time-budget", type=float, default=30.0, help="solver time budget, seconds (default 30)")
    ap.add_argument("--json", default=None, metavar="PATH", help="also write the schedule as JSON ('-': stdout only)")
    args = ap.parse_args(argv)
    if args.servers is not None and args.servers < 1:
        ap.error("--servers must be >= 1")
    if args.standby is not None and args.standby < 0:
        ap.error("--standby must be >= 0")
    robots = {}
    for item in args.robots:
        task, sep, k = item.partition("=")
        if not sep or not k.isdigit():
            ap.error(f"--robots {item!r}: expected TASK=K with K a whole number")
        robots[task] = int(k)
    args.robots = robots
    return args


def load_problem(args: argparse.Namespace) -> tuple[FactoryProblem, dict, str]:
    """The problem, its profiles and where they came from, with the command line's overrides."""
    from physai_ros.install_paths import resolve_package_url
    from physai_ros.config.fleet import fleet_dir, load_fleet, resolve_package_path
    from physai_ros.config.factory import check_profiles, factory_problem, load_profiles

    path = args.fleet or str(resolve_package_url("package://physai_ros/config/fleet_factory.yaml"))
    fleet = load_fleet(path)
    factory = fleet.factory
    if factory is None:
        raise FleetConfigError(f"{fleet.source}: no factory: block to plan (servers, hardware, profiles; "
                               "see config/fleet_factory.yaml and docs/factory.md)")
    unknown = sorted(set(args.robots) - set(fleet.tasks))
    if unknown:
        raise FleetConfigError(f"--robots {unknown[0]}: no such task (tasks: {', '.join(sorted(fleet.tasks))})")
    factory = dataclasses.replace(
        factory,
        servers=args.servers if args.servers is not None else factory.servers,
        standby=args.standby if args.standby is not None else factory.standby,
        robots={**factory.robots, **args.robots})
    if args.profiles:
        profiles_path = Path(args.profiles).expanduser().resolve()
    elif factory.profiles:
        profiles_path = resolve_package_path(factory.profiles, fleet_dir(fleet))
    else:
        raise FleetConfigError("factory.profiles: required to plan (a profile file; --profiles overrides it)")
    problem = factory_problem(fleet, factory)
    profiles = load_profiles(profiles_path)
    check_profiles(problem, profiles)
    return problem, profiles, str(profiles_path)


def _ranges(ids: tuple[str, ...]) -> str:
    """r_0, r_1, r_2, r_5 -> 'r_0..r_2, r_5' (a compact routing listing)."""
    out, run = [], []

    def flush():
        if run:
            out.append(run[0] if len(run) == 1 else f"{run[0]}..{run[-1]}")

    prev = None
    for rid in ids:
        stem, _, k = rid.rpartition("_")
        if prev is not None and k.isdigit() and prev[0] == stem and prev[1] + 1 == int(k):
            run.append(rid)
        else:
            flush()
            run = [rid]
        prev = (stem, int(k)) if k.isdigit() else None
    flush()
    return ", ".join(out)


def render(problem: FactoryProblem, profiles: dict, schedule: FactorySchedule, source: str) -> str:
    pool = problem.servers
    sources = sorted({p.source for (m, h), p in profiles.items() if h == pool.hardware})
    lines = [f"factory plan: {pool.num_servers} x {pool.hardware} serving + {pool.standby} standby; profiles "
             f"{source} ({', '.join(sources)})", ""]
    if not schedule.feasible:
        lines.append(f"NO FEASIBLE SCHEDULE: {schedule.reason}")
        return "\n".join(lines)
    lines += ["task classes:", "  task                      robots  t_act ms  H   weight  F_min/s  action Hz  actions/s"]
    for c in problem.classes:
        f = schedule.action_rate_hz.get(c.name, 0.0)
        lines.append(f"  {c.name:<24} {c.num_robots:>7} {c.action_period_s * 1e3:>9.0f} {c.system2_ratio:>3} "
                     f"{c.value_weight:>7.2f} {c.min_throughput:>8.1f} {f:>10.3f} {f * c.num_robots:>10.2f}")
    slo = {(c.component, c.model): c.slo_s for cls in problem.classes for c in cls.components}
    lines += ["", "servers:", "  #   component  model                  batch  robots  load/s   mean ms  p99 ms  SLO ms"]
    for a in sorted(schedule.assignments, key=lambda a: a.server):
        if a.standby_for is not None:
            continue
        # A pooled server ("safety+monitor": one model, ROSA's one model per server) holds the
        # strictest of its components' SLOs.
        d = min((slo[(c, a.model)] for c in hosted_components(a.component) if (c, a.model) in slo), default=None)
        lines.append(f"  {a.server:<3} {a.component:<10} {a.model:<22} {a.batch:>5} {len(a.robot_ids):>7} "
                     f"{a.load_hz:>7.2f} {a.predicted_mean_s * 1e3:>8.1f} {a.predicted_p99_s * 1e3:>7.1f} "
                     f"{d * 1e3 if d else float('nan'):>7.0f}")
    standbys = [a for a in schedule.assignments if a.standby_for is not None]
    if standbys:
        lines += ["", "hot standbys (loaded, off the routes):"]
        lines += [f"  {a.server:<3} {a.component:<10} {a.model:<22} batch {a.batch}, takes over server {a.standby_for}"
                  for a in standbys]
    lines += ["", "routing (robots per server):"]
    for a in sorted(schedule.assignments, key=lambda a: a.server):
        if a.standby_for is None and a.robot_ids:
            lines.append(f"  server {a.server} ({a.component}): {_ranges(a.robot_ids)}")
    att = ", ".join(f"{k} {v:.3f}" for k, v in sorted(schedule.predicted_slo_attainment.items()))
    lines += ["", f"predicted SLO attainment: {att}",
              f"factory throughput: {schedule.factory_throughput:.2f} actions/s "
              f"(weighted objective {schedule.weighted_objective:.2f}); solver {schedule.solver_time_s:.2f} s"]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    try:
        problem, profiles, source = load_problem(args)
    except FleetConfigError as e:
        print(f"physai-fleet plan: error: {e}", file=sys.stderr)
        return 2
    from physai_ros.scheduler.factory.solver import solve

    schedule = solve(problem, profiles, time_budget_s=args.time_budget)
    try:
        if args.json == "-":
            print(json.dumps(schedule.to_dict(), indent=1))
        else:
            print(render(problem, profiles, schedule, source))
            if args.json:
                Path(args.json).write_text(json.dumps(schedule.to_dict(), indent=1))
                print(f"schedule written to {args.json}")
        sys.stdout.flush()
    except BrokenPipeError:  # `physai-fleet plan | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0 if schedule.feasible else 1

