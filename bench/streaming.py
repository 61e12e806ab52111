#!/usr/bin/env python3
"""Full streaming inference benchmark (in-process, tiny pi0 by default, CPU threads).

    .venv/bin/python bench/streaming.py --json
    .venv/bin/python bench/streaming.py --robots 1 --seconds 3 --ae-hz 240

For each robot count: the VLM stream and the action-expert stream run on their own threads at
the configured rates for --seconds, while robot 0 gets a force impulse every --impulse-ms and a
new camera observation every --frame-ms. Reported:
  vlm_hz, ae_hz                 achieved passes / ticks per second while both run
  tick_period_ms_p50/p99        start-to-start of consecutive ticks
  missed_tick_fraction          tick slots that passed while a tick was still running
  quick_loop_ms_p50/p99         wrench written -> first segment computed with it (every
                                uncommitted node of that segment depends on it; see docs)
  slow_loop_ms_p50/p99          observation captured -> first segment from a KV cache that
                                encodes it
  alone_tick_ms / alone_vlm_ms  one tick / one VLM pass run by itself (median), i.e. what the
                                CPU sustains without the other stream
Also the machine's load average, because timings on a shared machine are noisy.

ROS cases (`ros_cases`, skipped with --no-ros): the same loops through ROS 2 on loopback between
real processes: policy_server (streaming mode, the rates above), and per robot robot_client +
trajectory_controller; this process plays every robot's sensors (camera 64x64 at --ros-camera-hz,
joint states at 100 Hz, robot 0's wrench at --ros-wrench-hz, the others' at 50 Hz) and probes
robot 0's topics:
  quick_loop_ms                 wrench impulse published -> first joint_trajectory out of the
                                controller carrying a tentative node of a segment whose action-
                                expert tick read that sample (or a later one)
  slow_loop_ms                  camera frame with new content published -> first joint_trajectory
                                carrying a segment from a VLM pass that encoded it (or a later frame)
Matching is exact on the controller's 480 Hz node grid (physai_lab.stream_trace).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

import numpy as np
import torch

from physai_ros.engine import EngineInput, Pi0Config
from physai_ros.engine.streaming.expert import StreamingExpert
from physai_ros.engine.streaming.stream_engine import StreamingEngine
from physai_ros.engine.streaming.streams import StreamingConfig, StreamingCore


def observation(cfg: Pi0Config, seed: int, views: int = 2, prompt: int = 16) -> EngineInput:
    g = torch.Generator().manual_seed(seed)
    s = cfg.vision.image_size
    return EngineInput(images=torch.rand(views, 3, s, s, generator=g) * 2 - 1,
                       image_masks=torch.ones(views, dtype=torch.bool),
                       tokens=torch.randint(0, cfg.vocab_size, (prompt,), generator=g),
                       token_mask=torch.ones(prompt, dtype=torch.bool),
                       state=torch.randn(cfg.max_state_dim, generator=g))


def pct(xs, q):
    return float(np.percentile(np.asarray(xs), q)) if xs else None


def impulse_wrench(k: int) -> list:
    """The k-th force impulse: -30 N on z for odd k, zero for even k (a square wave)."""
    return [0.0, 0.0, -30.0 if k % 2 else 0.0, 0.0, 0.0, 0.0]


def drive(seconds: float, impulse_ms: float, impulse, change_ms: float, change, warmup_s: float = 0.0) -> None:
    """The robot 0 script of both case kinds: for `seconds`, impulse(k, now) every impulse_ms
    and change(k) (a new camera frame) every change_ms, k being the impulses so far."""
    t_end = time.perf_counter() + seconds
    next_imp = next_change = time.perf_counter() + warmup_s
    k = 0
    while time.perf_counter() < t_end:
        now = time.perf_counter()
        if now >= next_imp:
            k += 1
            impulse(k, now)
            next_imp += impulse_ms / 1e3
        if now >= next_change:
            change(k)
            next_change += change_ms / 1e3
        time.sleep(0.002)


def alone(core: StreamingCore, reps: int = 30) -> dict:
    """Each stream's step run by itself, sequentially (no overlap)."""
    vlm, tick = [], []
    t = 0.0
    for i in range(reps):
        t0 = time.perf_counter()
        if i % 10 == 0:
            core.vlm_pass(t)
            vlm.append((time.perf_counter() - t0) * 1e3)
            t0 = time.perf_counter()
        core.tick(t)
        tick.append((time.perf_counter() - t0) * 1e3)
        t += core.period
    return {"alone_tick_ms": statistics.median(tick[1:]), "alone_vlm_ms": statistics.median(vlm)}


