"""A robot host's network is cut and restored: the robots fall back within their SLO
and resume; the server frees their state and restores it when they return.

Host a ("server host"): policy_server and a probe recording /diagnostics.
Host b ("robot host"): two robots, each sim_robot + robot_client + trajectory_controller, and a
probe recording what happens there (observations, chunks incl. the clients' hold chunks,
client_status, the controllers' /diagnostics). One veth between the hosts, UDP only
(netns.py); the cable is pulled at the robot host's end.

robot_0's task falls back with `hold` (stop and keep waiting), robot_1's with
`stop_and_resend` (stop, give the round up, send a fresh one). Escalation to an operator is
configured far away (1000 misses) so the robots resume by themselves after the cut.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
import yaml

from physai_ros.config.fleet import load_fleet
from physai_ros.fleet import plan as fleet_plan
from physai_ros.protocol.chunk import HOLD_ENGINE_INSTANCE

import netns
from netns_probe import ProbeLog
from ros_rig import wait_for

pytestmark = [pytest.mark.ros, pytest.mark.slow,
              pytest.mark.skipif(netns.unavailable_reason() is not None,
                                 reason=str(netns.unavailable_reason()))]

ROBOTS = {"robot_0": "hold", "robot_1": "stop_and_resend"}
SLO_S = 1.0
RELEASE_S = 4.0  # server.robot_timeout_s: clients re-register every 2 s while connected
CUT_S = RELEASE_S + 3.0  # long enough for the server to free them
STARTUP_S = 240  # seven processes starting at once; the server alone took 90 s at load 80
HW = 32
OK, HOLD = 0, HOLD_ENGINE_INSTANCE


def _fleet(path: Path) -> str:
    task = {"prompt": "pick up the cube and place it on the goal", "action_rate_hz": 10,
            "horizon_policy": {"name": "static", "params": [8]}, "slo_ms": SLO_S * 1e3,
            "max_consecutive_slo_violation": 1000, "on_max_violation": "stop_and_call_human"}
    doc = {
        "server": {
            "model": {"preset": "tiny", "tokenizer": "package://physai_ros/assets/tokenizer.json",
                      "max_token_len": 48, "seed": 0},
            "device": "cpu", "engine_instances": 1, "max_batch": 2, "scheduler": "fifo",
            "profile": False, "max_observation_age_s": 5.0, "robot_timeout_s": RELEASE_S},
        "tasks": {f"task_{fb}": {**task, "fallback": fb} for fb in set(ROBOTS.values())},
        "robots": [{"id": rid, "task": f"task_{fb}", "cameras": ["camera_0/image_raw"],
                    "image_height": HW, "image_width": HW,
                    "joints": ["joint_0", "joint_1", "joint_2", "joint_3", "gripper"],
                    "control_rate_hz": 100, "simulated": True,
                    "sim": {"task": "reach", "num_joints": 4, "seed": i, "physics_rate_hz": 120.0,
                            "camera_rate_hz": 15.0, "joint_state_rate_hz": 50.0}}
                   for i, (rid, fb) in enumerate(ROBOTS.items())],
    }
    path.write_text(yaml.safe_dump(doc))
    return str(path)


class Rig:
    def __init__(self, tmp: Path):
        self.link = L = netns.VethLink("robot").open()
        self.logs = tmp / "logs"
        fleet = _fleet(tmp / "fleet.yaml")
        cfg = load_fleet(fleet)
        self.robot_log = ProbeLog(tmp / "robot_host.jsonl")
        self.server_log = ProbeLog(tmp / "server_host.jsonl")
        probe = str(Path(__file__).with_name("netns_probe.py"))
        ns = ",".join(ROBOTS)
        L.spawn(L.a, fleet_plan.server_spec(cfg), self.logs)
        L.spawn(L.a, [sys.executable, probe, "--out", self.server_log.path, "--diag"], self.logs,
                name="probe_server_host")
        for robot in cfg.robots:
            for spec in fleet_plan.robot_specs(cfg, robot):
                L.spawn(L.b, spec, self.logs)
        L.spawn(L.b, [sys.executable, probe, "--out", self.robot_log.path, "--chunks", ns, "--status", ns,
                      "--obs", ns, "--diag"], self.logs, name="probe_robot_host")

    def wait(self, pred, timeout: float, what: str):
        def alive():
            if self.link.dead():
                raise AssertionError(f"process died while waiting for {what}: {self.link.dead()}\n"
                                     f"{self.link.logs()}")
        return wait_for(pred, timeout, what, self.link.logs, check=alive)

    def served(self, rid: str, since: float = 0.0) -> list[dict]:
        """OK answers from the server seen on the robot host."""
        return [c for c in self.robot_log.chunks(since, ns=rid, status=OK) if c["engine"] != HOLD]

    def holds(self, rid: str, since: float = 0.0) -> list[dict]:
        return self.robot_log.chunks(since, ns=rid, engine=HOLD)

    def sent(self, rid: str) -> dict[int, float]:
        """round -> capture stamp of the newest observation sent for it."""
        return {r["round"]: r["stamp"] for r in self.robot_log.read() if r["kind"] == "obs" and r["ns"] == rid}

    def statuses(self, rid: str, since: float = 0.0) -> list[dict]:
        """The robot client's client_status reports, oldest first."""
        return [r["data"] for r in self.robot_log.read() if r["kind"] == "status" and r["ns"] == rid
                and r["t"] >= since]

    def client(self, rid: str, since: float = 0.0) -> dict | None:
        recs = self.statuses(rid, since)
        return recs[-1] if recs else None

    def holds_applied(self, rid: str, since: float = 0.0) -> int:
        """The controller's count of applied robot_client holds (its /diagnostics), 0 if none yet."""
        recs = [r for r in self.robot_log.read() if r["kind"] == "diag" and r["t"] >= since
                and r["name"] == f"{rid}/trajectory_controller: buffer"]
        return int(recs[-1]["values"].get("holds_applied", 0)) if recs else -1

    def registered(self, rid: str, since: float = 0.0) -> bool | None:
        """The server's own word on /diagnostics: is the robot registered (None: no report yet)."""
        recs = [r for r in self.server_log.read() if r["kind"] == "diag" and r["t"] >= since
                and r["name"].endswith(f": {rid}") and "registered" in r["values"]]
        return None if not recs else recs[-1]["values"]["registered"].lower() == "true"


