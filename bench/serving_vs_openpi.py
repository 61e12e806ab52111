"""Serving overhead side by side: physai_ros's policy server vs openpi's websocket + msgpack
server vs the rclpy floor, same payloads, one run.

Per answer, overhead = round trip at the robot minus the time the server says its model took
(openpi: server_timing.infer_ms; ours: ActionChunk.inference_ms, the engine call alone, so our
pre- and post-processing count as overhead). Three systems per case, each a fresh server process,
the same closed-loop load (each robot sends its next observation when its answer is in):
  openpi   bench/openpi_baseline/server.py in .venv-openpi (openpi_client's codec and websockets;
           its policy touches every image byte and returns a chunk: ~0 ms), robots are threads of
           bench/openpi_baseline/client.py, each with its own WebsocketClientPolicy connection.
  rclpy    bench/ros_echo_server.py: Observation in, ActionChunk out, nothing between: what
           rclpy and DDS cost by themselves (the floor for any ROS 2 Python server).
  physai   the real policy_server (default fleet: the trained sim_pi0; insecure unless --auth),
           robots as in bench/serving.py, spinning an EventsExecutor like the robot client;
           --torch-threads 0,1 runs it once per fleet.yaml server.torch_threads value
           ("physai", "physai@t1"; serving.compute_threads).
With several robots our engine batches them and a robot waits for the batch in flight: that
queue wait is reported separately ("excl. queue"); openpi's ~0 ms policy never makes anyone wait.
--model-ms (default 0,engine) also runs each anchor with a stand-in model (matrix products,
bench/physai_bench/model_time.py): 'engine' makes it compute as long as our engine did in the same
case (its p50 in our run of that case, which comes first), so both sides pay equal model time; a
server that computes between requests pays more per request than one that answers at once (idle
cores, cold caches), which is not serving logic. openpi computes one robot at a time, so with
several robots it runs only at ~0 ms (with a model its overhead would be mostly the wait behind
the others' model time). With several robots the rclpy floor batches instead ("rclpy+engine
batch": bench/ros_echo_server.py --batch, one worker thread answering every queued robot after
one model time), so ours is set beside the least a batching rclpy server pays, queue wait
reported apart as for ours. "Beyond the batch's policy" also takes out the batch-mates' pre- and
post-processing (policy work a robot in a batch waits for; bench/serving.py finds the
batch-mates by their identical inference_ms). The results file (--json PATH) is the benchmark
suite's "serving" entry (bench/suite.py).

  bench/openpi_baseline/setup_venv.sh      # once: .venv-openpi (openpi-client pins numpy<2)
  python bench/serving_vs_openpi.py --reps 2 --json /tmp/serving.json
  python bench/serving_vs_openpi.py --cases 1robot_1views_224 --systems openpi,physai --model-ms 0,20
  python bench/serving_vs_openpi.py --quick --json /tmp/q.json   # two small cases: checks it runs
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from physai_bench import results

ROOT = Path(__file__).resolve().parents[1]
import serving as ros_bench  # noqa: E402  bench/serving.py (this script's folder): the ROS load generator

OPENPI_PY = ROOT / ".venv-openpi" / "bin" / "python"
DEFAULT_CASES = ("1robot_1views_224", "1robot_2views_224", "4robot_1views_224", "4robot_2views_224",
                 "1robot_1views_480x640", "4robot_1views_480x640")
SYSTEMS = ("openpi", "rclpy", "physai")
ENGINE = "engine"  # --model-ms: the anchors compute as long as our engine did in the same case


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(proc: subprocess.Popen, timeout_s: float) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        line = proc.stdout.readline()
        if line.strip() == "ready":
            return
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
    raise RuntimeError("server did not become ready")


def summarize(over: np.ndarray, client_cpu_s: float, extra: dict | None = None) -> dict:
    out = {"n": int(over.size), "overhead_ms_p50": float(np.percentile(over, 50)),
           "overhead_ms_p99": float(np.percentile(over, 99)), "client_cpu_ms_per_obs": client_cpu_s * 1e3 / over.size}
    out.update(extra or {})
    return out


def run_openpi(n, views, hw, rounds, warmup, model_ms=0.0) -> dict:
    port = free_port()
    srv = subprocess.Popen([str(OPENPI_PY), str(ROOT / "bench/openpi_baseline/server.py"), "--port", str(port),
                            "--horizon", "50", "--action-dim", "5", "--model-ms", str(model_ms)],
                           stdout=subprocess.PIPE, text=True)
    try:
        wait_ready(srv, 30)
        cpu0 = ros_bench.proc_cpu_s(srv.pid)
        out = subprocess.run([str(OPENPI_PY), str(ROOT / "bench/openpi_baseline/client.py"), "--port", str(port),
                              "--robots", str(n), "--views", str(views), "--height", str(hw[0]), "--width", str(hw[1]),
                              "--rounds", str(rounds), "--warmup", str(warmup)],
                             capture_output=True, text=True, check=True, timeout=600)
        server_cpu = ros_bench.proc_cpu_s(srv.pid) - cpu0
    finally:
        ros_bench.stop_server(srv)
    d = json.loads(out.stdout.strip().splitlines()[-1])
    over = np.array(d["rtt_ms"]) - np.array(d["infer_ms"])
    # Server CPU includes the warm-up rounds: an upper bound per observation.
    return summarize(over, d["client_cpu_s"], {"server_cpu_ms_per_obs": server_cpu * 1e3 / (over.size + n * warmup)})


def fleet_with_threads(threads: int, directory: str) -> str | None:
    """The default fleet file with server.torch_threads set, written to `directory` (None for 0:
    the default fleet as it is). Its paths are package:// ones, so the copy loads the same."""
    if not threads:
        return None
    import yaml

    from physai_ros.config.fleet import default_fleet_path

    doc = yaml.safe_load(default_fleet_path().read_text())
    doc["server"]["torch_threads"] = threads
    path = os.path.join(directory, f"fleet_torch_threads_{threads}.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(doc, f)
    return path


def run_ros(system, node, env, n, views, hw, rounds, warmup, auth, model_ms=0.0, fleet_file=None,
            batch=False) -> dict:
    from rclpy.experimental import EventsExecutor

    ids = [f"{system}_{n}_{views}_{hw[0]}_{int(time.time() * 1000) % 100000}_{k}" for k in range(n)]
    if system == "rclpy":
        srv = subprocess.Popen([sys.executable, str(ROOT / "bench/ros_echo_server.py"), "--robots", ",".join(ids),
                                "--model-ms", str(model_ms)] + (["--batch"] if batch else []),
                               env=env, stdout=subprocess.PIPE, text=True)
        wait_ready(srv, 60)
    else:
        srv, _ = ros_bench.start_server(env, auth, fleet_file)
    try:
        executor = EventsExecutor()
        r = ros_bench.run_case(node, srv.pid, n, views, hw, rounds, 300.0, auth=auth, executor=executor,
                               register=system == "physai", warmup=warmup, ids=ids)
        executor.shutdown()
    finally:
        ros_bench.stop_server(srv)
    keys = ("n", "overhead_ms_p50", "overhead_ms_p99", "overhead_excl_queue_ms_p50", "overhead_excl_queue_ms_p99",
            "overhead_beyond_policy_ms_p50", "overhead_beyond_policy_ms_p99",
            "overhead_beyond_policy_excl_queue_ms_p50", "overhead_beyond_policy_excl_queue_ms_p99",
            "overhead_beyond_batch_policy_excl_queue_ms_p50", "overhead_beyond_batch_policy_excl_queue_ms_p99",
            "batch_size_mean", "prepare_ms_p50",
            "queue_ms_p50", "engine_ms_p50", "client_cpu_ms_per_obs", "server_cpu_ms_per_obs", "not_ok", "lost")
    r["n"] = r["served"]
    return {k: r[k] for k in keys if k in r}


def report(out: dict, case: str, name: str, r: dict, rep: int) -> None:
    r["load_average"] = os.getloadavg()[0]
    out["cases"].setdefault(case, {}).setdefault(name, []).append(r)
    print(f"rep {rep} {case} {name}: overhead p50 {r['overhead_ms_p50']:.3f} ms p99 {r['overhead_ms_p99']:.3f} ms"
          + (f" (excl. queue p50 {r['overhead_excl_queue_ms_p50']:.3f}; beyond policy p50 "
             f"{r['overhead_beyond_policy_ms_p50']:.3f} p99 {r['overhead_beyond_policy_ms_p99']:.3f}"
             f", excl. queue p50 {r['overhead_beyond_policy_excl_queue_ms_p50']:.3f} p99 "
             f"{r['overhead_beyond_policy_excl_queue_ms_p99']:.3f}; beyond the batch's policy, excl. queue p50 "
             f"{r['overhead_beyond_batch_policy_excl_queue_ms_p50']:.3f} p99 "
             f"{r['overhead_beyond_batch_policy_excl_queue_ms_p99']:.3f}; prepare p50 {r['prepare_ms_p50']:.3f}; "
             f"batch {r['batch_size_mean']:.2f}; engine p50 {r['engine_ms_p50']:.1f}; "
             f"not OK {r['not_ok']}, lost {r['lost']})" if name.startswith("physai")
             else f" (excl. queue p50 {r['overhead_excl_queue_ms_p50']:.3f} p99 {r['overhead_excl_queue_ms_p99']:.3f})"
             if name.endswith("batch") else "")
          + f", client CPU/obs {r['client_cpu_ms_per_obs']:.3f} ms, load {r['load_average']:.2f}", flush=True)


def parse_model_ms(text: str) -> list:
    """'0,20,engine' -> [0.0, 20.0, 'engine']: 'engine' is our engine's own time in the same case,
    measured by our server's run of that case (equal model time on both sides)."""
    out = []
    for m in (m.strip() for m in text.split(",") if m.strip()):
        out.append(ENGINE if m == ENGINE else float(m))
    return out


def anchor_name(system: str, ms, batch: bool) -> str:
    """'openpi', 'openpi+20ms', 'openpi+engine', 'rclpy+engine batch'."""
    suffix = "+engine" if ms == ENGINE else (f"+{ms:g}ms" if ms else "")
    return system + suffix + (" batch" if batch else "")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=",".join(DEFAULT_CASES))
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--rounds", type=int, default=200, help="measured answers per robot")
    ap.add_argument("--warmup", type=int, default=20, help="answers per robot before measuring")
    ap.add_argument("--reps", type=int, default=1, help="repetitions; the order of systems alternates")
    ap.add_argument("--model-ms", default="0,engine",
                    help="model times (ms) the anchors (openpi, rclpy) run with, comma-separated; 0 = answer at "
                         "once, 'engine' = our engine's p50 in the same case, measured by our run of it")
    ap.add_argument("--torch-threads", default="0",
                    help="our server once per fleet.yaml server.torch_threads value, comma-separated (0: default)")
    ap.add_argument("--auth", action="store_true", help="run our server with the fleet's authentication")
    ap.add_argument("--quick", action="store_true", help="two small cases, 5 rounds: checks the bench runs")
    ap.add_argument("--json", type=Path, default=None, help="write the results file here")
    args = ap.parse_args(argv)
    if args.quick:
        args.cases, args.rounds, args.warmup, args.reps = "1robot_1views_224,4robot_1views_224", 5, 2, 1
    systems = [s for s in args.systems.split(",") if s]
    model_ms = parse_model_ms(args.model_ms)
    threads = [int(t) for t in args.torch_threads.split(",") if t]
    if ENGINE in model_ms and "physai" not in systems:
        ap.error("--model-ms engine needs physai among --systems (its run measures the engine)")
    # Ours first in even repetitions (its engine time sets the anchors' 'engine' model time),
    # last in odd ones; each anchor once per model time, ours once per thread setting.
    runs = [("physai", t) for t in threads] if "physai" in systems else []
    runs += [(s, m) for s in systems if s != "physai" for m in model_ms]
    if "openpi" in systems and not OPENPI_PY.exists():
        raise SystemExit("no .venv-openpi: run bench/openpi_baseline/setup_venv.sh first")
    cases = [c for c in args.cases.split(",") if c]
    run = results.start_run(
        f"Serving overhead over one host (observation -> chunk round trip minus the server's model time), "
        f"closed loop, {args.rounds} answers per robot after {args.warmup} warm-up, {args.reps} repetition(s); "
        f"ours: the real policy_server on the default fleet (the trained sim_pi0 on this CPU, "
        f"{'authenticated' if args.auth else 'insecure'}) over Fast DDS; anchors: openpi's websocket + msgpack "
        f"serving pattern (openpi-client from PyPI) and a bare rclpy echo, with stand-in models of "
        f"{args.model_ms} ms ('engine': ours' measured p50 in the same case); cases {','.join(cases)}",
        __file__, argv, quick=args.quick)
    env = dict(os.environ)
    env.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    env.setdefault("ROS_DOMAIN_ID", str(100 + os.getpid() % 100))
    keys_dir = tempfile.mkdtemp(prefix="bench_vs_openpi_keys_")
    env.setdefault("PHYSAI_ROS_AUTO_KEYSTORE", os.path.join(keys_dir, "keystore"))
    shm = ROOT / "config" / "fastdds_shm.xml"  # as bench/serving.py and physai-fleet for large frames
    if shm.exists():
        env.setdefault("FASTDDS_DEFAULT_PROFILES_FILE", str(shm))
    os.environ.update(env)
    import rclpy

    rclpy.init()
    node = rclpy.create_node("bench_vs_openpi")
    out = {"cases": {}, "engine_model_ms": {}}
    try:
        for rep in range(args.reps):
            order = runs if rep % 2 == 0 else runs[::-1]
            for case in cases:
                n, views, hw = ros_bench.parse_case(case)
                for system, setting in order:  # an anchor's model ms, or our server.torch_threads
                    if system == "physai":
                        name = "physai" + (f"@t{setting:g}" if setting else "")
                        r = run_ros(system, node, env, n, views, hw, args.rounds, args.warmup, args.auth,
                                    fleet_file=fleet_with_threads(int(setting), keys_dir))
                        if setting == threads[0] and rep == 0:
                            out["engine_model_ms"][case] = round(r["engine_ms_p50"], 1)
                        report(out, case, name, r, rep)
                        continue
                    ms = out["engine_model_ms"][case] if setting == ENGINE else setting
                    # openpi computes one robot at a time: with several robots its overhead would
                    # be mostly the wait behind the others' model time. The rclpy floor batches.
                    batch = bool(ms) and n > 1
                    if batch and system == "openpi":
                        continue
                    name = anchor_name(system, setting, batch)
                    if system == "openpi":
                        r = run_openpi(n, views, hw, args.rounds, args.warmup, ms)
                    else:
                        r = run_ros(system, node, env, n, views, hw, args.rounds, args.warmup, args.auth, ms,
                                    batch=batch)
                    r["model_ms"] = ms
                    report(out, case, name, r, rep)
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
        shutil.rmtree(keys_dir, ignore_errors=True)
    out["ratios"] = case_ratios(out["cases"])
    results.write_result(args.json, run, {"rounds": args.rounds, "warmup": args.warmup, "reps": args.reps, **out})
    for case, r in out["ratios"].items():
        print(case + ": " + ", ".join(f"{k} {v:.2f}x" for k, v in r.items()))
    return 0