def run_case(args, n_robots: int) -> dict:
    cfg = Pi0Config.preset(args.preset)
    engine, expert = StreamingExpert.build(cfg, force="random", backend=args.backend)

    def make_core(f: float) -> StreamingCore:
        # One factor for every rate keeps the schedule's shape in ticks (steps per token, tokens
        # per tick) and only slows its clock.
        scfg = StreamingConfig(vlm_hz=args.vlm_hz * f, ae_hz=args.ae_hz * f, node_hz=args.node_hz,
                               action_hz=args.action_hz * f, max_robots=max(4, n_robots))
        c = StreamingCore(engine, expert, scfg)
        for i in range(n_robots):
            c.add_robot(f"r{i}", observation(cfg, i), seed=i)
        return c

    core = make_core(1.0)
    base = alone(core)
    scale = 1.0
    if args.scale == "auto":
        # Both streams' work per second at the nominal rates, in CPU seconds, against the share
        # of one core we allow (--cpu-budget): the GIL serialises most of a tiny model's work.
        load = args.ae_hz * base["alone_tick_ms"] / 1e3 + args.vlm_hz * base["alone_vlm_ms"] / 1e3
        scale = min(1.0, args.cpu_budget / load)
        core = make_core(scale)
    base["rate_scale"] = scale

    pending = []  # (version, t_write)
    quick, slow = [], []
    frames = []  # capture times of robot 0's frames
    lock = threading.Lock()

    def on_segment(seg):
        if seg.robot_id != "r0":
            return
        now = time.perf_counter()
        with lock:
            while pending and pending[0][0] <= seg.wrench_version:
                quick.append((now - pending.pop(0)[1]) * 1e3)
            while frames and frames[0] <= seg.observation_time:
                slow.append((now - frames.pop(0)) * 1e3)

    def impulse(k, now):
        with lock:
            v = core.set_wrench("r0", impulse_wrench(k), stamp=now)
            pending.append((v, time.perf_counter()))

    def new_frame(k):
        cap = time.perf_counter()
        core.update_observation("r0", observation(cfg, 1000 + k), captured_at=cap)
        with lock:
            frames.append(cap)

    eng = StreamingEngine(core, on_segment)
    eng.start()
    drive(args.seconds, args.impulse_ms, impulse, args.frame_ms, new_frame, warmup_s=0.3)  # let both streams warm up
    eng.stop()
    m = eng.metrics()
    out = {
        "robots": n_robots,
        "vlm_hz": round(m["vlm_hz"], 2),
        "ae_hz": round(m["ae_hz"], 1),
        "tick_period_ms_p50": round(m["tick_period_ms_p50"], 3),
        "tick_period_ms_p99": round(m["tick_period_ms_p99"], 3),
        "tick_compute_ms_p50": round(m["tick_compute_ms_p50"], 3),
        "tick_compute_ms_p99": round(m["tick_compute_ms_p99"], 3),
        "vlm_pass_ms_p50": round(m["vlm_pass_ms_p50"], 2),
        "missed_tick_fraction": round(m["missed_tick_fraction"], 4),
        "quick_loop_ms_p50": pct(quick, 50), "quick_loop_ms_p99": pct(quick, 99), "quick_loop_samples": len(quick),
        "slow_loop_ms_p50": pct(slow, 50), "slow_loop_ms_p99": pct(slow, 99), "slow_loop_samples": len(slow),
        "late_nodes": core.stats.late_nodes, "segments": core.stats.segments,
        "errors": m["errors"],
        "configured_ae_hz": round(args.ae_hz * scale, 1), "configured_vlm_hz": round(args.vlm_hz * scale, 2),
        **{k: round(v, 3) for k, v in base.items()},
    }
    print(f"[{n_robots} robot(s)] {json.dumps(out)}", file=sys.stderr, flush=True)
    return out


