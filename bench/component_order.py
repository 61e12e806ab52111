"""Which component question goes first, side by side on the server's real component path:
Kairos multi-agent order (agents ranked by their remaining latency in the pipelines' steps),
shortest predicted first, and arrival order (`server.components.order`).

The real ComponentService with the real VLA backbone backend (the tiny pi0 preset, random
weights: the answers' text is noise, their timing is the model's) on this machine's CPU, fed by
robots in this process that each run pipeline steps as the robot client does: System 2's
question (12 tokens), then `checks` rounds of a safety and a monitor question asked together
(4 tokens each), a short pause between rounds; a step ends with its last answer and the next
begins with a new planner question (which is also how the server cuts the steps). Measured after
a warm-up (the first third of each run, where Kairos is still learning): step latency (planner
asked -> last answer of the step), each component's answer latency, steps per second.

Not measured here: the memory-aware time-slot dispatcher (bench/component_memory.py runs this
rig with it), and a model whose monitor ends steps by its verdict (here the next subgoal ends a
step).

  python bench/component_order.py --robots 4,8 --seconds 60 --reps 2 --json bench/results/component_order.json
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
from physai_ros.pipeline.backend import ComponentQuery
from physai_ros.protocol.component import ComponentRequest
from physai_ros.serving.pipeline.service import ComponentService, ComponentServiceSettings
from physai_ros.serving.startup.engine_builder import build_core

ORDERS = ("kairos", "shortest", "fifo")
HW = (32, 32)
PROMPT = "pick up the cube and place it on the goal"
QUESTIONS = {"system2": ("next step? task: {task}", 12), "safety": ("is the workcell safe?", 4),
             "monitor": ("ongoing, done, or failed?", 4)}


def fleet(n: int, order: str):
    task = {"prompt": PROMPT, "action_rate_hz": 10, "horizon_policy": {"name": "static", "params": [8]},
            "slo_ms": 5000, "fallback": "hold", "max_consecutive_slo_violation": 100,
            "pipeline": {"system2_to_system1_call_ratio": 2},
            "components": {"system2": {"model": "vla", "prompt": QUESTIONS["system2"][0], "slo_ms": 10000},
                           "safety": {"model": "vla", "prompt": QUESTIONS["safety"][0], "freq_hz": 1, "slo_ms": 10000},
                           "monitor": {"model": "vla", "prompt": QUESTIONS["monitor"][0], "freq_hz": 1,
                                       "slo_ms": 10000}}}
    robots = [{"id": f"r{k}", "task": "inspect", "sim": {"task": "pick_and_place", "num_joints": 4, "seed": k},
               "cameras": ["camera_0/image_raw"], "image_height": HW[0], "image_width": HW[1],
               "joints": ["joint_0", "joint_1", "joint_2", "joint_3", "gripper"], "control_rate_hz": 50,
               "simulated": True} for k in range(n)]
    return parse_fleet({"server": {"model": {"preset": "tiny", "tokenizer": "package://physai_ros/assets/tokenizer.json",
                                             "max_token_len": 48},
                                   "device": "cpu", "engine_instances": 1, "max_batch": 4, "scheduler": "fifo",
                                   "profile": False, "components": {"order": order, "max_batch": 4, "max_queue": 64}},
                        "tasks": {"inspect": task}, "robots": robots, "security": {"insecure": True}})


def run(n: int, order: str, seconds: float, checks: int, pause_s: float, kv_budget_mb: float | None = None,
        wrap=None) -> dict:
    """One run; kv_budget_mb: the memory dispatcher's budget (None: off); wrap(backends) ->
    backends: what the service is given instead of fleet.yaml's (bench/component_memory.py
    meters them). The result carries the service's `memory.*` diagnostics when gated."""
    from physai_ros.client.robot_client import RobotClientCore
    from physai_ros.serving.pipeline.backends import load_backends

    cfg = fleet(n, order)
    core = build_core(cfg, instance_id=f"order_{order}")
    for r in cfg.robots:
        assert core.register(RobotClientCore(r).registration()).accepted
    answered: dict[tuple[str, int], float] = {}
    cv = threading.Condition()

    def on_answers(answers):
        with cv:
            for a in answers:
                answered[(a.robot_id, a.query_id)] = time.monotonic()
            cv.notify_all()

    backends = load_backends(cfg, core)
    svc = ComponentService(cfg, core, on_answers, backends=wrap(backends) if wrap else backends,
                           settings=ComponentServiceSettings(order=order, max_batch=4, max_queue=64,
                                                             kv_budget_mb=kv_budget_mb))
    rng = np.random.default_rng(0)
    frame = tuple(rng.integers(0, 256, (*HW, 3), dtype=np.uint8) for _ in range(1))
    stop = threading.Event()
    steps: list[tuple[float, float]] = []  # (start, latency) per finished step
    per_comp = defaultdict(list)  # component -> (asked, latency)
    qid = defaultdict(int)

    def ask(robot: str, comp: str, stamp: float) -> int:
        qid[robot] += 1
        q, tokens = QUESTIONS[comp]
        query = ComponentQuery(robot, comp, q.replace("{task}", PROMPT), PROMPT, frame,
                               np.zeros(5, np.float32), tokens)
        assert svc.submit(ComponentRequest(qid[robot], "inspect", query, stamp=stamp)) is None
        return qid[robot]

    def wait(robot: str, ids: list[int]) -> float | None:
        with cv:
            ok = cv.wait_for(lambda: stop.is_set() or all((robot, i) in answered for i in ids), 60)
            return max(answered[(robot, i)] for i in ids) if ok and not stop.is_set() else None

    def robot(name: str):
        while not stop.is_set():
            start = time.monotonic()
            wall = time.time()
            i = ask(name, "system2", wall)
            t = wait(name, [i])
            if t is None:
                return
            per_comp["system2"].append((start, t - start))
            for _ in range(checks):
                asked = time.monotonic()
                ids = [ask(name, "safety", wall), ask(name, "monitor", wall)]
                t = wait(name, ids)
                if t is None:
                    return
                for c, i in zip(("safety", "monitor"), ids):
                    per_comp[c].append((asked, answered[(name, i)] - asked))
                stop.wait(pause_s)
            steps.append((start, t - start))

    threads = [threading.Thread(target=robot, args=(r.id,), daemon=True) for r in cfg.robots]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    stop.wait(seconds)
    stop.set()
    with cv:
        cv.notify_all()
    for t in threads:
        t.join(10)
    measured_from = t0 + seconds / 3
    svc.close(10.0)
    lat = np.array([x for s, x in steps if s >= measured_from])
    out = {"steps": int(lat.size), "steps_per_s": round(lat.size / (seconds * 2 / 3), 3),
           "step_mean_ms": round(float(lat.mean()) * 1e3, 1) if lat.size else None,
           "step_p95_ms": round(float(np.percentile(lat, 95)) * 1e3, 1) if lat.size else None,
           "answer_mean_ms": {c: round(float(np.mean([x for s, x in v if s >= measured_from])) * 1e3, 1)
                              for c, v in per_comp.items()},
           "agent_order": svc.order.diagnostics()["agent_order"],
           "memory": {k: v for k, v in svc.diagnostics().items() if k.startswith("memory.")}}
    return out


