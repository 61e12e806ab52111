"""The server-side robot state that the network-cut test relies on, pinned on the serving core
without processes: keep-alive re-registrations keep a robot's queued request, a silent robot is
freed by release_idle and comes back above its own round ids, a restart drops what was queued.
"""
from __future__ import annotations

import numpy as np
import pytest
import yaml

from physai_ros.serving.client_core import RobotClientCore
from physai_ros.serving.config import parse_fleet
from physai_ros.serving.factory import build_core
from physai_ros.serving.types import STATUS_OK, STATUS_REFUSED, ImageData, ObservationData

HW = 32


class Clock:
    def __init__(self, t: float = 1000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture()
def env():
    doc = {
        "server": {"model": {"preset": "tiny", "tokenizer": "package://physai_ros/assets/tokenizer.json",
                             "max_token_len": 48},
                   "engine_instances": 1, "max_batch": 2, "scheduler": "fifo", "profile": False,
                   "max_observation_age_s": 30.0, "robot_timeout_s": 4.0},
        "tasks": {"t": {"prompt": "reach", "action_rate_hz": 10, "horizon_policy": {"name": "static", "params": [8]},
                        "slo_ms": 1000, "fallback": "hold"}},
        "robots": [{"id": "r0", "task": "t", "cameras": ["camera_0/image_raw"], "image_height": HW,
                    "image_width": HW, "joints": ["a", "b", "c"], "simulated": False}],
    }
    cfg = parse_fleet(yaml.safe_load(yaml.safe_dump(doc)))
    core = build_core(cfg, instance_id="s")
    clock = Clock()
    core.clock = clock
    client = RobotClientCore(cfg.robots[0])
    assert cfg.server.robot_timeout_s == 4.0
    return core, clock, client


def _obs(client: RobotClientCore, round_id: int, stamp: float) -> ObservationData:
    r = client.robot
    return ObservationData(
        robot_id=r.id, task_id=r.task.name, round_id=round_id, stamp=stamp,
        images=(ImageData(HW, HW, "rgb8", HW * 3, bytes(HW * HW * 3)),), state=np.zeros(3, np.float32),
        wrench=np.zeros(6, np.float32), wrench_stamp=0.0, prompt="", exec_phase_start=0.0,
        actions_remaining=0, control_period=0.1, horizon_policy="", horizon_params=())


def test_keep_alive_registration_keeps_the_queued_request(env):
    core, clock, client = env
    assert core.register(client.registration()).accepted
    assert core.submit(_obs(client, 2, clock.t)) == []
    client.round_id = 3  # the client's own history: round 2 sent, hold 3 used
    assert core.register(client.registration()).accepted  # the 2 s keep-alive
    assert core.scheduler.stats().get("tasks_finished", 0) == 0
    out = core.step().chunks
    assert [(c.round_id, c.status) for c in out] == [(2, STATUS_OK)]
    assert core.pending() == 0


def test_a_restart_drops_the_queued_request_everywhere(env):
    core, clock, client = env
    assert core.register(client.registration()).accepted
    assert core.submit(_obs(client, 2, clock.t)) == []
    client.round_id = 0  # a restarted client starts from nothing
    assert core.register(client.registration()).accepted
    assert core.scheduler.stats()["tasks_finished"] == 1
    # Dropped by the scheduler and by the core: nothing left that could never be dispatched.
    assert core.pending() == 0 and not core.step().chunks
    assert not core.wait_for_work(0.01)


def test_a_silent_robot_is_freed_and_comes_back_above_its_round_ids(env):
    core, clock, client = env
    assert core.register(client.registration()).accepted
    assert core.submit(_obs(client, 2, clock.t)) == []
    assert [c.status for c in core.step().chunks] == [STATUS_OK]
    clock.t += 3.0
    assert core.release_idle(4.0) == []  # silent 3 s < 4 s
    clock.t += 1.5
    assert core.release_idle(4.0) == ["r0"]
    assert "r0" not in core.registrations and "r0" not in core.diagnostics()
    # Back: an observation first is refused (unknown robot), which makes the client register.
    [refused] = core.submit(_obs(client, 4, clock.t))
    assert refused.status == STATUS_REFUSED and refused.error.startswith("unknown_robot")
    client.round_id = 4
    assert core.register(client.registration()).accepted
    # Its own history survives: older rounds stay refused, the next one is served.
    [old] = core.submit(_obs(client, 2, clock.t))
    assert old.status == STATUS_REFUSED and old.error.startswith("round_id")
    assert core.submit(_obs(client, 6, clock.t)) == []
    assert [(c.round_id, c.status) for c in core.step().chunks] == [(6, STATUS_OK)]
