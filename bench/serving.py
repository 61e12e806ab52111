"""Serving overhead over real DDS: observation -> chunk latency minus engine time.

A real policy_server process (tiny model, FIFO) serves N load-generating robots that live in
this process: each registers through the real service, publishes an Observation with V images
of HxW (rgb8, the real message types), waits for its chunk and sends the next one at once
(closed loop). Per chunk: overhead = (receive - send) - inference_ms reported by the server;
the server's queue wait is part of the overhead (with many robots it is batching delay).
CPU per observation: the server process's CPU time (/proc, engine included, and with the engine
time subtracted) and this process's, each divided by the observations served.

  python bench/serving.py --json                 # all cases (1/2/3 views, 224 and 480x640,
                                                  # 1/4/16 robots)
  python bench/serving.py --json --cases 1robot_2views_224,4robot_2views_224 --rounds 20
  python bench/serving.py --auth both --reps 2 ...  # authentication off and on, side by side
  python bench/serving.py --auth both --reps 2 --out bench/results/serving_auth.json ...  # a results
                                                  # file with its header (the suite's serving_auth)

Authentication: `--auth on` runs the server with the fleet's auth (a throwaway auto
keystore) and the load generators do what a robot client does: sign the registration, tag each
observation (HMAC-SHA256 of its digest), check each chunk's Ed25519 signature. `--auth off` runs
the server insecure and the generators send plain messages. `both` alternates server runs
off/on/on/off (--reps times that pair) and reports on/off ratios of the medians.
"""
from __future__ import annotations

import argparse
import array
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SIZES = {"224": (224, 224), "480x640": (480, 640)}


def case_names():
    return [f"{n}robot_{v}views_{s}" for s in SIZES for v in (1, 2, 3) for n in (1, 4, 16)]


def parse_case(name):
    robots, views, size = name.split("_")
    return int(robots.removesuffix("robot")), int(views.removesuffix("views")), SIZES[size]


def proc_cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")


def robot_auth(robot_id):
    """What a robot client holds: its key and session (physai_ros.security), from the auto keystore."""
    from physai_ros.security.config import SecurityConfig, open_keystore
    from physai_ros.security.endpoints import RobotAuth
    from physai_ros.security.keystore import Identity

    sec = SecurityConfig()
    return RobotAuth(open_keystore(sec, None, [sec.server, Identity("robot", robot_id)]), robot_id, sec.server)


WARMUP_RESEND_S = 2.0  # a warm-up answer this late was lost before the endpoints matched: resend


def run_case(node, pid, n_robots, views, hw, rounds, timeout_s, auth=False, executor=None, register=True,
             warmup=0, ids=None):
    """One closed-loop case against the server process `pid`. executor: the rclpy executor the
    load generator spins (default: rclpy's global one, as before); register=False for a server
    without the registration service (bench/ros_echo_server.py); warmup: rounds per robot sent
    and answered before the measured ones. The case's publishers, subscriptions and client are
    destroyed after it: kept, every later case's spin also served them (the generator's CPU per
    observation grew from 3 to 38 ms over one 28-case run)."""
    before = (set(node.publishers), set(node.subscriptions), set(node.clients))
    try:
        return _run_case(node, pid, n_robots, views, hw, rounds, timeout_s, auth, executor, register, warmup, ids)
    finally:
        for p in set(node.publishers) - before[0]:
            node.destroy_publisher(p)
        for sub in set(node.subscriptions) - before[1]:
            node.destroy_subscription(sub)
        for c in set(node.clients) - before[2]:
            node.destroy_client(c)