# ---------------------------------------------------------------- the tick itself
def _count_ops(fn) -> dict:
    from physai_lab.op_count import count_aten_ops

    n = count_aten_ops(fn)
    return {"aten_all": n.all, "aten_top": n.top, "gemm": n.gemm}


def _dist(ms, period_ms) -> dict:
    a = np.asarray(ms)
    return {"n": int(a.size), "p50": round(float(np.percentile(a, 50)), 4), "p90": round(float(np.percentile(a, 90)), 4),
            "p99": round(float(np.percentile(a, 99)), 4), "max": round(float(a.max()), 4),
            "over_period": round(float(np.mean(a > period_ms)), 5)}


def _tick_core(args, impl: str, n_robots: int, vlm_hz: float):
    cfg = Pi0Config.preset(args.preset)
    t0 = time.perf_counter()
    engine, expert = StreamingExpert.build(cfg, force="random", backend=args.backend, tick=impl)
    scfg = StreamingConfig(vlm_hz=vlm_hz, ae_hz=args.ae_hz, node_hz=args.node_hz, action_hz=args.action_hz,
                           max_robots=max(4, n_robots), ae_priority=args.ae_priority)
    core = StreamingCore(engine, expert, scfg)
    for i in range(n_robots):
        core.add_robot(f"r{i}", observation(cfg, i), seed=i)
    core.vlm_pass(0.0)
    core.tick(0.0)  # compiles (tick="compiled") for this batch shape
    return core, time.perf_counter() - t0


def tick_sequential(args, impl: str, n_robots: int) -> dict:
    """core.tick back to back at nominal stream times (no other thread), a VLM pass between
    every ae_hz / vlm_hz ticks (untimed; the tick after it pays the snapshot's prepare)."""
    core, build_s = _tick_core(args, impl, n_robots, args.vlm_hz)
    period = 1.0 / args.ae_hz
    every = max(1, round(args.ae_hz / args.vlm_hz))
    t, ms = period, []
    for k in range(args.tick_reps + args.tick_warmup):
        if k % every == 0:
            core.vlm_pass(t)
        t0 = time.perf_counter()
        core.tick(t)
        if k >= args.tick_warmup:
            ms.append((time.perf_counter() - t0) * 1e3)
        t += period
    out = {"impl": impl, "robots": n_robots, "tick_ms": _dist(ms, period * 1e3), "build_s": round(build_s, 2)}
    if impl == "compiled":
        out["compile_s"] = round(core.expert.fused.compile_s or 0.0, 2)
    if n_robots == 1:
        out["ops_core_tick"] = _count_ops(lambda: core.tick(t))
    return out


def tick_realtime(args, impl: str, n_robots: int, vlm: str) -> dict:
    """The AE stream on its thread at ae_hz for --seconds (StreamingEngine), with the VLM stream
    on its own thread ("thread", the default engine), in its own process with the KV cache in
    shared memory ("process", StreamingEngine(vlm="process")), or absent ("none": one pass at
    the start). Missed ticks and the tick's compute-time distribution as the engine counts them."""
    core, _ = _tick_core(args, impl, n_robots, 1e-3 if vlm == "none" else args.vlm_hz)
    eng = StreamingEngine(core, vlm="process" if vlm == "process" else "thread")
    eng.start()
    time.sleep(args.seconds)
    eng.stop()
    m = eng.metrics()
    out = {"impl": impl, "robots": n_robots, "vlm": vlm, "ae_hz": round(m["ae_hz"], 1),
           "missed_tick_fraction": round(m["missed_tick_fraction"], 5),
           "tick_ms": _dist(list(eng.tick_ms), core.period * 1e3),
           "tick_period_ms_p99": round(m["tick_period_ms_p99"], 3), "errors": m["error_count"],
           "ae_scheduling": m["ae_scheduling"]}
    if vlm != "none":
        out["vlm_hz"] = round(m["vlm_hz"], 2)
        out["vlm_pass_ms"] = round(m["vlm_pass_ms_p50"], 2)  # process: the mean
    if vlm == "process":
        out["vlm_process_start_s"] = round(eng.vlm_start_s, 2)
    print(f"[tick realtime] {json.dumps(out)}", file=sys.stderr, flush=True)
    return out