def load_entry(runs: dict) -> dict:
    """One load's conditions (name -> its runs): medians over the runs, and each condition's mean
    step latency over FIFO's (the condition named "fifo")."""
    entry = {c: {"median_step_mean_ms": float(np.median([r["step_mean_ms"] for r in rs])),
                 "median_step_p95_ms": float(np.median([r["step_p95_ms"] for r in rs])),
                 "median_steps_per_s": float(np.median([r["steps_per_s"] for r in rs])), "runs": rs}
             for c, rs in runs.items()}
    base = entry["fifo"]["median_step_mean_ms"]
    entry["step_mean_vs_fifo"] = {c: round(v["median_step_mean_ms"] / base, 3) for c, v in entry.items()
                                  if isinstance(v, dict) and "median_step_mean_ms" in v}
    return entry


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--robots", default="4,8")
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--checks", type=int, default=2, help="safety + monitor rounds per step")
    ap.add_argument("--pause-s", type=float, default=0.1)
    ap.add_argument("--quick", action="store_true", help="2 robots, 6 s, one repetition")
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)
    if args.quick:
        args.robots, args.seconds, args.reps = "2", 6.0, 1
    import torch

    torch.set_num_threads(1)
    run_info = results.start_run("tiny pi0 backbone (random weights) on CPU, one component backend, robots "
                                 "in-process, no ROS", __file__, argv, quick=args.quick)
    report = {"loads": {}}
    for n in (int(x) for x in args.robots.split(",")):
        runs = defaultdict(list)
        for rep in range(args.reps):
            for order in ORDERS[rep % 3:] + ORDERS[:rep % 3]:
                runs[order].append(run(n, order, args.seconds, args.checks, args.pause_s))
                print(n, order, json.dumps(runs[order][-1]), flush=True)
        report["loads"][f"{n}_robots"] = load_entry(runs)
    report = results.write_result(args.json, run_info, report)
    print(json.dumps({k: v for k, v in report.items() if k != "loads"}, indent=1))
    for load, e in report["loads"].items():
        print(load, {o: (v["median_step_mean_ms"], v["median_step_p95_ms"]) for o, v in e.items() if isinstance(v, dict)
                     and "median_step_mean_ms" in v}, e["step_mean_vs_fifo"])


if __name__ == "__main__":
    main()
