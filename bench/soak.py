"""Soak benchmark: a simulated fleet served for many minutes (the suite's "soak" entry; --quick,
one minute with two robots, is what make test runs).

Runs `physai-fleet` (the real policy server with the tiny pi0, and per robot a sim_robot, a
robot_client and a trajectory_controller, each its own process) on a generated fleet file, and
watches it from this process over DDS:
  - rounds, from every robot client's own round ledger (in its client_status; see
    physai_ros.client.round_ledger): sent, answered, lost (never answered: OK, error or refusal)
    and duplicated (two OK chunks for one round), which must both be 0, and whether every robot
    was served; an observer subscribed to the whole fleet from one process misses messages, so
    its counts are reported beside the ledgers, not used for the verdict;
  - latency from capture to the chunk's arrival here, per minute (p50/p99 over the fleet);
  - every robot's client_status (refusals, fallbacks, SLO misses, dropped wrench samples) and the
    server's /diagnostics (refusals by reason);
  - resident memory (VmRSS) of every fleet process, sampled every --sample-s; growth is reported
    as the slope of a least-squares line over the samples after the first minute (start-up and
    warm-up allocations are not growth) and as last-minus-first of that range;
  - the 1-minute load average.

    .venv/bin/python bench/soak.py --minutes 12 --robots 16 --json out/soak/soak.json
    .venv/bin/python bench/suite.py --only soak     # 10 minutes, 16 robots: bench/results/soak.json

The robots run at reduced sensor and control rates (see ROBOT_YAML) so 16 of them plus the
server fit on a small machine; the serving path is the same as at full rate. Every fleet process
has its own session, hence (Linux autogroup) its own equal CPU share: the policy server's group
gets --server-nice (default -10) and physai-fleet's monitor --monitor-nice (-5), standing in for
the robots running on hosts of their own.
Exit status 0 only if no round was lost or duplicated and every robot was served.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

from physai_bench import results
from physai_ros.install_paths import share_dir
from physai_ros.protocol.chunk import HOLD_ENGINE_INSTANCE
from physai_ros.protocol.topics import (ACTION_CHUNK_TOPIC, CLIENT_STATUS_TOPIC, DIAGNOSTICS_TOPIC,
                                        OBSERVATION_TOPIC, robot_topic)

FLEET_YAML = """\
server:
  model: {{preset: tiny, tokenizer: package://physai_ros/assets/tokenizer.json, max_token_len: 48, seed: 0}}
  device: cpu
  engine_instances: 1
  max_batch: 8
  scheduler: {scheduler}
  profile: false
  max_observation_age_s: 2.0
tasks:
  pick_place:
    prompt: "pick up the cube and place it on the goal"
    action_rate_hz: 10
    horizon_policy: {{name: static, params: [8]}}
    slo_ms: {slo_ms}
    fallback: hold
    max_consecutive_slo_violation: 1000000
    on_max_violation: stop_and_call_human
robots:
{robots}
monitoring:
  diagnostics_period_s: 1.0
  window_s: 60.0
  thresholds:
    latency_ms_p99: {{warn: {warn_ms}, error: {slo_ms}}}
    wrench_hz: {{warn_below: {wrench_warn}, error_below: 5}}
    camera_hz: {{warn_below: {camera_warn}, error_below: 1}}
security:
  keystore: auto      # authenticated, as fleets run (docs/security.md)
  insecure: {insecure}
"""
ROBOT_YAML = """\
  - id: robot_{k}
    task: pick_place
    sim: {{task: pick_and_place, num_joints: 4, seed: {k}, physics_rate_hz: {physics_hz}, camera_rate_hz: {camera_hz}, joint_state_rate_hz: 10.0}}
    cameras: [camera_0/image_raw]
    image_height: {image}
    image_width: {image}
    joints: [joint_0, joint_1, joint_2, joint_3, gripper]
    control_rate_hz: {control_hz}
    simulated: true
"""


# config/fastdds_udp_only.xml: UDP only, and maxInitialPeersRange 128. With discovery limited to
# localhost, Fast DDS announces a participant by unicast to a range of participant ids only (32
# by default here). The policy server imports torch before it creates its participant, so among
# ~50 it gets a high id, and robots whose ids fell outside its range never saw its register
# service (two 16-robot soaks served 8 robots; a probe of 40 early clients and one late service:
# 32 saw it, 40 with the wider range).
def udp_only_profile() -> Path:
    return share_dir() / "config" / "fastdds_udp_only.xml"


def write_fleet(path: Path, args) -> Path:
    robots = "".join(ROBOT_YAML.format(k=k, physics_hz=args.physics_hz, camera_hz=args.camera_hz,
                                       image=args.image, control_hz=args.control_hz)
                     for k in range(args.robots))
    path.write_text(FLEET_YAML.format(robots=robots, scheduler=args.scheduler, slo_ms=args.slo_ms,
                                      warn_ms=0.8 * args.slo_ms, wrench_warn=0.5 * args.physics_hz,
                                      camera_warn=0.5 * args.camera_hz,
                                      insecure="true" if args.insecure else "false"))
    return path


# ---- processes and memory -----------------------------------------------------------------

def descendants(root: int) -> dict[int, str]:
    """pid -> short name (module and namespace) of every process under root."""
    children: dict[int, list[int]] = defaultdict(list)
    cmd: dict[int, list[str]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd[int(d)] = f.read().decode(errors="replace").split("\0")
        except (OSError, IndexError, ValueError):
            continue
        children[ppid].append(int(d))
    out, todo = {}, [root]
    while todo:
        pid = todo.pop()
        argv = cmd.get(pid, [])
        mod = argv[argv.index("-m") + 1] if "-m" in argv and argv.index("-m") + 1 < len(argv) else "?"
        ns = next((a.split(":=", 1)[1].strip("/") for a in argv if a.startswith("__ns:=")), "")
        out[pid] = f"{ns + '/' if ns else ''}{mod.rsplit('.', 1)[-1]}"
        todo += children.get(pid, [])
    return out


def rss_mb(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        return None
    return None


def memory_growth(samples: list[tuple[float, float]], skip_s: float) -> dict:
    """samples: (seconds since start, MB). Slope over the samples after skip_s."""
    pts = [(t, m) for t, m in samples if t >= skip_s]
    if len(pts) < 3:
        pts = samples
    t = np.array([p[0] for p in pts])
    m = np.array([p[1] for p in pts])

    def slope(t, m) -> float:
        return float(np.polyfit(t / 60.0, m, 1)[0]) if len(t) >= 2 and np.ptp(t) > 0 else 0.0

    # The second half as well: robots that register late make the start-up phase longer than
    # skip_s, and a leak shows in both halves while settling shows in the first only.
    half = t >= t[0] + (t[-1] - t[0]) / 2
    return {"rss_mb_first": round(float(m[0]), 1), "rss_mb_last": round(float(m[-1]), 1),
            "rss_mb_max": round(float(m.max()), 1), "growth_mb": round(float(m[-1] - m[0]), 2),
            "slope_mb_per_min": round(slope(t, m), 3),
            "slope_second_half_mb_per_min": round(slope(t[half], m[half]), 3), "samples": len(pts)}


# ---- the observer -------------------------------------------------------------------------

class Observer:
    """Subscribes to every robot's serving topics and status; spins in its own thread."""

    def __init__(self, robots: list[str]):
        import rclpy
        from diagnostic_msgs.msg import DiagnosticArray
        from physai_ros_interfaces.msg import ActionChunk, Observation
        from rclpy.executors import SingleThreadedExecutor
        from std_msgs.msg import String

        from physai_ros.ros.qos import reliable_qos

        rclpy.init()
        self.node = rclpy.create_node("soak_observer")
        self.lock = threading.Lock()
        self.sent: dict[str, dict[int, float]] = {r: {} for r in robots}  # round -> wall time first sent
        self.answers: dict[str, dict[int, list[tuple[int, float, str]]]] = {r: defaultdict(list) for r in robots}
        self.latency: list[tuple[float, float]] = []  # (wall time, capture -> arrival ms)
        self.status: dict[str, dict] = {}
        self.diag: dict[str, dict[str, str]] = {}
        self.diag_levels: dict[str, int] = {}
        self.holds = defaultdict(int)
        self._obs_type, self._qos = Observation, reliable_qos(100)
        self._watching_obs: set[str] = set()
        for r in robots:
            self.node.create_subscription(ActionChunk, robot_topic(r, ACTION_CHUNK_TOPIC),
                                          lambda m, r=r: self._on_chunk(r, m), reliable_qos(100))
            self.node.create_subscription(String, robot_topic(r, CLIENT_STATUS_TOPIC),
                                          lambda m, r=r: self._on_status(r, m), reliable_qos())
        self.node.create_subscription(DiagnosticArray, DIAGNOSTICS_TOPIC, self._on_diag, reliable_qos(100))
        self.executor = SingleThreadedExecutor()
        self.executor.add_node(self.node)
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._spin, daemon=True)
        self.thread.start()

    def _spin(self):
        while not self._stop.is_set():
            self.executor.spin_once(timeout_sec=0.05)
            self._watch_observations()

    def _watch_observations(self):
        """Subscribe to a robot's observations only once the policy server has: a robot_client
        sends when its observation topic has a subscriber, so subscribing earlier would make
        it send rounds into the void during the server's warm-up (rounds nobody can answer)."""
        for r in self.sent:
            topic = robot_topic(r, OBSERVATION_TOPIC)
            if r not in self._watching_obs and self.node.count_subscribers(topic) > 0:
                self.node.create_subscription(self._obs_type, topic, lambda m, r=r: self._on_obs(r, m), self._qos)
                self._watching_obs.add(r)

    def _on_obs(self, r, m):
        with self.lock:
            self.sent[r].setdefault(int(m.round_id), time.time())

    def _on_chunk(self, r, m):
        now = time.time()
        if m.engine_instance == HOLD_ENGINE_INSTANCE:  # the client's own hold chunk
            with self.lock:
                self.holds[r] += 1
            return
        capture = m.header.stamp.sec + m.header.stamp.nanosec * 1e-9
        with self.lock:
            self.answers[r][int(m.round_id)].append((int(m.status), now, m.error.split(":")[0]))
            if m.status == 0:
                self.latency.append((now, (now - capture) * 1e3))

    def _on_status(self, r, m):
        with self.lock:
            self.status[r] = json.loads(m.data)

    def _on_diag(self, arr):
        with self.lock:
            for st in arr.status:
                self.diag[st.name] = {kv.key: kv.value for kv in st.values}
                lvl = st.level[0] if isinstance(st.level, (bytes, bytearray)) else int(st.level)
                self.diag_levels[st.name] = lvl

    def close(self):
        import rclpy

        self._stop.set()
        self.thread.join(timeout=5)
        self.node.destroy_node()
        rclpy.try_shutdown()


def rounds_report(statuses: dict[str, dict], obs: Observer) -> dict:
    """From every robot client's own round ledger (its last client_status): the client sees every
    observation it sent and every answer on its action_chunk topic, which this observer, one
    starved subscriber for the whole fleet, cannot (it missed some of both). Lost: never answered
    (OK, error or refusal) within the ledger's lost_after_s; duplicated: two OK chunks for one
    round; pending at the end: sent in the last seconds, in flight when the run stopped."""
    keys = ("sent", "answered", "answered_late", "pending", "lost", "orphaned", "duplicated", "unknown_answers")
    per_robot, totals = {}, dict.fromkeys(keys, 0)
    with obs.lock:
        seen = {r: (len(obs.sent[r]), len(obs.answers[r])) for r in obs.sent}
    for r, st in statuses.items():
        led = st.get("round_ledger")
        if led is None:
            per_robot[r] = {"ledger": None, "observer_saw_sent_answered": seen.get(r)}
            continue
        per_robot[r] = {**led, "observer_saw_sent_answered": seen.get(r)}
        for k in keys:
            totals[k] += int(led.get(k, 0))
    served = sorted(r for r, v in per_robot.items() if (v.get("answers") or {}).get("ok", 0) > 0)
    return {**totals, "robots": len(statuses), "robots_served": len(served),
            "robots_without_ledger": sorted(r for r, v in per_robot.items() if "sent" not in v),
            "per_robot": per_robot}


def set_autogroup_nice(pid: int, nice: int) -> dict:
    """Linux autogroup: every fleet process has its own session, so each gets the CPU share of
    one of ~50 processes whatever its nice value; a group's nice is set here."""
    try:
        with open(f"/proc/{pid}/autogroup", "w") as f:
            f.write(str(nice))
        return {"pid": pid, "autogroup_nice": nice}
    except OSError as exc:
        return {"pid": pid, "error": str(exc)}


def prioritise_server(root: int, nice: int) -> dict:
    """The policy server's group gets `nice`: on a real fleet the robots run on their own hosts."""
    for pid, name in descendants(root).items():
        if name.endswith("policy_server"):
            return set_autogroup_nice(pid, nice)
    return {}


def latency_by_minute(samples: list[tuple[float, float]], t0: float) -> list[dict]:
    by_min = defaultdict(list)
    for t, ms in samples:
        by_min[int((t - t0) // 60)].append(ms)
    out = []
    for m in sorted(by_min):
        a = np.array(by_min[m])
        out.append({"minute": m, "n": int(a.size), "p50_ms": round(float(np.percentile(a, 50)), 1),
                    "p99_ms": round(float(np.percentile(a, 99)), 1)})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--insecure", action="store_true", help="run the fleet without authentication")
    ap.add_argument("--robots", type=int, default=16)
    ap.add_argument("--scheduler", default="fifo")
    ap.add_argument("--slo-ms", type=float, default=2000.0)
    ap.add_argument("--image", type=int, default=64, help="square camera frames, pixels")
    ap.add_argument("--physics-hz", type=float, default=50.0, help="sim physics and wrench rate")
    ap.add_argument("--camera-hz", type=float, default=5.0)
    ap.add_argument("--control-hz", type=float, default=50.0, help="trajectory controller rate")
    ap.add_argument("--sample-s", type=float, default=10.0, help="memory / load sampling period")
    ap.add_argument("--out-dir", default="out/soak")
    ap.add_argument("--transport", choices=("udp", "default"), default="udp",
                    help="udp: Fast DDS over loopback UDP only (FASTDDS_BUILTIN_TRANSPORTS=UDPv4); "
                         "default: Fast DDS' defaults (shared memory + UDP)")
    ap.add_argument("--server-nice", type=int, default=-10,
                    help="autogroup nice of the policy server (0: same share as every robot process)")
    ap.add_argument("--monitor-nice", type=int, default=-5,
                    help="autogroup nice of physai-fleet itself (its fleet monitor: an operator's host)")
    ap.add_argument("--json", default=None, help="write the results file here (default OUT_DIR/soak.json)")
    ap.add_argument("--quick", action="store_true", help="one minute, two robots: that it runs, not figures")
    args = ap.parse_args(argv)
    if args.quick:
        args.minutes, args.robots = 1.0, 2
        args.out_dir = tempfile.mkdtemp(prefix="soak_quick_")  # a smoke run leaves nothing in out/
    run = results.start_run(
        f"physai-fleet with the tiny pi0 ({args.scheduler}, {'insecure' if args.insecure else 'authenticated'}) and "
        f"{args.robots} simulated robots (sim_robot, robot_client, trajectory_controller each a process; {args.image} px "
        f"frames at {args.camera_hz:g} Hz, physics {args.physics_hz:g} Hz, control {args.control_hz:g} Hz) for "
        f"{args.minutes:g} min over Fast DDS ({args.transport} transport) on this host; rounds from every client's "
        f"own ledger, resident memory every {args.sample_s:g} s", __file__, argv, quick=args.quick)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    fleet = write_fleet(out / "soak_fleet.yaml", args)
    env = {**os.environ, "ROS_AUTOMATIC_DISCOVERY_RANGE": os.environ.get("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")}
    if args.transport == "udp":
        # Fast DDS' shared-memory transport: a process killed while holding a port's
        # interprocess mutex (here: other runs on the same machine) leaves it locked in
        # /dev/shm, and every later participant that writes to that port blocks for good
        # (seen: a policy_server stuck in create_subscription -> SharedMemManager::Port::
        # regenerate_port). Loopback UDP has no such shared state; frames here are small.
        # (FASTDDS_BUILTIN_TRANSPORTS=UDPv4 was not honoured through rmw_fastrtps here; an XML
        # default profile is.)
        env["FASTDDS_DEFAULT_PROFILES_FILE"] = str(udp_only_profile())
    os.environ.update(env)
    robots = [f"robot_{k}" for k in range(args.robots)]
    obs = Observer(robots)
    duration_s = args.minutes * 60.0
    cmd = [sys.executable, "-m", "physai_ros.fleet", "--fleet", str(fleet), "--duration", str(duration_s),
           "--summary-json", str(out / "summary.json"), "--report", str(out / "report.png"),
           "--contact-sheet", str(out / "contact_sheet.png"), "--log-dir", str(out / "logs")]
    log = open(out / "physai_fleet.log", "w")
    t_start = time.time()
    fleet_proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    mem: dict[str, list[tuple[float, float]]] = defaultdict(list)
    load: list[tuple[float, float]] = []
    serving_since = None
    priority: dict = {}
    monitor_priority = set_autogroup_nice(fleet_proc.pid, args.monitor_nice) if args.monitor_nice else {}
    try:
        while fleet_proc.poll() is None:
            time.sleep(args.sample_s)
            now = time.time()
            if args.server_nice and not priority.get("autogroup_nice"):
                priority = prioritise_server(fleet_proc.pid, args.server_nice)
            if serving_since is None:
                with obs.lock:
                    if obs.latency:
                        serving_since = obs.latency[0][0]
            t = now - (serving_since or now)
            for pid, name in descendants(fleet_proc.pid).items():
                mb = rss_mb(pid)
                if mb is not None and serving_since is not None:
                    mem[name].append((t, mb))
            if serving_since is not None:
                load.append((t, os.getloadavg()[0]))
            print(f"soak: t={now - t_start:6.0f} s, serving for {t:6.0f} s, load {os.getloadavg()[0]:.1f}, "
                  f"rounds answered {sum(len(a) for a in obs.answers.values())}", flush=True)
    except KeyboardInterrupt:
        os.killpg(fleet_proc.pid, signal.SIGINT)
        fleet_proc.wait(timeout=60)
    end_wall = time.time()
    time.sleep(2.0)  # late answers
    obs.close()
    rc = fleet_proc.returncode
    serving_since = serving_since or t_start
    statuses = {r: obs.status.get(r, {}) for r in robots}
    rounds = rounds_report(statuses, obs)
    server_refused = defaultdict(int)
    for name, vals in obs.diag.items():
        if name.startswith("policy_server: robot_"):
            for k, v in vals.items():
                if k.startswith("refused.") and v.isdigit():
                    server_refused[k[len("refused."):]] += int(v)
    fallbacks = defaultdict(int)
    for s in statuses.values():
        for k, v in (s.get("fallbacks") or {}).items():
            fallbacks[k] += v
    memory = {name: memory_growth(s, skip_s=60.0) for name, s in sorted(mem.items()) if s}
    (out / "memory_samples.json").write_text(json.dumps(mem))
    kinds, kinds_late = defaultdict(list), defaultdict(list)
    for name, g in memory.items():
        kinds[name.rsplit("/", 1)[-1]].append(g["slope_mb_per_min"])
        kinds_late[name.rsplit("/", 1)[-1]].append(g["slope_second_half_mb_per_min"])
    lat = latency_by_minute(obs.latency, serving_since)
    result = {
        "config": {**vars(args), "fleet_file": str(fleet)},
        "physai_fleet_rc": rc,
        "server_priority": priority,
        "monitor_priority": monitor_priority,
        "serving_s": round(end_wall - serving_since, 1),
        "rounds": rounds,
        "latency_by_minute": lat,
        "latency_drift_p50_ms": round(lat[-1]["p50_ms"] - lat[0]["p50_ms"], 1) if len(lat) > 1 else None,
        "latency_drift_p99_ms": round(lat[-1]["p99_ms"] - lat[0]["p99_ms"], 1) if len(lat) > 1 else None,
        # Chunks a robot client refused for authentication (0 in a healthy authenticated fleet).
        "client_auth_refused": dict(sum((Counter(s.get("auth_refused", {})) for s in statuses.values()), Counter())),
        "refused_inputs": {"client_total": sum(s.get("refused", 0) for s in statuses.values()),
                           "server_by_reason": dict(server_refused)},
        "fallbacks": dict(fallbacks),
        "client_holds_seen": dict(obs.holds),
        "slo_misses": sum(s.get("slo_misses", 0) for s in statuses.values()),
        "wrench_dropped": sum(s.get("wrench_dropped", 0) for s in statuses.values()),
        "client_states": {r: s.get("state") for r, s in statuses.items()},
        "memory": memory,
        "memory_slope_mb_per_min_by_kind": {k: {"max": max(v), "median": float(np.median(v))} for k, v in kinds.items()},
        "memory_slope_second_half_mb_per_min_by_kind": {k: {"max": max(v), "median": float(np.median(v))}
                                                        for k, v in kinds_late.items()},
        "load_avg_1min": {"mean": round(float(np.mean([v for _, v in load])), 2) if load else None,
                          "max": round(float(max(v for _, v in load)), 2) if load else None},
        "diagnostics_levels": {k: v for k, v in sorted(obs.diag_levels.items())},
        "server_robot_diagnostics": {k: v for k, v in sorted(obs.diag.items()) if k.startswith("policy_server: ")},
        "client_status": statuses,
    }
    path = Path(args.json) if args.json else out / "soak.json"
    results.write_result(path, run, result)
    if args.quick and args.json:  # the results file is elsewhere: the run's folder can go
        shutil.rmtree(out, ignore_errors=True)
    print(json.dumps({k: result[k] for k in ("physai_fleet_rc", "serving_s", "latency_by_minute", "fallbacks",
                                             "refused_inputs", "load_avg_1min", "memory_slope_mb_per_min_by_kind",
                                             "memory_slope_second_half_mb_per_min_by_kind")},
                     indent=1))
    print(f"soak: robots served {rounds['robots_served']}/{rounds['robots']}; rounds sent {rounds['sent']}, "
          f"answered {rounds['answered']} ({rounds['answered_late']} late), lost {rounds['lost']}, "
          f"duplicated {rounds['duplicated']}, pending at the end {rounds['pending']}, "
          f"orphaned by a server restart {rounds['orphaned']}; result {path}")
    ok = rounds["lost"] == rounds["duplicated"] == 0 and rounds["robots_served"] == rounds["robots"]
    return 0 if rc == 0 and ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