def _run_case(node, pid, n_robots, views, hw, rounds, timeout_s, auth, executor, register, warmup, ids):
    import rclpy
    from physai_ros_interfaces.msg import ActionChunk, Observation
    from physai_ros_interfaces.srv import RegisterRobot
    from sensor_msgs.msg import Image

    from physai_ros.protocol.registration import RobotRegistration
    from physai_ros.protocol.topics import ACTION_CHUNK_TOPIC, OBSERVATION_TOPIC, REGISTER_SERVICE, robot_topic
    from physai_ros.ros.codecs.registration import registration_to_request
    from physai_ros.ros.message_digest import digest
    from physai_ros.ros.qos import reliable_qos
    from physai_ros.ros.time_conv import time_from_sec

    h, w = hw
    tag = f"b{n_robots}_{views}_{h}_{int(time.time() * 1000) % 100000}"
    ids = list(ids) if ids else [f"{tag}_{k}" for k in range(n_robots)]
    end = time.monotonic() + timeout_s
    if register:
        cli = node.create_client(RegisterRobot, REGISTER_SERVICE)
        while not cli.wait_for_service(timeout_sec=0.5):
            if time.monotonic() > end:
                raise RuntimeError("policy_server did not come up")
    rng = np.random.default_rng(0)
    frame = array.array("B", rng.integers(0, 256, h * w * 3, dtype=np.uint8).tobytes())
    imgs = []
    for v in range(views):
        im = Image(height=h, width=w, encoding="rgb8", step=w * 3)
        im.data = frame
        imgs.append(im)
    pubs, state, keys = {}, {}, {}
    results = []
    not_ok = Counter()

    def on_chunk(msg, rid):
        t = time.perf_counter()
        st = state[rid]
        if msg.round_id != st["round"]:
            return
        if auth:
            keys[rid].check_chunk(digest(msg), msg.auth)  # raises on a bad signature: a broken run
            t = time.perf_counter()  # the check is part of what the robot waits for
        results.append(((t - st["sent"]) * 1e3, msg.inference_ms, msg.queue_ms, msg.status, msg.prepare_ms))
        if msg.status != 0:
            # The reason before the ':' (e.g. "stale_timestamp"), so a run with refusals says why.
            not_ok[msg.error.split(":", 1)[0] or f"status {msg.status}"] += 1
        st["done"] += 1
        if st["done"] < rounds:
            send(rid)

    def send(rid):
        st = state[rid]
        st["round"] += 1
        o = Observation(robot_id=rid, task_id="bench", round_id=st["round"], prompt="pick up the cube")
        o.header.stamp = time_from_sec(time.time())
        o.images = imgs
        o.state = array.array("f", [0.0] * 5)
        o.control_period = 0.02
        o.horizon_policy = "static"
        o.horizon_params = array.array("f", [8.0])
        st["sent"] = time.perf_counter()
        if auth:
            o.auth = keys[rid].tag_observation(digest(o))
        pubs[rid].publish(o)

    def spin(timeout):
        if executor is None:
            rclpy.spin_once(node, timeout_sec=timeout)
        else:
            executor.spin_once(timeout_sec=timeout)

    for rid in ids:
        if not register:
            pubs[rid] = node.create_publisher(Observation, robot_topic(rid, OBSERVATION_TOPIC), reliable_qos())
            node.create_subscription(ActionChunk, robot_topic(rid, ACTION_CHUNK_TOPIC),
                                     lambda m, r=rid: on_chunk(m, r), reliable_qos())
            state[rid] = {"round": 0, "sent": 0.0, "done": 0}
            continue
        req = registration_to_request(RobotRegistration(
            robot_id=rid, task_id="bench", robot_namespace=rid, prompt="pick up the cube", camera_topics=(),
            num_views=views, image_height=h, image_width=w, joint_names=tuple(f"j{i}" for i in range(5)),
            state_dim=5, action_dim=5, control_period=0.02))
        if auth:
            keys[rid] = robot_auth(rid)
            req.auth_proof = keys[rid].proof(digest(req, skip=("auth_proof",)))
        while True:  # a request to the previous (stopped) server's service is never answered: resend
            fut = cli.call_async(req)
            rclpy.spin_until_future_complete(node, fut, timeout_sec=5.0)
            if fut.done() or time.monotonic() > end:
                break
            cli.remove_pending_request(fut)
        if fut.result() is None or not fut.result().accepted:
            raise RuntimeError(f"registration failed: {fut.result()}")
        if auth:
            keys[rid].on_grant(fut.result().auth_grant)
        pubs[rid] = node.create_publisher(Observation, robot_topic(rid, OBSERVATION_TOPIC), reliable_qos())
        node.create_subscription(ActionChunk, robot_topic(rid, ACTION_CHUNK_TOPIC), lambda m, r=rid: on_chunk(m, r),
                                 reliable_qos())
        state[rid] = {"round": 0, "sent": 0.0, "done": 0}
    # Wait until every link matched both ways (a volatile reliable message sent earlier is lost).
    if executor is not None:
        executor.add_node(node)
    while any(p.get_subscription_count() == 0 for p in pubs.values()) or any(
            node.count_publishers(robot_topic(rid, ACTION_CHUNK_TOPIC)) == 0 for rid in ids):
        spin(0.05)
        if time.monotonic() > end:
            raise RuntimeError("observation topics never matched")
    for _ in range(20):
        spin(0.01)
    if warmup:
        rounds_measured = rounds
        rounds = warmup
        for rid in ids:
            send(rid)
        while sum(s["done"] for s in state.values()) < warmup * n_robots and time.monotonic() < end:
            spin(0.05)
            # Graph discovery (above) can run ahead of a writer matching its reader, and a
            # reliable volatile message sent before that is gone: a robot whose answer is this
            # late sends its next round instead of waiting out the timeout (seen once at 480x640).
            for rid, st in state.items():
                if st["done"] < warmup and time.perf_counter() - st["sent"] > WARMUP_RESEND_S:
                    send(rid)
        results.clear()
        not_ok.clear()
        rounds = rounds_measured
        for st in state.values():
            st["done"] = 0
    cpu0_srv, cpu0_me, t0 = proc_cpu_s(pid), time.process_time(), time.perf_counter()
    for rid in ids:
        send(rid)
    end = time.monotonic() + timeout_s
    while sum(s["done"] for s in state.values()) < rounds * n_robots and time.monotonic() < end:
        spin(0.05)
    if executor is not None:
        executor.remove_node(node)
    wall = time.perf_counter() - t0
    cpu_srv, cpu_me = proc_cpu_s(pid) - cpu0_srv, time.process_time() - cpu0_me
    ok = [r for r in results if r[3] == 0]
    if not ok:
        raise RuntimeError(f"no OK chunks came back ({len(results)} replies: {dict(not_ok)})")
    lat = np.array([r[0] for r in ok])
    inf = np.array([r[1] for r in ok])
    over = lat - inf
    n = len(ok)
    queue = np.array([r[2] for r in ok])
    # Beyond the policy: also without the server's pre- and post-processing (letterbox, tokens,
    # normalisation, horizon), which other servers count inside their policy's infer time.
    over_policy = over - np.array([r[4] for r in ok])
    # Beyond the batch's policy: a robot in a batch also waits for its batch-mates' pre- and
    # post-processing, which is policy work too (done one robot after another). The answers of
    # one engine batch carry the very same inference_ms, which finds the batch-mates.
    batch_prepare: dict[float, float] = {}
    for r in ok:
        batch_prepare[r[1]] = batch_prepare.get(r[1], 0.0) + r[4]
    over_batch_policy = over - np.array([batch_prepare[r[1]] for r in ok])
    return {
        "served": n, "lost": rounds * n_robots - len(results), "not_ok": dict(not_ok), "wall_s": wall,
        "latency_ms_p50": float(np.percentile(lat, 50)), "latency_ms_p99": float(np.percentile(lat, 99)),
        "engine_ms_p50": float(np.percentile(inf, 50)),
        "queue_ms_p50": float(np.percentile(queue, 50)),
        "overhead_ms_p50": float(np.percentile(over, 50)), "overhead_ms_p99": float(np.percentile(over, 99)),
        # Transport + serialisation + pre/post-processing, without waiting for a busy engine.
        "overhead_excl_queue_ms_p50": float(np.percentile(over - queue, 50)),
        "overhead_excl_queue_ms_p99": float(np.percentile(over - queue, 99)),
        "prepare_ms_p50": float(np.percentile([r[4] for r in ok], 50)),
        "overhead_beyond_policy_ms_p50": float(np.percentile(over_policy, 50)),
        "overhead_beyond_policy_ms_p99": float(np.percentile(over_policy, 99)),
        "overhead_beyond_policy_excl_queue_ms_p50": float(np.percentile(over_policy - queue, 50)),
        "overhead_beyond_policy_excl_queue_ms_p99": float(np.percentile(over_policy - queue, 99)),
        "overhead_beyond_batch_policy_excl_queue_ms_p50": float(np.percentile(over_batch_policy - queue, 50)),
        "overhead_beyond_batch_policy_excl_queue_ms_p99": float(np.percentile(over_batch_policy - queue, 99)),
        "batch_size_mean": float(len(ok) / len(batch_prepare)),
        # Server CPU includes the engine (one batch serves several robots).
        "server_cpu_ms_per_obs": cpu_srv * 1e3 / n,
        "client_cpu_ms_per_obs": cpu_me * 1e3 / n,
    }