@pytest.fixture(scope="module")
def rig(tmp_path_factory):
    r = Rig(tmp_path_factory.mktemp("netns_robot"))
    try:
        r.wait(lambda: all(len(r.served(rid)) >= 3 for rid in ROBOTS), STARTUP_S,
               "3 OK chunks per robot")
        yield r
    finally:
        r.link.close()


def test_robot_link_cut_falls_back_within_slo_frees_server_state_and_resumes(rig):
    L = rig.link
    rig.wait(lambda: all(rig.registered(rid) for rid in ROBOTS), 20, "the server to report both robots registered")
    tx0, n0 = L.counters(L.b)["tx_bytes"], sum(len(rig.served(r)) for r in ROBOTS)

    rig.wait(lambda: all(rig.holds_applied(rid) >= 0 for rid in ROBOTS), 20, "the controllers' diagnostics")
    holds0 = {rid: rig.holds_applied(rid) for rid in ROBOTS}
    t_cut = time.time()
    L.down(L.b)
    # -- the robots fall back within their SLO --------------------------------------------------
    late = {}
    for rid, fallback in ROBOTS.items():
        hold = rig.wait(lambda: rig.holds(rid, t_cut), 3 * SLO_S + 5, f"{rid}'s fallback hold chunk")[0]
        # hold keeps waiting for round r (its hold is r-1); stop_and_resend gives r up (hold r+1).
        awaited = hold["round"] + 1 if fallback == "hold" else hold["round"] - 1
        sent = rig.sent(rid)
        assert awaited in sent, (rid, hold, sorted(sent)[-5:])
        deadline = sent[awaited] + SLO_S
        late[rid] = hold["t"] - deadline
        # The hold comes when the awaited round's SLO has passed, not before, and not a whole
        # further SLO after it (the client ticks at 100 Hz; generous for a loaded CI machine).
        assert -0.05 <= late[rid] < SLO_S, (rid, late[rid])
        # The controller (on the robot host, cut off too) applies it: the robot stops where it is.
        rig.wait(lambda: rig.holds_applied(rid, hold["t"]) > holds0[rid], 10,
                 f"{rid}'s controller to apply the hold (holds_applied on its /diagnostics)")
    # -- the server frees their state once they are silent for robot_timeout_s ------------------
    for rid in ROBOTS:
        rig.wait(lambda: rig.registered(rid, t_cut + RELEASE_S) is False, RELEASE_S + 10,
                 f"the server to free {rid} (registered False on /diagnostics)")
    t_freed = time.time()
    assert t_freed - t_cut < CUT_S + 5
    for rid in ROBOTS:
        st = rig.client(rid, t_cut + 1.0)
        assert st is not None and st["state"] != "stopped", st  # fell back, did not escalate
    time.sleep(max(0.0, t_cut + CUT_S - time.time()))
    # Nothing crosses while the cable is out: no round captured after the cut is answered
    # (stop_and_resend keeps asking every SLO; hold waits, with a 4 x SLO backstop).
    during = {rid: [r for r, stamp in rig.sent(rid).items() if stamp > t_cut] for rid in ROBOTS}
    assert any(during.values()), during
    for rid in ROBOTS:
        assert not [c for c in rig.served(rid) if c["round"] in during[rid]], (rid, during[rid])

    t_up = time.time()
    L.up(L.b)
    # -- they resume, and the server has their state again ----------------------------------
    resume = {}
    for rid in ROBOTS:
        first = rig.wait(lambda: [c for c in rig.served(rid, t_up) if c["round"] > max(
            (x["round"] for x in rig.served(rid) if x["t"] < t_up), default=0)], 30,
            f"{rid} to be served again after the link came back")[0]
        resume[rid] = first["t"] - t_up
        rig.wait(lambda: len(rig.served(rid, t_up)) >= 3, 30, f"{rid} to keep being served")
        rig.wait(lambda: rig.registered(rid, first["t"]), 10, f"the server to report {rid} registered again")
        rounds = [c["round"] for c in rig.served(rid)]
        # No round answered twice, round ids increasing across the cut (the robot's own history
        # survives the server forgetting it: it registers with its last round id).
        assert rounds == sorted(set(rounds)), rounds
        # The client says "running" again once its own registration is answered. That answer and
        # the first chunks travel on different topics, so on a loaded machine a status published
        # just after the first chunk can still say "unregistered": wait for the state, and check
        # that no status since the link came back said "stopped" (it fell back, never escalated).
        st = rig.wait(lambda: [s for s in rig.statuses(rid, first["t"]) if s["state"] == "running"], 15,
                      f"{rid}'s client_status to say running after it resumed")[-1]
        assert st["fallbacks"].get("hold", 0) >= 1, st
        states = {s["state"] for s in rig.statuses(rid, t_up)}
        assert states <= {"running", "unregistered"}, states
    # -- the observations really crossed the cable ------------------------------------------
    tx1, n1 = L.counters(L.b)["tx_bytes"], sum(len(rig.served(r)) for r in ROBOTS)
    assert tx1 - tx0 >= (n1 - n0) * HW * HW * 3, (tx0, tx1, n0, n1)
    print(f"\nfallback after the SLO deadline (s): {', '.join(f'{k} {v:.3f}' for k, v in late.items())}; "
          f"freed {t_freed - t_cut:.1f} s after the cut; resumed (s after link up): "
          f"{', '.join(f'{k} {v:.2f}' for k, v in resume.items())}")
