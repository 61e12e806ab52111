"""Where System 1 rounds run under a factory plan, side by side on this machine: the plan
enforced (one queue per System 1 instance, `factory.queues: per_instance`), the plan advisory
(one queue over the plan's System 1 instances, `factory.queues: shared`), and no plan at all
(one queue over every instance).

The real serving path without ROS: a ServingCore with real tiny pi0 engines (torch on CPU), its
ServingThreads (a dispatcher and one thread per instance, one torch thread each), and closed-loop
robots in this process (send a round, wait for its chunk, execute it for `exec_s`, send the
next). The plan is the real solver's, on System 1's service times measured here first. Reports
per mode: rounds served, SLO attainment per task class, qualified actions/s (actions of chunks
that met their SLO, per second), with the machine's load.

Scenarios:
  equal     one task class, robots spread over two identical instances (where a shared queue
            should not lose: it is work-conserving);
  skewed    two classes: `precise` (tight SLO, few robots) and `bulk` (loose SLO, many robots
            sending as fast as they can); whether the plan keeps `precise` apart is the solver's
            decision, printed with the result.

  python bench/factory_routing.py --seconds 20 --reps 2 --json bench/results/factory_routing.json
"""
from __future__ import annotations

import argparse
import json
import threading
import time
from collections import defaultdict

import numpy as np

from physai_bench import results
from physai_ros.config.fleet import parse_fleet
from physai_ros.protocol.observation import ImageData, ObservationData
from physai_ros.scheduler.factory.profiling import profile_from_service_times
from physai_ros.scheduler.factory.solver import solve
from physai_ros.scheduler.factory.types import ComponentSpec, FactoryProblem, ServerPool, TaskClass
from physai_ros.serving.factory_runtime import FactoryRuntime
from physai_ros.serving.serving_threads import ServingThreads
from physai_ros.serving.startup.engine_builder import build_core

HW = (32, 32)
JOINTS = 5
SCENARIOS = {
    # class -> (robots, SLO s, exec s between rounds)
    "equal": {"pick": (8, 0.25, 0.05)},
    "skewed": {"precise": (2, 0.12, 0.05), "bulk": (8, 1.0, 0.0)},
}
MODES = ("enforced", "advisory", "no_plan")


def fleet(classes: dict) -> object:
    robots = [{"id": f"{c}_{k}", "task": c, "cameras": ["camera_0/image_raw"], "image_height": HW[0],
               "image_width": HW[1], "joints": [f"joint_{i}" for i in range(JOINTS - 1)] + ["gripper"],
               "sim": {"task": "pick_and_place", "num_joints": JOINTS - 1}, "control_rate_hz": 50,
               "simulated": True} for c, (n, _, _) in classes.items() for k in range(n)]
    tasks = {c: {"prompt": f"do the {c} task", "action_rate_hz": 10, "horizon_policy": {"name": "static", "params": [8]},
                 "slo_ms": slo * 1e3, "fallback": "hold", "max_consecutive_slo_violation": 10 ** 6}
             for c, (_, slo, _) in classes.items()}
    return parse_fleet({"server": {"model": {"preset": "tiny", "tokenizer": "package://physai_ros/assets/tokenizer.json",
                                             "max_token_len": 48},
                                   "device": "cpu", "engine_instances": 2, "max_batch": 4, "scheduler": "wait_ratio",
                                   "profile": False, "max_observation_age_s": 30.0, "torch_threads": 1},
                        "tasks": tasks, "robots": robots})


def observation(robot: str, task: str, round_id: int) -> ObservationData:
    img = np.random.default_rng(round_id).integers(0, 256, (*HW, 3), dtype=np.uint8)
    return ObservationData(robot_id=robot, task_id=task, round_id=round_id, stamp=time.time(),
                           images=(ImageData(HW[0], HW[1], "rgb8", HW[1] * 3, img.tobytes()),),
                           state=np.zeros(JOINTS, np.float32), wrench=np.zeros(6, np.float32), wrench_stamp=0.0,
                           prompt=f"do the {task} task", exec_phase_start=0.0, actions_remaining=0,
                           control_period=0.02, horizon_policy="static", horizon_params=(8.0,))


def measure_service(cfg, reps: int = 5) -> dict[int, float]:
    """System 1's batch service time here (the engine time chunks report, median of reps) at
    batch 1..4, on a one-instance core."""
    import dataclasses

    from physai_ros.client.robot_client import RobotClientCore

    one = dataclasses.replace(cfg, server=dataclasses.replace(cfg.server, engine_instances=1))
    core = build_core(one, instance_id="profile")
    core.warm_up()
    robots = list(cfg.robots)[:4]
    for r in robots:
        assert core.register(RobotClientCore(r).registration()).accepted
    out, rnd = {}, 0
    for b in (1, 2, 3, 4):
        times = []
        for _ in range(reps):
            rnd += 1
            for r in robots[:b]:
                core.submit(observation(r.id, r.task.name, rnd))
            chunks = core.step().chunks
            assert len(chunks) == b and all(c.error == "" for c in chunks), [c.error for c in chunks]
            times.append(chunks[0].inference_ms / 1e3)
        out[b] = float(np.median(times))
    return out