def tick_bench(args) -> dict:
    res = {"sequential": [], "realtime": [], "robots_held_480hz": {}}
    for impl in args.impls:
        for n in args.robots:
            r = tick_sequential(args, impl, n)
            print(f"[tick sequential] {json.dumps(r)}", file=sys.stderr, flush=True)
            res["sequential"].append(r)
    for impl in args.impls:
        for vlm in args.vlm_modes:
            held = 0
            for n in args.robots:
                r = tick_realtime(args, impl, n, vlm)
                res["realtime"].append(r)
                if r["missed_tick_fraction"] < 0.01 and r["errors"] == 0 and (vlm == "none" or r.get("vlm_hz", 0) >= 0.95 * args.vlm_hz):
                    held = max(held, n)
            res["robots_held_480hz"][f"{impl}/{vlm}"] = held
    return res


# ---------------------------------------------------------------- through ROS 2
def _ros_fleet_doc(args, n_robots: int) -> dict:
    import yaml

    from physai_ros.config.fleet import default_fleet_path

    doc = yaml.safe_load(default_fleet_path().read_text())
    # A random-weight preset (the embedded default may be a trained checkpoint): tiny builds fast;
    # pi0_2layer / pi0 give the tick pi0's widths (the tick's cost, not its actions, is measured).
    doc["server"]["model"] = {"preset": args.preset, "tokenizer": "package://physai_ros/assets/tokenizer.json",
                              "max_token_len": 48, "seed": 0}
    doc["server"]["profile"] = False
    doc["server"]["streaming"] = {"slots": n_robots, "vlm_hz": args.vlm_hz, "ae_hz": args.ae_hz,
                                  "action_hz": args.action_hz, "force": "random", "when_full": "refuse",
                                  "timeout_s": 5.0, "torch_threads": args.threads,
                                  "vlm": args.ros_vlm, "ae_priority": args.ae_priority}
    doc["tasks"]["bench_stream"] = dict(doc["tasks"]["pick_place"], mode="streaming",
                                        segment_rate_hz=args.segment_rate_hz, slo_ms=10000,
                                        max_consecutive_slo_violation=1000)
    doc["tasks"]["bench_stream"].pop("language", None)  # a streaming task cannot ask questions
    doc["robots"] = [{"id": f"robot_{k}", "task": "bench_stream", "cameras": ["camera_0/image_raw"],
                      "image_height": 64, "image_width": 64,
                      "joints": ["joint_0", "joint_1", "joint_2", "joint_3", "gripper"],
                      "control_rate_hz": 480, "simulated": False} for k in range(n_robots)]
    return doc


