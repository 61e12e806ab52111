"""Time with a person in the cell while the arm moves, over ROS with real processes, side by side:
no safety component, the served checkpoint's own safety component (the trained sim_pi0_pipeline
backbone answering "is the workcell safe?" from the robot's camera frames), and a perfect one
(the sim's ground truth, answered by this process with the server's key: lab's SafetyWatch).

One robot (pick and place, the trained checkpoint as System 1, sim_robot + robot_client +
trajectory_controller + policy_server as processes), intruders at `--intruders-per-min` (each
visit 0.75-1.25 x 2 s), the same sim seed in every mode. Per mode, after the arm first moves,
for `--seconds`: every finished visit's moving share (0.1 s bins in which the arm's joint path
exceeded 3 mrad), the time from entry until the arm stays at rest (visits that began with the
arm moving), and the arm's moving share outside the visits (what the safety component costs in
work). Figures from the sim's own joint states.

  python bench/safety_stop.py --seconds 120 --seeds 7,8,9 --json bench/results/safety_stop.json

The moving share with a person in the cell is pooled over every visit of every seed, with a 95 %
bootstrap interval over visits.
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import threading
import time
from pathlib import Path

import yaml

from physai_bench import results

REPO = Path(__file__).resolve().parents[1]
MODES = ("none", "model", "truth")
SAFETY = {"model": "vla", "prompt": "is the workcell safe? answer safe or unsafe.", "freq_hz": 5.0,
          "slo_ms": 500, "fallback": "hold"}
PIPELINE_KEYS = ("pipeline", "task_retry", "safety_and_slo_violation", "components")


def fleet_docs(rate_per_min: float, seed: int) -> dict[str, tuple[dict, dict]]:
    """mode -> (robot side, server side) fleet documents."""
    base = yaml.safe_load((REPO / "config/fleet_pipeline.yaml").read_text())
    robot = dict(base["robots"][0], id="safebench", task="pick_place")
    robot["sim"] = dict(robot["sim"], intruder_rate_per_min=rate_per_min, intruder_duration_s=2.0,
                        drop_prob=0.0, knock_prob=0.0, seed=seed)
    task = {k: v for k, v in base["tasks"]["pick_place_monitored"].items() if k not in PIPELINE_KEYS}
    base["server"].pop("language", None)
    out = {}
    for mode in MODES:
        plain = dict(base, tasks={"pick_place": dict(task)}, robots=[robot])
        piped = dict(base, robots=[robot], tasks={"pick_place": dict(
            task, safety_and_slo_violation={"max_consecutive_safety_replan": 10 ** 6,
                                            "max_consecutive_slo_violation": 10 ** 6},
            components={"safety": SAFETY})})
        out[mode] = {"none": (plain, plain), "model": (piped, piped), "truth": (piped, plain)}[mode]
    return out


def pooled_share(visits: list[list[float]]) -> float | None:
    """The arm's moving share over all the time with a person in the cell ([duration, share] per visit)."""
    total = sum(d for d, _ in visits)
    return round(sum(d * m for d, m in visits) / total, 4) if total else None


def bootstrap_ci(visits: list[list[float]], n: int = 2000, seed: int = 0) -> list[float] | None:
    """95 % interval of pooled_share, visits resampled with replacement."""
    import numpy as np

    if len(visits) < 2:
        return None
    rng = np.random.default_rng(seed)
    arr = np.asarray(visits, dtype=float)
    picks = rng.integers(0, len(arr), (n, len(arr)))
    shares = (arr[picks, 0] * arr[picks, 1]).sum(1) / arr[picks, 0].sum(1)
    return [round(float(x), 4) for x in np.percentile(shares, [2.5, 97.5])]


class Spinner:
    def __init__(self):
        import rclpy
        from rclpy.executors import SingleThreadedExecutor

        rclpy.init()
        self.node = rclpy.create_node("bench_safety_stop")
        self.executor = SingleThreadedExecutor()
        self.executor.add_node(self.node)
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._spin, daemon=True)
        self.thread.start()

    def _spin(self):
        while not self._stop.is_set():
            self.executor.spin_once(timeout_sec=0.05)

    def close(self):
        import rclpy

        self._stop.set()
        self.thread.join(5)
        self.node.destroy_node()
        rclpy.try_shutdown()


