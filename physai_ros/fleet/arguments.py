"""physai-fleet's command line: the options, and the checks that must fail before any process
starts (the fleet file, the checkpoint's files, the keystore), each in one line."""
from __future__ import annotations

import argparse

DESCRIPTION = """physai-fleet: the fleet of config/fleet.yaml (or --fleet FILE): the policy server and, per robot,
a simulated robot, its robot client and trajectory controller, observed by a monitor that prints a
summary and saves a contact sheet of the camera views. --scripted runs the robots with the
scripted expert instead of the policy server. --record-trace PATH writes what the robots' rounds
looked like as task traces (physai-trace/1) for the trace-driven fleet simulator."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="physai-fleet", description=DESCRIPTION)
    ap.add_argument("--fleet", default=None, help="fleet.yaml (default: the embedded config/fleet.yaml)")
    ap.add_argument("--scripted", action="store_true",
                    help="drive the robots with the scripted expert instead of the policy server")
    ap.add_argument("--robots", type=int, default=None,
                    help="number of robots (default: as listed in the fleet file; 2 with --scripted)")
    ap.add_argument("--duration", type=float, default=30.0,
                    help="seconds to run, counted from when the policy server serves (its start-up, "
                         "which can take a minute on a busy machine, is not counted; default 30)")
    ap.add_argument("--dry-run", action="store_true",
                    help="print the install layout, fleet file, ROS domain and the processes, and exit")
    ap.add_argument("--tasks", default="pick_and_place,reach", help="comma list, assigned round robin")
    ap.add_argument("--views", type=int, default=1, help="camera views per robot, 1..3")
    ap.add_argument("--width", type=int, default=224)
    ap.add_argument("--height", type=int, default=224)
    ap.add_argument("--num-joints", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0, help="robot k uses seed+k")
    ap.add_argument("--control-rate", type=float, default=480.0, help="trajectory controller rate, Hz")
    ap.add_argument("--merge", default="replace", help="chunk merge rule: replace, crossfade, weighted_average")
    ap.add_argument("--contact-sheet", default="out/demo_contact_sheet.png")
    ap.add_argument("--summary-json", default=None)
    ap.add_argument("--report", default=None, metavar="PATH",
                    help="render the PNG run dashboard (physai_ros.monitoring.report) to PATH")
    ap.add_argument("--log-dir", default="out/fleet_logs")
    ap.add_argument("--probe-all-streams", action="store_true",
                    help="also subscribe to the 480 Hz wrench and joint_trajectory streams (costly)")
    ap.add_argument("--snapshot-period", type=float, default=None,
                    help="seconds between contact-sheet frames (default duration/6)")
    ap.add_argument("--checkpoint", default=None, metavar="DIR", help="serve this policy directory (LeRobot "
                    "<= 0.3 or >= 0.4, or ours) instead of the fleet file's server.model")
    ap.add_argument("--record-trace", default=None, metavar="PATH",
                    help="write one task trace per robot (physai-trace/1 JSON, physai_ros.sim.traces) "
                         "from the observation/action_chunk/execution_info topics; needs the policy server")
    args = ap.parse_args(argv)
    if args.record_trace and args.scripted:
        ap.error("--record-trace records the policy server's rounds: it cannot be used with --scripted")
    if args.checkpoint and args.scripted:
        ap.error("--checkpoint sets the policy server's model: it cannot be used with --scripted")
    from physai_ros.install_paths import InstallLayoutError
    from physai_ros.config.fleet import FleetConfigError
    from physai_ros.security.keystore import KeystoreError
    from physai_ros.serving.startup.preflight import ServerFilesError, check_keystore, check_server_files

    try:
        if args.scripted:
            args.robots = 2 if args.robots is None else args.robots
        else:
            cfg = fleet_config(args.fleet, checkpoint=args.checkpoint)
            if args.robots is None and args.fleet is None:
                args.robots = demo_robots(len(cfg.robots))
            args.robots = len(cfg.robots) if args.robots is None else args.robots
            from physai_ros.fleet.plan import check_sim

            check_sim(cfg)
            # Before any process starts: a missing checkpoint is named now, not a minute later
            # (the robots that will run: --robots may run fewer than the file lists).
            check_server_files(cfg.with_num_robots(args.robots))
            check_keystore(cfg.with_num_robots(args.robots))
    except (FleetConfigError, ServerFilesError, InstallLayoutError, KeystoreError) as e:
        ap.exit(2, f"physai-fleet: error: {e}\n")
    if args.robots < 1:
        ap.error("--robots must be >= 1")
    if args.duration <= 0:
        ap.error("--duration must be positive")
    return args


def demo_robots(listed: int) -> int:
    """The default demo's robots run on this machine: as many as its cores carry beside the
    server (fleet.startup.robots_that_fit), said when that is fewer than the file lists."""
    from physai_ros.fleet.startup import ROBOT_SIDE_CORES, SERVER_CORES, available_cores, robots_that_fit

    cores = available_cores()
    fit = robots_that_fit(cores, listed)
    if fit < listed:
        print(f"physai-fleet: {cores:g} core(s) here: running {fit} of the demo's {listed} simulated robots "
              f"(each takes ~{ROBOT_SIDE_CORES:g} of a core beside the server's ~{SERVER_CORES:g}); "
              f"--robots {listed} runs all", flush=True)
    return fit


def fleet_config(path, robots=None, checkpoint=None):
    """The fleet file (the embedded one for None), with --checkpoint and --robots applied."""
    from physai_ros.config.fleet import load_fleet

    cfg = load_fleet(path)
    if checkpoint:
        cfg = cfg.with_checkpoint(checkpoint)
    return cfg.with_num_robots(robots) if robots else cfg