class _RosProbe:
    """Plays the robots' sensors and records robot 0's segments, commands and observations."""

    def __init__(self, n_robots: int, args):
        import rclpy
        from diagnostic_msgs.msg import DiagnosticArray
        from geometry_msgs.msg import WrenchStamped
        from physai_ros_interfaces.msg import Observation, TrajectorySegment
        from rclpy.executors import SingleThreadedExecutor
        from sensor_msgs.msg import Image, JointState
        from trajectory_msgs.msg import JointTrajectory

        from physai_ros.protocol import topics
        from physai_ros.ros.qos import reliable_qos, sensor_data_qos

        self.node = rclpy.create_node("streaming_bench_probe")
        self.lock = threading.Lock()
        self.n = n_robots
        self.segments, self.commands, self.obs_stamps = [], [], {}
        self.wrench_value = [0.0] * 6
        self.impulses, self.changes = [], []  # publish times (= stamps) of robot 0's impulses / new frames
        self.color = 0
        self.diag = {}
        self.diag_reports = []  # arrival times of the server's streaming reports
        node = self.node
        robots = [f"robot_{k}" for k in range(n_robots)]

        def pubs(msg_type, name, profile):
            return [node.create_publisher(msg_type, topics.robot_topic(r, name), profile) for r in robots]

        self.cams = pubs(Image, topics.camera_topic(0), sensor_data_qos())
        self.joints = pubs(JointState, topics.JOINT_STATES_TOPIC, reliable_qos())
        self.wrenches = pubs(WrenchStamped, topics.WRENCH_TOPIC, sensor_data_qos())
        node.create_subscription(TrajectorySegment, topics.robot_topic(robots[0], topics.TRAJECTORY_SEGMENT_TOPIC),
                                 self._on_segment, reliable_qos(500))
        node.create_subscription(JointTrajectory, topics.robot_topic(robots[0], topics.JOINT_TRAJECTORY_TOPIC),
                                 self._on_command, reliable_qos(500))
        node.create_subscription(Observation, topics.robot_topic(robots[0], topics.OBSERVATION_TOPIC), self._on_obs,
                                 reliable_qos(100))
        node.create_subscription(DiagnosticArray, topics.DIAGNOSTICS_TOPIC, self._on_diag, reliable_qos(50))
        self._img = Image(height=64, width=64, encoding="rgb8", step=64 * 3)
        self._js = JointState(name=["joint_0", "joint_1", "joint_2", "joint_3", "gripper"])
        self._w = WrenchStamped()
        node.create_timer(1.0 / args.ros_camera_hz, self._camera)
        node.create_timer(0.01, self._joint_states)
        node.create_timer(1.0 / args.ros_wrench_hz, self._wrench0)
        if n_robots > 1:
            node.create_timer(0.02, self._wrench_others)
        self.executor = SingleThreadedExecutor()
        self.executor.add_node(node)
        self._stop = False
        self.thread = threading.Thread(target=self._spin, daemon=True)
        self.thread.start()

    def _spin(self):
        while not self._stop:
            self.executor.spin_once(timeout_sec=0.01)

    @staticmethod
    def _stamp(msg, t):
        msg.header.stamp.sec, msg.header.stamp.nanosec = int(t), int(round((t % 1) * 1e9)) % 1_000_000_000

    def _camera(self):
        t = time.time()
        with self.lock:
            color = self.color
        self._img.data = bytes([color]) * (64 * 64 * 3)
        self._stamp(self._img, t)
        for k, pub in enumerate(self.cams):
            pub.publish(self._img)
        with self.lock:
            if self.changes and self.changes[-1] is None:  # first frame of the new content
                self.changes[-1] = round(t * 1e6)

    def _joint_states(self):
        self._stamp(self._js, time.time())
        self._js.position = [0.0, 0.1, 0.2, 0.3, 0.04]
        for pub in self.joints:
            pub.publish(self._js)

    def _pub_wrench(self, pub, value):
        w = self._w
        t = time.time()
        self._stamp(w, t)
        w.wrench.force.x, w.wrench.force.y, w.wrench.force.z = value[:3]
        w.wrench.torque.x, w.wrench.torque.y, w.wrench.torque.z = value[3:]
        pub.publish(w)
        return t

    def _wrench0(self):
        with self.lock:
            value, new = list(self.wrench_value), self.impulses and self.impulses[-1] is None
        t = self._pub_wrench(self.wrenches[0], value)
        if new:
            with self.lock:
                self.impulses[-1] = round(t * 1e6)

    def _wrench_others(self):
        for pub in self.wrenches[1:]:
            self._pub_wrench(pub, [0.0] * 6)

    def impulse(self, value):
        with self.lock:
            self.wrench_value = list(value)
            self.impulses.append(None)

    def new_content(self):
        with self.lock:
            self.color = (self.color + 97) % 256
            self.changes.append(None)

    def _on_segment(self, m):
        from physai_ros.ros.codecs.segment import segment_from_msg
        from physai_lab.stream_trace import segment_grid

        recv = time.time()
        seg = segment_from_msg(m)
        g = segment_grid(seg.start_time, seg.dt, seg.positions, list(seg.committed), 480.0)
        with self.lock:
            self.segments.append((recv, m.header.stamp.sec * 10**6 + round(m.header.stamp.nanosec / 1e3), m.round_id, g))

    def _on_command(self, m):
        from physai_ros.ros.codecs.joint_trajectory import msg_to_plan
        from physai_lab.stream_trace import command_grid

        recv = time.time()
        plan = msg_to_plan(m, now=recv)
        g = command_grid(plan.stamp, [p.time_from_start for p in plan.points],
                         [list(p.positions) for p in plan.points], 480.0)
        with self.lock:
            self.commands.append((recv, g))

    def _on_obs(self, m):
        with self.lock:
            self.obs_stamps[m.round_id] = m.header.stamp.sec * 10**6 + round(m.header.stamp.nanosec / 1e3)

    def _on_diag(self, m):
        for st in m.status:
            if st.name.startswith("policy_server") and st.name.endswith("streaming"):
                with self.lock:
                    self.diag = {kv.key: kv.value for kv in st.values}
                    self.diag_reports.append(time.monotonic())

    def close(self):
        self._stop = True
        self.thread.join(timeout=2)
        self.executor.shutdown()
        self.node.destroy_node()