def run_mode(mode: str, docs: tuple[dict, dict], seconds: float, workdir: Path) -> dict:
    from physai_lab.evaluation.safety_watch import SafetyWatch
    from physai_ros.config.fleet import fleet_dir, load_fleet
    from physai_ros.fleet import plan as fleet_plan
    from physai_ros.fleet.processes import ProcessGroup
    from physai_ros.security.config import open_keystore
    from physai_ros.security.endpoints import ServerAuth

    paths = []
    for side, doc in zip(("robot", "server"), docs):
        p = workdir / f"{mode}_{side}.yaml"
        p.write_text(yaml.safe_dump(doc))
        paths.append(p)
    robot_fleet, server_fleet = load_fleet(paths[0]), load_fleet(paths[1])
    spin = Spinner()
    auth = None
    if mode == "truth":
        sec = robot_fleet.security
        auth = ServerAuth(open_keystore(sec, fleet_dir(robot_fleet), []), sec.server, sec.max_skew_s)
    watch = SafetyWatch(spin.node, "safebench", auth)
    group = ProcessGroup(workdir / f"logs_{mode}")
    try:
        group.start(fleet_plan.server_spec(server_fleet))
        for spec in fleet_plan.robot_specs(robot_fleet, robot_fleet.robots[0], controller=True):
            group.start(spec)
        deadline = time.monotonic() + 240
        while not watch.moving() and time.monotonic() < deadline:
            time.sleep(0.2)
        if not watch.moving():
            raise RuntimeError(f"{mode}: the arm never moved; logs in {workdir / f'logs_{mode}'}")
        t0 = time.monotonic()
        time.sleep(seconds)
        t1 = time.monotonic()
        visits = [v for v in watch.intrusions(since=t0) if v.leave <= t1]
        in_cell = sum(v.leave - v.entry for v in visits)
        moving_in_cell = sum((v.leave - v.entry) * v.moving_share for v in visits)
        stops = [v.stop_after_s for v in visits if v.moving_at_entry]
        outside_bins = [(t0 + k * 0.1) for k in range(int((t1 - t0) / 0.1))]
        outside = [b for b in outside_bins if not any(v.entry - 0.1 <= b <= v.leave for v in visits)]
        moving_outside = (sum(watch.path(b, b + 0.1) > 0.003 for b in outside) / len(outside)) if outside else None
        return {"visit_log": [[round(v.leave - v.entry, 3), round(v.moving_share, 4)] for v in visits],
                "visits": len(visits), "person_in_cell_s": round(in_cell, 2),
                "moving_share_with_person": round(moving_in_cell / in_cell, 4) if in_cell else None,
                "visits_moving_at_entry": len(stops),
                "stopped_in_visit": sum(s is not None for s in stops),
                "stop_after_entry_s": sorted(round(s, 3) for s in stops if s is not None),
                "moving_share_without_person": round(moving_outside, 4) if moving_outside is not None else None,
                "safety_answers_from_truth": len(watch.answers), "exited": group.exited()}
    finally:
        group.stop()
        spin.close()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=120.0)
    ap.add_argument("--intruders-per-min", type=float, default=10.0)
    ap.add_argument("--seeds", default="7", help="sim seeds (the intruders' schedule), each run in every mode")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--quick", action="store_true", help="12 s per mode, one seed")
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)
    if args.quick:
        args.seconds, args.seeds = 12.0, args.seeds.split(",")[0]
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    run_info = results.start_run(
        "one sim robot over ROS 2 (real processes), sim_pi0_pipeline as System 1 and safety model, safety asked at "
        f"{SAFETY['freq_hz']:g} Hz with a {SAFETY['slo_ms']} ms SLO, hold fallback; {args.seconds:g} s per mode and "
        f"seed, intruders at {args.intruders_per_min:g}/min", __file__, argv, quick=args.quick)
    report = {"modes": {}}
    modes = args.modes.split(",")
    runs: dict[str, list[dict]] = {m: [] for m in modes}
    for seed in (int(x) for x in args.seeds.split(",")):
        docs = fleet_docs(args.intruders_per_min, seed)
        with tempfile.TemporaryDirectory(prefix="safety_stop_") as tmp:
            for mode in modes:
                runs[mode].append(dict(run_mode(mode, docs[mode], args.seconds, Path(tmp)), seed=seed))
                print(mode, seed, json.dumps(runs[mode][-1]), flush=True)
    for mode in modes:
        visits = [v for r in runs[mode] for v in r["visit_log"]]
        report["modes"][mode] = {"moving_share_with_person": pooled_share(visits),
                                 "moving_share_with_person_ci95": bootstrap_ci(visits), "visits": len(visits),
                                 "runs": runs[mode]}
    report = results.write_result(args.json, run_info, report)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
