"""physai-fleet: the fleet of config/fleet.yaml (or --fleet FILE): the policy server and, per robot,
a simulated robot, its robot client and trajectory controller, observed by a monitor that prints a
summary and saves a contact sheet of the camera views. --scripted runs the robots with the
scripted expert instead of the policy server. --record-trace PATH writes what the robots' rounds
looked like as task traces (physai-trace/1) for the trace-driven fleet simulator.

The fleet is a list of ProcessSpec (physai_ros.fleet.processes): build_fleet() returns it, from the
serving plan (physai_ros.fleet.plan) or, with --scripted, the scripted robots below.
"""
from __future__ import annotations

import argparse
import dataclasses
import faulthandler
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

from physai_ros.fleet.arguments import fleet_config, parse_args
from physai_ros.fleet.processes import ProcessGroup, ProcessSpec
from physai_ros.fleet.run_watch import trace_meta, watch_clients, watch_pipeline_events, write_trace

SHM_PROFILE_BYTES = 300_000  # frames above this need the 16 MB shared-memory profile
# With localhost discovery Fast DDS announces a participant to 32 participant ids by default; a
# fleet with more node processes needs the profile's wider range (docs/soak.md: a 16-robot fleet
# served 8 robots without it).
DEFAULT_DISCOVERY_PEERS = 32
# A first start at 8 robots on a busy 2-core machine took 380 s (profiling every batch size while
# 25 other processes ran); the wait prints progress, so a long limit costs the user nothing.
SERVER_START_TIMEOUT_S = 600.0


def fastdds_profile_path() -> Path | None:
    """config/fastdds_shm.xml of this install (physai_ros.install_paths), None if absent."""
    from physai_ros.install_paths import InstallLayoutError, fastdds_profile_file

    try:
        path = fastdds_profile_file()
    except InstallLayoutError:
        return None
    return path if path.exists() else None


def scripted_robot_specs(k: int, args: argparse.Namespace) -> list[ProcessSpec]:
    """--scripted: robot k with the scripted planner instead of a policy server and client."""
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    task = tasks[k % len(tasks)]
    ns = f"robot_{k}"
    common = {"robot_id": ns, "num_joints": args.num_joints}
    return [
        ProcessSpec(f"{ns}/sim_robot", "physai_ros.nodes.sim_robot", ns,
                    {**common, "task": task, "seed": args.seed + k, "num_views": args.views,
                     "image_width": args.width, "image_height": args.height}),
        ProcessSpec(f"{ns}/trajectory_controller", "physai_ros.nodes.trajectory_controller", ns,
                    {**common, "control_rate_hz": args.control_rate, "merge": args.merge}),
        ProcessSpec(f"{ns}/scripted_planner", "physai_ros.nodes.scripted_planner", ns, {**common, "task": task}),
    ]


def build_fleet(args: argparse.Namespace) -> list[ProcessSpec]:
    """The fleet's processes, and the diagnostics aggregator rqt_robot_monitor needs (last)."""
    from physai_ros.fleet.plan import aggregator_spec, fleet_plan

    if args.scripted:
        return [spec for k in range(args.robots) for spec in scripted_robot_specs(k, args)] + [aggregator_spec()]
    cfg = fleet_config(args.fleet, args.robots, args.checkpoint)
    specs = fleet_plan(cfg)
    if args.checkpoint:
        # The server reads the fleet file itself; this parameter carries the replacement.
        specs = [dataclasses.replace(s, params={**s.params, "checkpoint": cfg.server.model.checkpoint})
                 if s.name == "policy_server" else s for s in specs]
    return specs + [aggregator_spec()]


def server_first(specs: list[ProcessSpec], scripted: bool) -> tuple[list[ProcessSpec], list[ProcessSpec]]:
    """(what starts first, what starts once the policy server's register service is up): the
    server and the diagnostics aggregator, then the robots. A --scripted fleet has no server:
    everything starts at once."""
    if scripted:
        return specs, []
    fleet_wide = ("policy_server", "diagnostics_aggregator")
    return ([s for s in specs if s.executable in fleet_wide], [s for s in specs if s.executable not in fleet_wide])


def monitored_robots(args: argparse.Namespace) -> dict[str, int]:
    """namespace -> camera views, for the monitor."""
    if args.scripted:
        return {f"robot_{k}": args.views for k in range(args.robots)}
    return {r.namespace: r.num_views for r in fleet_config(args.fleet, args.robots).robots}


