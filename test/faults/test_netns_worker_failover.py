"""A remote engine worker on a second server host (its own network namespace) is lost, while a
robot is being served through it; the server fails over to another instance and takes the
worker back when it returns.

Host a: policy_server (no local engine), engine_worker gpu_b, and a probe that plays one robot
in a closed loop (one request outstanding at a time) and records chunks and /diagnostics.
Host b: engine_worker gpu_a. One veth between them, UDP only (netns.py).

fleet.yaml lists gpu_a first, and the FIFO scheduler fills idle instances in that order, so
gpu_a serves everything while it is there. When it is cut off (link down) or killed (SIGKILL),
it still looks alive for one liveness timeout, so the robot's next request is placed on it and
lost in flight: the proxy gives that batch up when the heartbeat stops (RemoteEngineLost), the
serving core re-dispatches it to gpu_b, and the robot gets an OK answer, never an error.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
import yaml

from physai_ros.fleet.processes import ProcessSpec
from physai_ros.protocol.chunk import HOLD_ENGINE_INSTANCE

import netns
from netns_probe import ProbeLog
from ros_rig import wait_for

pytestmark = [pytest.mark.ros, pytest.mark.slow,
              pytest.mark.skipif(netns.unavailable_reason() is not None,
                                 reason=str(netns.unavailable_reason()))]

ROBOT = "probe_bot"
STARTUP_S = 240  # server + two workers measuring profiles on a loaded 2-core machine
LIVENESS_S = 1.0
OK = 0


def _fleet(path: Path) -> str:
    doc = {
        "server": {
            "model": {"preset": "tiny", "tokenizer": "package://physai_ros/assets/tokenizer.json",
                      "max_token_len": 48, "seed": 0},
            "device": "cpu", "engine_instances": 0, "max_batch": 2, "scheduler": "fifo",
            "profile": False, "max_observation_age_s": 5.0,
            # gpu_a first: it takes the work while it is alive (placement fills in this order).
            "remote_engines": [{"instance_id": "gpu_a", "timeout_s": 20.0, "liveness_timeout_s": LIVENESS_S},
                               {"instance_id": "gpu_b", "timeout_s": 20.0, "liveness_timeout_s": LIVENESS_S}],
        },
        "tasks": {"pick_place": {
            "prompt": "pick up the cube and place it on the goal", "action_rate_hz": 10,
            "horizon_policy": {"name": "static", "params": [8]}, "slo_ms": 1000, "fallback": "hold",
            "max_consecutive_slo_violation": 1000, "on_max_violation": "stop_and_call_human"}},
        "robots": [{"id": ROBOT, "task": "pick_place", "cameras": ["camera_0/image_raw"],
                    "image_height": 32, "image_width": 32,
                    "joints": ["joint_0", "joint_1", "joint_2", "joint_3", "gripper"],
                    "control_rate_hz": 100, "simulated": False}],
    }
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def _worker(iid: str) -> ProcessSpec:
    return ProcessSpec(f"worker_{iid}", "physai_ros.nodes.engine_worker", "", {
        "instance_id": iid, "preset": "tiny", "seed": 0, "max_batch": 2, "profile_reps": 1,
        "profile_views": 1, "profile_tokens": 8, "heartbeat_period_s": 0.2, "torch_threads": 1})


class Rig:
    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.link = netns.VethLink("worker").open()
        self.logs = tmp / "logs"
        fleet = _fleet(tmp / "fleet.yaml")
        self.probe = ProbeLog(tmp / "probe.jsonl")
        L = self.link
        L.spawn(L.a, ProcessSpec("policy_server", "physai_ros.nodes.policy_server", "",
                                 {"fleet_file": fleet}), self.logs)
        L.spawn(L.a, _worker("gpu_b"), self.logs)
        self.gpu_a = L.spawn(L.b, _worker("gpu_a"), self.logs)
        L.spawn(L.a, [sys.executable, str(Path(__file__).with_name("netns_probe.py")),
                      "--out", self.probe.path, "--chunks", ROBOT, "--diag", "--robot", ROBOT,
                      "--fleet", fleet, "--period", "0.05"], self.logs, name="probe")

    def wait(self, pred, timeout: float, what: str, allow_dead=("worker_gpu_a",)):
        def alive():
            dead = [d for d in self.link.dead() if d[0] not in allow_dead]
            if dead:
                raise AssertionError(f"process died while waiting for {what}: {dead}\n{self.link.logs()}")
        return wait_for(pred, timeout, what, self.link.logs, check=alive)

    def served_by(self, iid: str, since: float = 0.0) -> list[dict]:
        return self.probe.chunks(since, status=OK, engine=iid)

    def engine(self, iid: str) -> dict:
        d = self.probe.diag(f"policy_server: engine {iid}")
        return d or {"level": -1, "values": {}, "t": 0.0}

    def problems(self) -> list[str]:
        """Robot answers that are not OK (an error or refusal means a request was lost)."""
        return [f"round {c['round']}: status {c['status']} {c['error']!r}"
                for c in self.probe.chunks() if c["status"] != OK]

    def close(self):
        self.link.close()


@pytest.fixture(scope="module")
def rig(tmp_path_factory):
    r = Rig(tmp_path_factory.mktemp("netns_worker"))
    try:
        r.wait(lambda: len(r.served_by("gpu_a")) >= 3, STARTUP_S, "3 chunks served by gpu_a")
        yield r
    finally:
        r.close()


def _lose_and_recover(rig: Rig, lose, recover, what: str) -> dict:
    """Lose gpu_a with `lose()` while the robot is served through it; check failover; bring it
    back with `recover()`; check it serves again. Returns measured times (s)."""
    lost_before = int(rig.engine("gpu_a")["values"].get("lost", 0))
    assert not rig.problems(), rig.problems()
    t_cut = time.time()
    lose()
    # The request lost in flight on gpu_a is answered by gpu_b, and gpu_b keeps serving.
    first_b = rig.wait(lambda: rig.served_by("gpu_b", t_cut), 30, f"gpu_b to answer after {what}")[0]
    rig.wait(lambda: len(rig.served_by("gpu_b", t_cut)) >= 5, 30, "gpu_b to keep serving")
    rig.wait(lambda: rig.engine("gpu_a")["t"] > first_b["t"] and rig.engine("gpu_a")["level"] == 2, 10,
             "the server to report gpu_a not alive (ERROR) on /diagnostics")
    gone = rig.engine("gpu_a")
    assert "not alive" in gone["message"], gone
    # It was lost with a batch in flight (the heartbeat stopped while the proxy waited) ...
    assert int(gone["values"]["lost"]) >= lost_before + 1, gone["values"]
    # ... and that batch was re-dispatched: every round the robot sent got an OK answer.
    assert not rig.problems(), rig.problems()
    t_back = time.time()
    recover()
    first_a = rig.wait(lambda: rig.served_by("gpu_a", t_back), STARTUP_S, f"gpu_a to serve again after {what}")[0]
    # While it was gone the scheduler placed nothing on it: no gpu_a answer between the failover
    # and its return.
    between = [c for c in rig.served_by("gpu_a", first_b["t"]) if c["t"] < t_back]
    assert not between, between
    rig.wait(lambda: rig.engine("gpu_a")["t"] > first_a["t"] and rig.engine("gpu_a")["level"] == 0, 10,
             "the server to report gpu_a alive again")
    # Every round sent so far was answered exactly once, OK, round ids increasing.
    answers = [c["round"] for c in rig.probe.chunks() if c["engine"] != HOLD_ENGINE_INSTANCE]
    assert answers == sorted(set(answers)), answers
    assert not rig.problems(), rig.problems()
    return {"failover_s": first_b["t"] - t_cut, "reuse_s": first_a["t"] - t_back}


def test_worker_link_cut_fails_over_and_the_worker_is_used_again(rig):
    L = rig.link
    before = L.counters(L.b)
    times = _lose_and_recover(rig, lambda: L.down(L.b), lambda: L.up(L.b), "the link cut")
    after = L.counters(L.b)
    # The batches really crossed the cable (UDP only; nothing went through shared memory):
    # gpu_a's results (8x32 float32 actions + updates each) left through its veth end.
    served = len(rig.served_by("gpu_a"))
    assert after["tx_bytes"] - before["tx_bytes"] > 0 and served >= 4
    print(f"\nlink cut: failover {times['failover_s']:.2f} s, gpu_a used again "
          f"{times['reuse_s']:.2f} s after the link came back; veth tx {after['tx_bytes']} bytes")


def test_worker_sigkill_fails_over_and_a_restarted_worker_is_used_again(rig):
    L = rig.link

    def restart():
        rig.gpu_a = L.spawn(L.b, _worker("gpu_a"), rig.logs, name="worker_gpu_a_restarted")

    times = _lose_and_recover(rig, lambda: L.kill(rig.gpu_a), restart, "SIGKILL")
    print(f"\nSIGKILL: failover {times['failover_s']:.2f} s, restarted gpu_a serving "
          f"{times['reuse_s']:.2f} s after its start")