def plan(cfg, classes: dict, service: dict[int, float]):
    profiles = {("tiny", "cpu"): profile_from_service_times("tiny", "cpu", service, requests=1000)}
    problem = FactoryProblem(tuple(TaskClass(c, tuple(r.id for r in cfg.robots if r.task.name == c),
                                             (ComponentSpec("system1", "tiny", slo),), action_period_s=max(ex, 0.02))
                                   for c, (_, slo, ex) in classes.items()), ServerPool(2, "cpu"))
    return problem, profiles, solve(problem, profiles)


def run_mode(cfg, classes: dict, mode: str, seconds: float, planned) -> dict:
    core = build_core(cfg, instance_id=f"bench_{mode}")
    core.warm_up()
    if mode != "no_plan":
        problem, profiles, schedule = planned
        core.apply_factory(FactoryRuntime(problem, profiles, schedule, [(i, s.standby) for i, s in core.engines.items()],
                                          apply_reschedules=False, per_instance_queues=mode == "enforced"))
    from physai_ros.client.robot_client import RobotClientCore

    for r in cfg.robots:
        assert core.register(RobotClientCore(r).registration()).accepted
    done: dict[tuple[str, int], tuple[float, str, int]] = {}
    cv = threading.Condition()

    def on_chunks(chunks):
        with cv:
            for c in chunks:
                done[(c.robot_id, c.round_id)] = (time.time(), c.engine_instance, len(c.actions))
            cv.notify_all()

    threads = ServingThreads(core, on_chunks, lambda rid, rnd: None, torch_threads=1).start()
    stop = threading.Event()
    results = defaultdict(list)  # class -> (latency, engine, actions)

    def robot(rid: str, cls: str, exec_s: float):
        rnd = 1
        while not stop.is_set():
            sent = time.time()
            threads.submit(observation(rid, cls, rnd))
            with cv:
                cv.wait_for(lambda: (rid, rnd) in done or stop.is_set(), 30)
                got = done.get((rid, rnd))
            if got is None:
                break
            results[cls].append((got[0] - sent, got[1], got[2]))
            stop.wait(exec_s)
            rnd += 1

    loops = [threading.Thread(target=robot, args=(r.id, r.task.name, classes[r.task.name][2]), daemon=True)
             for r in cfg.robots]
    t0 = time.time()
    for t in loops:
        t.start()
    stop.wait(seconds)
    stop.set()
    for t in loops:
        t.join(5)
    threads.stop()
    wall = time.time() - t0
    out = {}
    for cls, rows in results.items():
        slo = classes[cls][1]
        lat = np.array([r[0] for r in rows])
        met = lat <= slo
        out[cls] = {"rounds": len(rows), "slo_ms": slo * 1e3, "slo_attainment": round(float(met.mean()), 4),
                    "p50_ms": round(float(np.median(lat)) * 1e3, 1), "p99_ms": round(float(np.percentile(lat, 99)) * 1e3, 1),
                    "qualified_actions_per_s": round(sum(r[2] for r, m in zip(rows, met) if m) / wall, 1),
                    "instances": dict(sorted(defaultdict(int, {e: sum(1 for r in rows if r[1] == e)
                                                                 for e in {r[1] for r in rows}}).items()))}
    out["qualified_actions_per_s"] = round(sum(v["qualified_actions_per_s"] for v in out.values()), 1)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--reps", type=int, default=2, help="runs per mode, the modes' order rotated each time")
    ap.add_argument("--quick", action="store_true", help="the first scenario, 5 s, one repetition")
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)
    if args.quick:
        args.seconds, args.reps, args.scenarios = 5.0, 1, args.scenarios.split(",")[0]
    import torch

    torch.set_num_threads(1)
    run_info = results.start_run(f"tiny pi0 on CPU, 2 engine instances as threads, closed-loop robots in-process, no "
                                 f"ROS; {args.seconds:g} s per mode and repetition", __file__, argv, quick=args.quick)
    report = {"scenarios": {}}
    for name in args.scenarios.split(","):
        classes = SCENARIOS[name]
        cfg = fleet(classes)
        service = measure_service(cfg)
        planned = plan(cfg, classes, service)
        schedule = planned[2]
        entry = {"service_ms": {b: round(t * 1e3, 1) for b, t in service.items()},
                 "plan": schedule.reason if not schedule.feasible else
                 {f"server {a.server}": f"{a.component} b{a.batch}: {', '.join(a.robot_ids)}" for a in schedule.assignments},
                 "modes": {}}
        modes = MODES if schedule.feasible else ("no_plan",)
        runs = defaultdict(list)
        for rep in range(args.reps):
            for mode in modes[rep % len(modes):] + modes[:rep % len(modes)]:
                runs[mode].append(run_mode(cfg, classes, mode, args.seconds, planned))
                print(name, mode, json.dumps(runs[mode][-1]), flush=True)
        for mode in modes:
            entry["modes"][mode] = {
                "median_qualified_actions_per_s": float(np.median([r["qualified_actions_per_s"] for r in runs[mode]])),
                "median_slo_attainment": {c: float(np.median([r[c]["slo_attainment"] for r in runs[mode]]))
                                          for c in classes},
                "runs": runs[mode]}
        base = entry["modes"].get("no_plan", {}).get("median_qualified_actions_per_s")
        entry["qualified_actions_ratio_vs_no_plan"] = {
            m: round(v["median_qualified_actions_per_s"] / base, 3) for m, v in entry["modes"].items() if base}
        report["scenarios"][name] = entry
    report = results.write_result(args.json, run_info, report)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