def _loop_latencies(events, segments, commands, key) -> list:
    """For each event (stamp, us): the first command (receive time) carrying the tentative node
    of a segment with key(segment) >= the event's stamp and < the next event's."""
    from physai_lab.stream_trace import matching_ticks

    out = []
    events = [e for e in events if e is not None]
    for i, ev in enumerate(events):
        nxt = events[i + 1] if i + 1 < len(events) else None
        segs = [(r, g) for r, *rest, g in segments if key((r, *rest, g)) is not None
                and key((r, *rest, g)) >= ev and (nxt is None or key((r, *rest, g)) < nxt)]
        if not segs:
            continue
        first_recv = segs[0][0]
        for recv, c in commands:
            if recv < first_recv:
                continue
            if any(sr <= recv and matching_ticks(c, g, tentative_only=False).size for sr, g in segs):
                out.append((recv - ev / 1e6) * 1e3)
                break
    return out


def _window_rates(before: dict, after: dict) -> dict:
    """The server's rates between two /diagnostics reports (its own counts since the streams
    started), so the start-up before the measured window does not dilute them."""
    keys = ("running_s", "ticks", "vlm_passes", "scheduled_ticks", "missed_ticks")
    a, b = ({k: _float(d.get(k)) for k in keys} for d in (before, after))
    if None in a.values() or None in b.values() or b["running_s"] <= a["running_s"]:
        return {"window_s": None, "window_ae_hz": None, "window_vlm_hz": None, "window_missed_tick_fraction": None}
    dt = b["running_s"] - a["running_s"]
    scheduled = b["scheduled_ticks"] - a["scheduled_ticks"]
    return {"window_s": round(dt, 2), "window_ae_hz": round((b["ticks"] - a["ticks"]) / dt, 2),
            "window_vlm_hz": round((b["vlm_passes"] - a["vlm_passes"]) / dt, 3),
            "window_missed_tick_fraction": round((b["missed_ticks"] - a["missed_ticks"]) / scheduled, 4)
            if scheduled > 0 else None}


