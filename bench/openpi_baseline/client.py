"""Load generator for the openpi anchor (runs in .venv-openpi): N robots, each a thread with its
own openpi_client.WebsocketClientPolicy connection, closed loop (the next observation as soon as
the previous answer is in), same payload as the ROS cases: V rgb images HxW uint8, a 5-float
state and the prompt. Prints one JSON line: per-answer round trip and server infer_ms, and this
process's CPU time.

  python bench/openpi_baseline/client.py --port 8765 --robots 4 --views 2 --height 224 --width 224 --rounds 200
  --layout libero --tokens FILE: openpi's LIBERO keys and one api_key per robot (a JSON list), as
  physai_ros's openpi gateway takes them (bench/openpi_gateway.py)
"""
from __future__ import annotations

import argparse
import json
import threading
import time

import numpy as np
from openpi_client.websocket_client_policy import WebsocketClientPolicy


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--robots", type=int, default=1)
    ap.add_argument("--views", type=int, default=1)
    ap.add_argument("--height", type=int, default=224)
    ap.add_argument("--width", type=int, default=224)
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--layout", choices=("anchor", "libero"), default="anchor")
    ap.add_argument("--tokens", help="a JSON file: one api_key per robot")
    args = ap.parse_args()
    frame = np.random.default_rng(0).integers(0, 256, (args.height, args.width, 3), dtype=np.uint8)
    tokens = json.load(open(args.tokens)) if args.tokens else [None] * args.robots
    policies = [WebsocketClientPolicy("127.0.0.1", args.port, api_key=tokens[k]) for k in range(args.robots)]
    results: list[list[tuple[float, float]]] = [[] for _ in range(args.robots)]
    start = threading.Barrier(args.robots + 1)

    failures: list[BaseException] = []

    def robot(k: int) -> None:
        try:
            serve_robot(k)
        except BaseException as e:  # one robot failing must not leave the others at the barrier
            failures.append(e)
            start.abort()

    def serve_robot(k: int) -> None:
        if args.layout == "libero":
            obs = {"observation/image": frame, "observation/wrist_image": frame,
                   "observation/state": np.zeros(5, np.float32), "prompt": "pick up the cube"}
        else:
            obs = {f"image_{v}": frame for v in range(args.views)}
            obs.update(state=np.zeros(5, np.float32), prompt="pick up the cube")
        for _ in range(args.warmup):
            policies[k].infer(obs)
        start.wait()
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            out = policies[k].infer(obs)
            rtt = (time.perf_counter() - t0) * 1e3
            assert out["actions"].dtype == np.float32
            results[k].append((rtt, float(out.get("server_timing", {}).get("infer_ms", float("nan")))))

    threads = [threading.Thread(target=robot, args=(k,)) for k in range(args.robots)]
    for t in threads:
        t.start()
    try:
        start.wait()
    except threading.BrokenBarrierError:
        pass  # a robot failed while warming up: reported below
    cpu0, t0 = time.process_time(), time.perf_counter()
    for t in threads:
        t.join()
    if failures:
        raise SystemExit(f"{len(failures)} robot(s) failed: {failures[0]!r}")
    print(json.dumps({"rtt_ms": [r for rs in results for r, _ in rs], "infer_ms": [i for rs in results for _, i in rs],
                      "client_cpu_s": time.process_time() - cpu0, "wall_s": time.perf_counter() - t0}))


if __name__ == "__main__":
    main()