def fleet_env(args: argparse.Namespace) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    frame = args.width * args.height * 3
    if not args.scripted:
        frame = max(h * w * 3 for r in fleet_config(args.fleet, args.robots).robots
                    for h, w in map(r.camera_size, range(r.num_views)))
    participants = 3 * args.robots + 2  # per robot sim, client, controller; server; this monitor
    if (frame > SHM_PROFILE_BYTES or participants > DEFAULT_DISCOVERY_PEERS) \
            and "FASTDDS_DEFAULT_PROFILES_FILE" not in env:
        profile = fastdds_profile_path()
        if profile is not None:
            env["FASTDDS_DEFAULT_PROFILES_FILE"] = str(profile)
    return env


TEARDOWN_DEADLINE_S = 30.0


def _abandon_teardown(exit_code) -> None:
    print(f"physai-fleet: DDS teardown still blocked after {TEARDOWN_DEADLINE_S:.0f} s (a stale Fast DDS "
          "shared-memory lock in /dev/shm?); the node processes are stopped and the results written; "
          "exiting without it", file=sys.stderr, flush=True)
    os._exit(exit_code())


def wait_for_start(executor, group, stopped, ready, what: str, timed_out, poll=lambda: None) -> int | None:
    """Spins the monitor until ready(); None then. Otherwise (a process died, a stop was asked,
    SERVER_START_TIMEOUT_S passed) says why and returns the exit code: no summary of a fleet
    that never ran."""
    ready_by = time.monotonic() + SERVER_START_TIMEOUT_S
    while not stopped() and time.monotonic() < ready_by and not group.exited() and not ready():
        executor.spin_once(timeout_sec=0.2)
        poll()
    poll()
    dead = group.exited()
    if not dead and not stopped() and ready():
        return None
    for name, rc in dead:
        print(f"physai-fleet: {name} exited with {rc} before {what}:\n{group.log_tail(name)}",
              file=sys.stderr, flush=True)
    if not dead and not stopped():
        print(f"physai-fleet: {timed_out()}", file=sys.stderr, flush=True)
    return 130 if stopped() and not dead else 1


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["keys"]:
        from physai_ros.fleet.keys_cli import main as keys_main

        return keys_main(argv[1:])
    if argv[:1] == ["operator"]:
        from physai_ros.fleet.operator_cli import main as operator_main

        return operator_main(argv[1:])
    if argv[:1] == ["plan"]:
        from physai_ros.fleet.plan_cli import main as plan_main

        return plan_main(argv[1:])
    # A crash inside DDS teardown (seen once as SIGSEGV after a 49-process soak) should say where.
    faulthandler.enable()
    args = parse_args(argv)
    env = fleet_env(args)
    from physai_ros.fleet.startup import choose_domain

    domain = choose_domain(env)
    env["ROS_DOMAIN_ID"] = str(domain.domain_id)
    os.environ.update({k: env[k] for k in ("ROS_AUTOMATIC_DISCOVERY_RANGE", "FASTDDS_DEFAULT_PROFILES_FILE",
                                           "ROS_DOMAIN_ID") if k in env})
    print(f"physai-fleet: ROS_DOMAIN_ID={domain.domain_id} ({domain.reason}); to watch this fleet "
          f"from another shell: export ROS_DOMAIN_ID={domain.domain_id}", flush=True)
    if args.dry_run:
        print_plan(args, env)
        return 0
    import rclpy
    from rclpy.signals import SignalHandlerOptions

    from physai_ros.fleet.report import (contact_sheet, format_serving, format_summary, rebase_series, run_frames,
                                         serving_summary, summary_doc, task_completion_line)
    from physai_ros.fleet.startup import StartupRelay, robots_not_streaming, server_answers
    from physai_ros.monitoring.pipeline_report import (fleet_totals, format_pipeline, format_totals,
                                                       pipeline_fields, with_pipeline_lines)
    from physai_ros.monitoring.text_report import (NO_LANGUAGE, format_language, language_doc, questions,
                                                   sheet_captions)
    from physai_ros.nodes.fleet_monitor import FleetMonitor
    from physai_ros.protocol.topics import REGISTER_SERVICE
    from physai_ros.serving.startup.preflight import STARTUP_LOG_PREFIX as STARTUP_PREFIX

    stop = False

    def request_stop(signum, frame) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    specs = build_fleet(args)
    group = ProcessGroup(args.log_dir, env)
    rclpy.init(signal_handler_options=SignalHandlerOptions.NO)
    monitor = None
    exit_code = 0
    started = time.monotonic()
    try:
        # The robots' processes start once the server is up: started together, the twelve of a
        # four-robot demo took 1.8 of 2 cores from the first second (imports, then 240 Hz
        # physics, cameras, controllers), and the server's own start (torch import, checkpoint,
        # warm-up: ~10 s of one core) stretched to 35-40 s.
        first, robots = server_first(specs, args.scripted)
        group.start_all(first)
        started_what = f"{len(first)} of {len(specs)}" if robots else f"{len(specs)}"
        print(f"physai-fleet: started {started_what} processes for {args.robots} robot(s); "
              f"running {args.duration:g} s (logs in {args.log_dir})", flush=True)
        capture = None
        if args.record_trace:
            from physai_ros.sim.trace_capture import FleetTraceCapture

            capture = FleetTraceCapture(list(monitored_robots(args)), t0=time.time(), meta=trace_meta(args))
        monitor = FleetMonitor(monitored_robots(args),
                               snapshot_period_s=args.snapshot_period or max(0.5, args.duration / 6),
                               probe_all=args.probe_all_streams, capture=capture)
        from rclpy.executors import SingleThreadedExecutor

        executor = SingleThreadedExecutor()
        executor.add_node(monitor)
        client_status = watch_clients(monitor, monitored_robots(args)) if not args.scripted else {}
        pipeline_events = watch_pipeline_events(monitor, monitored_robots(args)) if not args.scripted else None
        if not args.scripted:
            # The policy server imports torch and warms its engine up: the run's --duration
            # counts from when it serves, so a slow start does not eat the demo.
            # count_services counts servers only: the graph's service list also names a service
            # that only has clients, so the robot clients made it look ready at once.
            relay = StartupRelay(group.log_path("policy_server"), STARTUP_PREFIX,
                                 lambda line: print(f"physai-fleet: {line}", flush=True))
            failed = wait_for_start(
                executor, group, lambda: stop, lambda: monitor.count_services(REGISTER_SERVICE) > 0,
                "the policy server started", lambda: f"the policy server did not start within "
                f"{SERVER_START_TIMEOUT_S:.0f} s (log: {group.log_path('policy_server')})", relay.poll)
            if failed is not None:
                return failed
            group.start_all(robots)
            print(f"physai-fleet: [{time.monotonic() - started:5.1f} s] policy server started; started the "
                  f"robots' {len(robots)} processes", flush=True)
            failed = wait_for_start(
                executor, group, lambda: stop, lambda: server_answers(monitor, client_status),
                "the policy server served", lambda: f"the policy server did not serve within "
                f"{SERVER_START_TIMEOUT_S:.0f} s (log: {group.log_path('policy_server')})", relay.poll)
            if failed is not None:
                return failed
            print(f"physai-fleet: policy server up after {time.monotonic() - started:.1f} s; running "
                  f"{args.duration:g} s from now", flush=True)
            started = time.monotonic()
            if capture is not None:
                capture.t0 = time.time()  # tasks' arrival_s count from when the server serves
        else:
            # Scripted robots: the duration counts from when every robot's arm and controller
            # are heard from (imports and discovery of ~3 processes per robot come first).
            failed = wait_for_start(
                executor, group, lambda: stop, lambda: not robots_not_streaming(monitor), "its robots streamed",
                lambda: f"{', '.join(robots_not_streaming(monitor))} did not stream within "
                f"{SERVER_START_TIMEOUT_S:.0f} s (logs in {args.log_dir})")
            if failed is not None:
                return failed
            print(f"physai-fleet: robots streaming after {time.monotonic() - started:.1f} s; running "
                  f"{args.duration:g} s from now", flush=True)
            started = time.monotonic()
        while not stop and time.monotonic() - started < args.duration:
            executor.spin_once(timeout_sec=0.05)
            dead = group.exited()
            if dead:
                for name, rc in dead:
                    print(f"physai-fleet: {name} exited with {rc}:\n{group.log_tail(name)}", file=sys.stderr)
                exit_code = 1
                break
        elapsed = time.monotonic() - started
        # The monitor's series count from its start, before the server-up (or robots-streaming)
        # wait; elapsed counts from then. Their difference is the warm-up: the report's t = 0.
        warmup_s = max(0.0, monitor.clock() - elapsed)
        cpu = {name: round(sec / elapsed, 3) for name, sec in group.cpu_seconds().items()}
        summaries = monitor.summaries()
        print(format_summary(summaries, elapsed), flush=True)
        print(task_completion_line(summaries), flush=True)
        serving = [] if args.scripted else serving_summary(summaries, client_status)
        fleet_tasks = {} if args.scripted else {rb.id: rb.task.name
                                                for rb in fleet_config(args.fleet, args.robots).robots}
        for r in serving:  # task pipelines: the pipeline's counters and the PipelineEvents seen, per robot
            r.update(pipeline_fields(client_status.get(r["id"]), pipeline_events.doc(r["id"]), elapsed,
                                     fleet_tasks.get(r["id"], "")))
        pipelines = fleet_totals(serving)
        asked = {} if args.scripted else questions(fleet_config(args.fleet, args.robots).robots)
        off = "--scripted: no policy server, no language stream" if args.scripted else NO_LANGUAGE
        for line in (format_serving(serving) + format_pipeline(serving) + format_totals(pipelines)
                     + format_language(monitor.text_logs, asked, elapsed, off_reason=off)):
            print(line, flush=True)
        origin = warmup_s
        frames = run_frames(monitor.frames, origin)
        if any(cells for _, cells in frames):
            import cv2

            path = Path(args.contact_sheet)
            path.parent.mkdir(parents=True, exist_ok=True)
            captions = with_pipeline_lines(sheet_captions(monitor.text_logs, asked, frames, monitor.t0 + origin),
                                           frames, serving)
            cv2.imwrite(str(path), contact_sheet(frames, captions=captions))
            print(f"physai-fleet: contact sheet {path}", flush=True)
        else:
            print("physai-fleet: no camera frames arrived; no contact sheet", file=sys.stderr)
            exit_code = 1
        if capture is not None and not write_trace(capture, args.record_trace, elapsed):
            exit_code = 1
        extra = {"interrupted": stop, "cpu_fraction": cpu, "series": monitor.series(),
                 "language": language_doc(monitor.text_logs, asked)}
        extra.update(warmup_s=round(warmup_s, 1), series=rebase_series(extra["series"], warmup_s))
        if serving:
            extra["robots"] = serving  # the base summary plus the serving fields, per robot
        if pipelines["components"]:
            extra["pipelines"] = pipelines
        doc = summary_doc(summaries, elapsed, extra)
        if args.summary_json:
            Path(args.summary_json).parent.mkdir(parents=True, exist_ok=True)
            Path(args.summary_json).write_text(json.dumps(doc, indent=2))
        if args.report:
            from physai_ros.monitoring.report import render_dashboard
            from physai_ros.monitoring.run_summary import parse_summary

            try:
                print(f"physai-fleet: report {render_dashboard(parse_summary(doc), args.report)}", flush=True)
            except (ValueError, OSError) as exc:
                print(f"physai-fleet: no report: {exc}", file=sys.stderr)
                exit_code = 1
    finally:
        # Fast DDS shared memory: a port mutex left locked by a process killed earlier on this
        # machine blocks every later writer to that port for good, destroy_node included (seen:
        # Publisher.destroy -> SharedMemManager::Port::regenerate_port). Everything the run
        # reports is written by now, so teardown gets a deadline instead of a hang.
        watchdog = threading.Timer(TEARDOWN_DEADLINE_S, _abandon_teardown, args=(lambda: exit_code,))
        watchdog.daemon = True
        watchdog.start()
        # The Timer needs the GIL, and Fast DDS can block inside a call that holds it (seen: a
        # soak's physai-fleet stuck for minutes in Publisher.destroy). faulthandler's watchdog is
        # a C thread: it prints where the process hung and exits (status 1) without the GIL.
        faulthandler.dump_traceback_later(TEARDOWN_DEADLINE_S + 10.0, exit=True)
        codes = group.stop(grace_s=10.0)  # 49 processes on 2 cores take more than 5 s to stop
        if monitor is not None:
            monitor.destroy_node()
        rclpy.try_shutdown()
        faulthandler.cancel_dump_traceback_later()
        watchdog.cancel()
    bad = {n: c for n, c in codes.items() if c not in (0, -signal.SIGTERM)}
    if bad and exit_code == 0:
        print(f"physai-fleet: processes ended abnormally: {bad}", file=sys.stderr)
    return exit_code


def print_plan(args: argparse.Namespace, env: dict[str, str]) -> None:
    """--dry-run: what a run would use and start, resolved as the run resolves it."""
    from physai_ros.install_paths import install_layout

    layout = install_layout()
    print(f"physai-fleet: install {layout.kind}: package {layout.package_dir}, share {layout.share_dir}")
    if not args.scripted:
        cfg = fleet_config(args.fleet, args.robots, args.checkpoint)
        print(f"physai-fleet: fleet file {cfg.source} ({len(cfg.robots)} robot(s)), model "
              f"{cfg.server.model.checkpoint or 'preset ' + str(cfg.server.model.preset)}")
    print(f"physai-fleet: Fast DDS profile {env.get('FASTDDS_DEFAULT_PROFILES_FILE', '(none needed)')}")
    for spec in build_fleet(args):
        print("  " + " ".join(spec.argv()))