def run_ros_case(args, n_robots: int) -> dict:
    import tempfile

    import rclpy
    import yaml

    from physai_ros.fleet import plan as fleet_plan
    from physai_ros.fleet.processes import start_process, stop_processes
    from physai_ros.config.fleet import load_fleet

    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    tmp = Path(tempfile.mkdtemp(prefix="streaming_bench_"))
    path = tmp / "fleet.yaml"
    path.write_text(yaml.safe_dump(_ros_fleet_doc(args, n_robots)))
    cfg = load_fleet(path)
    if not rclpy.ok():
        rclpy.init()
    probe = _RosProbe(n_robots, args)
    procs = []
    try:
        specs = fleet_plan.fleet_plan(cfg)
        for spec in specs:
            procs.append(start_process(spec, str(tmp / "logs")))
        # Warm-up: server start, registrations, every robot streaming.
        end = time.monotonic() + args.ros_startup_s
        while time.monotonic() < end:
            with probe.lock:
                ok = len(probe.segments) > 20 and len(probe.commands) > 100 and probe.diag.get("streaming_robots", "").count("robot_") == n_robots
            if ok:
                break
            dead = [(spec.name, p.returncode) for spec, p in zip(specs, procs) if p.poll() is not None]
            if dead:  # -9 with nothing in the log: most often the kernel's out-of-memory killer
                raise RuntimeError(f"ROS case {n_robots}: {', '.join(f'{n} exited {rc}' for n, rc in dead)} "
                                   f"before streaming started (logs in {tmp})")
            time.sleep(0.2)
        else:
            raise RuntimeError(f"ROS case {n_robots}: streaming did not start in {args.ros_startup_s} s (logs in {tmp})")
        with probe.lock:
            probe.segments.clear()
            probe.commands.clear()
            diag_before = dict(probe.diag)
            window_start = time.monotonic()
        drive(args.ros_seconds, args.ros_impulse_ms, lambda k, now: probe.impulse(impulse_wrench(k)),
              args.ros_change_ms, lambda k: probe.new_content())
        time.sleep(0.5)  # let the last events reach the controller
        with probe.lock:
            segs, cmds = list(probe.segments), list(probe.commands)
            impulses, changes, obs = list(probe.impulses), list(probe.changes), dict(probe.obs_stamps)
            diag = dict(probe.diag)
            diag_in_window = sum(t >= window_start for t in probe.diag_reports)
    finally:
        probe.close()
        stop_processes(procs)
    quick = _loop_latencies(impulses, segs, cmds, key=lambda s: s[1])
    slow = _loop_latencies(changes, segs, cmds, key=lambda s: obs.get(s[2]))
    out = {
        "robots": n_robots, "transport": "ROS 2 loopback (Fast DDS), separate processes",
        "quick_loop_ms_p50": pct(quick, 50), "quick_loop_ms_p99": pct(quick, 99),
        "quick_loop_samples": len(quick), "impulses": len([i for i in impulses if i is not None]),
        "slow_loop_ms_p50": pct(slow, 50), "slow_loop_ms_p99": pct(slow, 99),
        "slow_loop_samples": len(slow), "visual_changes": len([c for c in changes if c is not None]),
        "segments_received": len(segs), "commands_received": len(cmds),
        "server_vlm_hz": _float(diag.get("vlm_hz")), "server_ae_hz": _float(diag.get("ae_hz")),
        "server_missed_tick_fraction": _float(diag.get("missed_tick_fraction")),
        **_window_rates(diag_before, diag), "server_ae_scheduling": diag.get("ae_scheduling"),
        "server_reports_in_window": diag_in_window,
        "wrench_hz_robot0": args.ros_wrench_hz, "camera_hz": args.ros_camera_hz,
    }
    print(f"[ROS, {n_robots} robot(s)] {json.dumps(out)}", file=sys.stderr, flush=True)
    return out


def _float(v):
    try:
        return round(float(v), 3)
    except (TypeError, ValueError):
        return None


# Plain float options: flag -> default (and the few that need a help text).
_FLOAT_OPTIONS = {
    "--seconds": 4.0, "--vlm-hz": 30.0, "--ae-hz": 480.0, "--node-hz": 480.0, "--action-hz": 50.0,
    "--impulse-ms": 50.0, "--frame-ms": 100.0, "--cpu-budget": 0.7, "--ros-seconds": 8.0, "--ros-startup-s": 180.0,
    "--ros-impulse-ms": 200.0, "--ros-change-ms": 400.0, "--ros-camera-hz": 30.0, "--ros-wrench-hz": 480.0,
    "--segment-rate-hz": 480.0,
}
_FLOAT_HELP = {
    "--cpu-budget": "with --scale auto: core-seconds per second to plan for",
    "--segment-rate-hz": "ROS cases: TrajectorySegment messages per second per robot (at most)",
}


