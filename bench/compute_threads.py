"""Engine time on the policy server's serving thread, old layout vs new (serving.compute_threads).

The default fleet's core (sim_pi0, fast path, CPU) serves one robot, one 224 view, through the
real ServingCore (submit, dispatch, run_batch); the figure is the chunk's inference_ms. Each
layout runs in its own fresh process, because OpenMP thread teams are process-wide state:
  builder   the thread that built the model serves (the ideal: one team)
  second    the main thread builds, warms up and profiles; a second thread serves (the server's
            default, server.torch_threads 0: two teams, libgomp's throttled spin)
  pinned    the main thread pinned to one thread, the model built in a thread that ends, a
            second thread serves with --threads (the server with server.torch_threads N)
  ask2      pinned, and beside the serving thread a component thread asks the VLA backbone a
            question on its own prefill every --ask-period-s (a pipeline's safety and monitor)
            at two threads: a second team
  ask1      the same, the component thread at one thread (what the component service sets)
The ask layouts also report the component answers' latency. builder and second use torch's
default count (what the server used before). --busy N runs N busy-looping processes beside every
layout: cores shared with other processes, as in `make demo` (13 processes on 2 cores).

  python bench/compute_threads.py --calls 60 --reps 3 --json
  python bench/compute_threads.py --layouts second,pinned --threads 2 --busy 4
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import threading
import time

import numpy as np

LAYOUTS = ("builder", "second", "pinned", "ask2", "ask1")


def asker(core, threads: int, period_s: float, stop: threading.Event, latencies: list) -> None:
    """A component thread: one VLA question on its own prefill every period_s until stop."""
    from physai_ros.serving.compute_threads import use_threads
    from physai_ros.pipeline.vla_backend import VLABackboneBackend, VLABackendSettings
    from vla_backend import _queries  # bench/vla_backend.py: the same question and images

    use_threads(threads)
    slot = next(iter(core.engines.values()))
    backend = VLABackboneBackend(slot.engine, core.action_runner, VLABackendSettings(use_shared=False))
    k = 0
    while not stop.wait(period_s):
        k += 1
        latencies.append(backend.answer(_queries(1, k))[0].latency_ms)


def child(layout: str, calls: int, ask_period_s: float, serve_threads: int) -> dict:
    import array

    from physai_ros.serving.compute_threads import build_for, use_threads
    from physai_ros.protocol.registration import RobotRegistration
    from physai_ros.ros.codecs.observation import observation_from_msg
    from physai_ros.ros.time_conv import time_from_sec
    from physai_ros.config.fleet import load_fleet
    from physai_ros.serving.startup.engine_builder import build_core
    from physai_ros_interfaces.msg import Observation
    from sensor_msgs.msg import Image

    def build():
        core = build_core(load_fleet(None))
        core.warm_up()
        return core

    threads = serve_threads if layout in ("pinned", "ask2", "ask1") else None
    core = build_for(threads, build)
    reg = RobotRegistration(robot_id="r0", task_id="bench", robot_namespace="r0", prompt="pick up the cube",
                            camera_topics=(), num_views=1, image_height=224, image_width=224,
                            joint_names=tuple(f"j{i}" for i in range(5)), state_dim=5, action_dim=5,
                            control_period=0.02)
    assert core.register(reg).accepted
    im = Image(height=224, width=224, encoding="rgb8", step=224 * 3)
    im.data = array.array("B", np.random.default_rng(0).integers(0, 256, 224 * 224 * 3, dtype=np.uint8).tobytes())
    times: list[float] = []

    def serve() -> None:
        use_threads(threads)
        for k in range(1, calls + 11):
            msg = Observation(robot_id="r0", task_id="bench", round_id=k, prompt="pick up the cube")
            msg.header.stamp = time_from_sec(time.time())
            msg.images = [im]
            msg.state = array.array("f", [0.0] * 5)
            msg.control_period = 0.02
            core.submit(observation_from_msg(msg), notify=False)
            for work in core.dispatch().work:
                for chunk in core.run_batch(work):
                    if k > 10:  # the first ten: warm-up on this thread
                        times.append(chunk.inference_ms)

    stop, answers, side = threading.Event(), [], None
    if layout.startswith("ask"):
        side = threading.Thread(target=asker, args=(core, 2 if layout == "ask2" else 1, ask_period_s, stop, answers),
                                name="component_service_0")
        side.start()
    csw0 = resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw
    if layout == "builder":
        serve()
    else:
        t = threading.Thread(target=serve, name="serving_engine_0")
        t.start()
        t.join()
    csw = resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw - csw0
    stop.set()
    if side is not None:
        side.join()
    a = np.array(times)
    out = {"engine_ms_p50": float(np.percentile(a, 50)), "engine_ms_p90": float(np.percentile(a, 90)),
           "engine_ms_p99": float(np.percentile(a, 99)), "voluntary_switches_per_call": csw / len(a), "calls": len(a)}
    if answers:
        out.update(answers=len(answers), answer_ms_p50=float(np.percentile(answers, 50)))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=60)
    ap.add_argument("--reps", type=int, default=3, help="each layout this often, in rotating order")
    ap.add_argument("--layouts", default=",".join(LAYOUTS))
    ap.add_argument("--ask-period-s", type=float, default=0.25, help="the ask layouts' question period")
    ap.add_argument("--threads", type=int, default=1, help="the serving thread's count in pinned and ask layouts")
    ap.add_argument("--busy", type=int, default=0, help="busy-looping processes beside each layout")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child", choices=LAYOUTS, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.calls, args.ask_period_s, args.threads)))
        return 0
    layouts = [x for x in args.layouts.split(",") if x]
    unknown = sorted(set(layouts) - set(LAYOUTS))
    if unknown:
        ap.error(f"unknown layouts {unknown}; choose from {', '.join(LAYOUTS)}")
    out = {"load_average_start": os.getloadavg(), "runs": {k: [] for k in layouts}, "threads": args.threads,
           "busy": args.busy, "command": " ".join([sys.executable, *sys.argv])}
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    try:
        for rep in range(args.reps):
            order = layouts[rep % len(layouts):] + layouts[:rep % len(layouts)]
            for layout in order:
                run_layout(args, layout, rep, out)
    finally:
        for b in busy:
            b.kill()
            b.wait()
    finish(args, out)
    return 0


def run_layout(args, layout: str, rep: int, out: dict) -> None:
    p = subprocess.run([sys.executable, __file__, "--child", layout, "--calls", str(args.calls),
                        "--ask-period-s", str(args.ask_period_s), "--threads", str(args.threads)],
                       capture_output=True, text=True, check=True, timeout=900)
    r = json.loads(p.stdout.strip().splitlines()[-1])
    r["load_average"] = os.getloadavg()[0]
    out["runs"][layout].append(r)
    if not args.json:
        print(f"rep {rep} {layout:8s} engine p50 {r['engine_ms_p50']:.1f} ms p90 {r['engine_ms_p90']:.1f} "
              f"p99 {r['engine_ms_p99']:.1f}, {r['voluntary_switches_per_call']:.0f} switches/call"
              + (f", {r['answers']} answers p50 {r['answer_ms_p50']:.1f} ms" if "answers" in r else "")
              + f", load {r['load_average']:.2f}", flush=True)


def finish(args, out: dict) -> None:
    out["load_average_end"] = os.getloadavg()
    med = {k: float(np.median([r["engine_ms_p50"] for r in v])) for k, v in out["runs"].items()}
    out["median_engine_ms_p50"] = med
    pairs = (("second", "pinned"), ("pinned", "builder"), ("ask2", "ask1"), ("ask1", "pinned"))
    out["ratios"] = {f"{a}/{b}": med[a] / med[b] for a, b in pairs if a in med and b in med}
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print("median p50: " + ", ".join(f"{k} {v:.1f} ms" for k, v in med.items())
              + "; " + ", ".join(f"{k} {v:.2f}x" for k, v in out["ratios"].items()))


if __name__ == "__main__":
    sys.exit(main())