def case_ratios(cases: dict) -> dict:
    """Medians over the repetitions (in place: each case becomes {median, runs}) and our ratios to
    each anchor, like for like."""
    ratios = {}
    for case, by in cases.items():
        med = {s: {k: float(np.median([r[k] for r in rs])) for k in rs[0] if isinstance(rs[0][k], float)}
               for s, rs in by.items()}
        cases[case] = {"median": med, "runs": by}
        # Against each openpi run (at ~0 ms and at each stand-in model time).
        for anchor in [s for s in med if s.startswith("openpi")]:
            base = med[anchor]
            r = ratios.setdefault(case, {})
            r.update({f"{s}/{anchor} {k}": med[s][k] / base[k] for s in med if not s.startswith("openpi")
                      for k in ("overhead_ms_p50", "overhead_ms_p99", "client_cpu_ms_per_obs") if base[k] > 0})
            for ours in [s for s in med if s.startswith("physai")]:
                p = med[ours]
                # Like for like: openpi's infer_ms covers its policy's transforms, so ours is
                # taken beyond the policy too (engine + prepare_ms), with and without queue wait.
                for k, b in (("overhead_beyond_policy_ms_p50", "overhead_ms_p50"),
                             ("overhead_beyond_policy_ms_p99", "overhead_ms_p99"),
                             ("overhead_beyond_policy_excl_queue_ms_p50", "overhead_ms_p50"),
                             ("overhead_beyond_policy_excl_queue_ms_p99", "overhead_ms_p99")):
                    r[f"{ours} {k}/{anchor}"] = p[k] / base[b]
        # Against the batching rclpy floor (several robots): the whole overhead and the part
        # outside the queue wait, each like for like.
        for floor in [s for s in med if s.startswith("rclpy") and s.endswith(" batch")]:
            base = med[floor]
            r = ratios.setdefault(case, {})
            for ours in [s for s in med if s.startswith("physai")]:
                for k, b in (("overhead_beyond_policy_ms_p50", "overhead_ms_p50"),
                             ("overhead_beyond_policy_ms_p99", "overhead_ms_p99"),
                             ("overhead_beyond_policy_excl_queue_ms_p50", "overhead_excl_queue_ms_p50"),
                             ("overhead_beyond_policy_excl_queue_ms_p99", "overhead_excl_queue_ms_p99"),
                             ("overhead_beyond_batch_policy_excl_queue_ms_p50", "overhead_excl_queue_ms_p50"),
                             ("overhead_beyond_batch_policy_excl_queue_ms_p99", "overhead_excl_queue_ms_p99")):
                    r[f"{ours} {k}/{floor} {b}"] = med[ours][k] / base[b]
    return ratios


if __name__ == "__main__":
    sys.exit(main())