def headline(res: dict, cases: list, keys, prefix: str = "") -> None:
    """Copies `keys` of the 1-robot case (else the first) to the top level of `res`, as prefix+key."""
    one = next((c for c in cases if c["robots"] == 1), cases[0])
    for key in keys:
        res[prefix + key] = one[key]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--backend", default="torch")
    ap.add_argument("--robots", type=int, nargs="+", default=[1, 4])
    for flag, default in _FLOAT_OPTIONS.items():
        ap.add_argument(flag, type=float, default=default, help=_FLOAT_HELP.get(flag))
    ap.add_argument("--scale", choices=["none", "auto"], default="none",
                    help="auto: scale every rate down to what one stream-alone measurement says this CPU sustains")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (each stream is its own thread)")
    ap.add_argument("--no-ros", action="store_true", help="skip the ROS 2 cases")
    ap.add_argument("--ros-only", action="store_true", help="skip the in-process cases")
    ap.add_argument("--ros-vlm", choices=["thread", "process"], default="thread",
                    help="ROS cases: the server's VLM stream on a thread (the default) or in its own process")
    ap.add_argument("--tick-bench", action="store_true",
                    help="only the action-expert tick: op counts, sequential tick time distribution and "
                         "real-time missed ticks per --impls x --vlm-modes x --robots")
    ap.add_argument("--impls", nargs="+", default=["plain", "fused"], choices=["plain", "fused", "compiled"])
    ap.add_argument("--vlm-modes", nargs="*", default=["thread", "process", "none"], choices=["thread", "process", "none"],
                    help="--tick-bench real-time cases (none given: only the sequential ticks)")
    ap.add_argument("--tick-reps", type=int, default=3000)
    ap.add_argument("--tick-warmup", type=int, default=200, help="--tick-bench: untimed ticks before the timed ones")
    ap.add_argument("--ae-priority", type=int, default=0,
                    help="SCHED_FIFO priority of the AE thread (0 = ordinary): --tick-bench real-time cases "
                         "and the ROS cases' server")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    res = {"preset": args.preset, "device": "cpu", "torch_threads": args.threads,
           "configured": {"vlm_hz": args.vlm_hz, "ae_hz": args.ae_hz, "action_hz": args.action_hz},
           "load_avg_before": [round(x, 2) for x in os.getloadavg()], "cpus": os.cpu_count(), "cases": []}
    if args.tick_bench:
        res["tick"] = tick_bench(args)
        res["load_avg_after"] = [round(x, 2) for x in os.getloadavg()]
        print(json.dumps(res) if args.json else json.dumps(res, indent=1))
        return 0
    for n in ([] if args.ros_only else args.robots):
        res["cases"].append(run_case(args, n))
    res["load_avg_after_in_process"] = [round(x, 2) for x in os.getloadavg()]
    if res["cases"]:
        headline(res, res["cases"], ("vlm_hz", "ae_hz", "missed_tick_fraction", "quick_loop_ms_p50",
                                     "quick_loop_ms_p99", "tick_period_ms_p50", "tick_period_ms_p99"))
    if not args.no_ros:
        res["ros_cases"] = [run_ros_case(args, n) for n in args.robots]
        headline(res, res["ros_cases"], ("quick_loop_ms_p50", "quick_loop_ms_p99", "slow_loop_ms_p50",
                                         "slow_loop_ms_p99"), prefix="ros_")
    res["load_avg_after"] = [round(x, 2) for x in os.getloadavg()]
    res["gpu"] = "not measured: no GPU here (CUDA stream path exists, untested)"
    if args.json:
        print(json.dumps(res))
    else:
        for c in res["cases"]:
            print(json.dumps(c, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
