"""Engine time on the policy server's serving thread, old layout vs new (engine.compute_threads).

The default fleet's core (sim_pi0, fast path, CPU) serves one robot, one 224 view, through the
real ServingCore (submit, dispatch, run_batch); the figure is the chunk's inference_ms. Each
layout runs in its own fresh process, because OpenMP thread teams are process-wide state:
  builder   the thread that built the model serves (the ideal: one team)
  second    the main thread builds, warms up and profiles; a second thread serves (the layout
            before issue 19's fix: two teams, libgomp's throttled spin)
  pinned    the main thread pinned to one thread, the model built in a thread that ends, a
            second thread serves with the default count (the layout of the policy server now)

  python bench/compute_threads.py --calls 60 --reps 3 --json
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

LAYOUTS = ("builder", "second", "pinned")


def child(layout: str, calls: int) -> dict:
    import array

    from physai_ros.engine.compute_threads import in_fresh_thread, single_threaded_caller, use_threads
    from physai_ros.protocol.registration import RobotRegistration
    from physai_ros.ros.codecs.observation import observation_from_msg
    from physai_ros.ros.time_conv import time_from_sec
    from physai_ros.serving.config import load_fleet
    from physai_ros.serving.factory import build_core
    from physai_ros_interfaces.msg import Observation
    from sensor_msgs.msg import Image

    def build():
        core = build_core(load_fleet(None))
        core.warm_up()
        return core

    threads = None
    if layout == "pinned":
        threads = single_threaded_caller()
        core = in_fresh_thread(build, threads)
    else:
        core = build()
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

    csw0 = resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw
    if layout == "builder":
        serve()
    else:
        t = threading.Thread(target=serve, name="serving_engine_0")
        t.start()
        t.join()
    csw = resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw - csw0
    a = np.array(times)
    return {"engine_ms_p50": float(np.percentile(a, 50)), "engine_ms_p90": float(np.percentile(a, 90)),
            "engine_ms_p99": float(np.percentile(a, 99)), "voluntary_switches_per_call": csw / len(a), "calls": len(a)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=60)
    ap.add_argument("--reps", type=int, default=3, help="each layout this often, in rotating order")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child", choices=LAYOUTS, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.calls)))
        return 0
    out = {"load_average_start": os.getloadavg(), "runs": {k: [] for k in LAYOUTS},
           "command": " ".join([sys.executable, *sys.argv])}
    for rep in range(args.reps):
        order = LAYOUTS[rep % 3:] + LAYOUTS[:rep % 3]
        for layout in order:
            p = subprocess.run([sys.executable, __file__, "--child", layout, "--calls", str(args.calls)],
                               capture_output=True, text=True, check=True, timeout=900)
            r = json.loads(p.stdout.strip().splitlines()[-1])
            r["load_average"] = os.getloadavg()[0]
            out["runs"][layout].append(r)
            if not args.json:
                print(f"rep {rep} {layout:8s} engine p50 {r['engine_ms_p50']:.1f} ms p90 {r['engine_ms_p90']:.1f} "
                      f"p99 {r['engine_ms_p99']:.1f}, {r['voluntary_switches_per_call']:.0f} switches/call, "
                      f"load {r['load_average']:.2f}", flush=True)
    out["load_average_end"] = os.getloadavg()
    med = {k: float(np.median([r["engine_ms_p50"] for r in v])) for k, v in out["runs"].items()}
    out["median_engine_ms_p50"] = med
    out["ratios"] = {"second/pinned": med["second"] / med["pinned"], "pinned/builder": med["pinned"] / med["builder"]}
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print("median p50: " + ", ".join(f"{k} {v:.1f} ms" for k, v in med.items())
              + "; " + ", ".join(f"{k} {v:.2f}x" for k, v in out["ratios"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