def start_server(env, auth: bool, fleet_file: str | None = None):
    """The policy server on the default fleet, or on `fleet_file`."""
    log = tempfile.NamedTemporaryFile(prefix=f"bench_serving_server_{'auth' if auth else 'open'}_", suffix=".log",
                                      delete=False)
    params = ([] if auth else ["-p", "insecure:=true"]) + (["-p", f"fleet_file:={fleet_file}"] if fleet_file else [])
    cmd = [sys.executable, "-m", "physai_ros.nodes.policy_server"] + (["--ros-args", *params] if params else [])
    return subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT), log.name


def stop_server(srv):
    srv.terminate()
    try:
        srv.wait(timeout=10)
    except subprocess.TimeoutExpired:
        srv.kill()
        srv.wait()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--cases", default=",".join(case_names()))
    ap.add_argument("--rounds", type=int, default=30, help="observations per robot per case")
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--auth", choices=("on", "off", "both"), default="on",
                    help="authentication (default on, as fleets run); both: off and on side by side")
    ap.add_argument("--reps", type=int, default=1, help="with --auth both: off/on/on/off pairs")
    ap.add_argument("--warmup", type=int, default=3, help="answers per robot before measuring (each case)")
    ap.add_argument("--out", type=Path, default=None, help="write a results file (bench/physai_bench.results)")
    ap.add_argument("--quick", action="store_true", help="two small cases, 3 rounds, auth both: checks the bench runs")
    args = ap.parse_args(argv)
    if args.quick:
        args.cases, args.rounds, args.warmup, args.auth, args.reps = "1robot_1views_224,4robot_1views_224", 3, 1, "both", 1
    from physai_bench import results

    run = results.start_run(
        "the shipped sim_pi0 (default fleet) in a real policy_server process on this CPU, FIFO batching; the load "
        "generators are one process over DDS (shared memory), closed loop; overhead = round trip minus the server's "
        "inference_ms (pre/post-processing and the wait for the batch in flight included); authentication off "
        "(insecure server, plain messages) and on (signed registration, HMAC-tagged observations, Ed25519-signed "
        "chunks checked by the generators) alternated off/on/on/off per rep", __file__, argv, quick=args.quick)
    env = dict(os.environ)
    env.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    env.setdefault("ROS_DOMAIN_ID", str(100 + os.getpid() % 100))
    # A throwaway auto keystore: the load generators' robot ids never reach the user's own.
    keys_dir = tempfile.mkdtemp(prefix="bench_serving_keys_")
    env.setdefault("PHYSAI_ROS_AUTO_KEYSTORE", os.path.join(keys_dir, "keystore"))
    shm = ROOT / "config" / "fastdds_shm.xml"
    if shm.exists():
        env.setdefault("FASTDDS_DEFAULT_PROFILES_FILE", str(shm))
    os.environ.update(env)
    if args.auth == "both":
        order = [m for _ in range(args.reps) for m in (False, True, True, False)]
    else:
        order = [args.auth == "on"] * max(1, args.reps)
    import rclpy

    rclpy.init()
    node = rclpy.create_node("bench_serving")
    cases = [c for c in args.cases.split(",") if c]
    runs = {"off": {c: [] for c in cases}, "on": {c: [] for c in cases}}
    out = {"overhead_ms_p50": {}, "overhead_ms_p99": {}, "cases": {}, "server_logs": [],
           "load_average": os.getloadavg(), "auth_order": ["on" if a else "off" for a in order]}
    try:
        for auth in order:
            mode = "on" if auth else "off"
            srv, log = start_server(env, auth)
            out["server_logs"].append(log)
            try:
                for name in cases:
                    n, v, hw = parse_case(name)
                    r = run_case(node, srv.pid, n, v, hw, args.rounds, args.timeout, auth=auth, warmup=args.warmup)
                    runs[mode][name].append(r)
                    if not args.json:
                        print(f"auth {mode} {name}: overhead p50 {r['overhead_ms_p50']:.2f} ms p99 "
                              f"{r['overhead_ms_p99']:.2f} ms (latency p50 {r['latency_ms_p50']:.1f}, engine p50 "
                              f"{r['engine_ms_p50']:.1f}, server CPU/obs {r['server_cpu_ms_per_obs']:.2f} ms, "
                              f"client {r['client_cpu_ms_per_obs']:.2f} ms)"
                              + (f"; not OK: {r['not_ok']}" if r["not_ok"] else "")
                              + (f"; lost: {r['lost']}" if r["lost"] else ""), flush=True)
            finally:
                stop_server(srv)
    finally:
        out["load_average_end"] = os.getloadavg()
        node.destroy_node()
        rclpy.try_shutdown()
        import shutil

        shutil.rmtree(keys_dir, ignore_errors=True)
    keys = ("overhead_ms_p50", "overhead_ms_p99", "latency_ms_p50", "server_cpu_ms_per_obs", "client_cpu_ms_per_obs")
    for mode, by_case in runs.items():
        for name, rs in by_case.items():
            if not rs:
                continue
            med = {k: float(np.median([r[k] for r in rs])) for k in keys}
            med["runs"] = rs
            out["cases"].setdefault(name, {})[f"auth_{mode}"] = med
            out["overhead_ms_p50"].setdefault(name, {})[f"auth_{mode}"] = med["overhead_ms_p50"]
            out["overhead_ms_p99"].setdefault(name, {})[f"auth_{mode}"] = med["overhead_ms_p99"]
    if args.auth == "both":
        out["auth_on_over_off"] = {
            name: {k: c["auth_on"][k] / c["auth_off"][k] for k in keys if c["auth_off"][k] > 0}
            for name, c in out["cases"].items()}
        if not args.json:
            for name, ratio in out["auth_on_over_off"].items():
                print(f"{name}: auth on / off: " + ", ".join(f"{k} {v:.2f}x" for k, v in ratio.items()))
    if args.out:
        body = {k: v for k, v in out.items() if not k.startswith("load_average")}  # the header has the load
        results.write_result(args.out, run, {"rounds": args.rounds, "warmup": args.warmup, "reps": args.reps, **body})
    if args.json:
        print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
