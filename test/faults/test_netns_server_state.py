"""The server-side robot state that the network-cut test relies on, pinned on the serving core
without processes: keep-alive re-registrations keep a robot's queued request, a silent robot is
freed by release_idle and comes back above its own round ids, a restart answers what was queued
and the restarted client continues above the server's round ids.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import yaml

from physai_ros.client.robot_client import RobotClientCore
from physai_ros.config.fleet import parse_fleet
from physai_ros.protocol.chunk import STATUS_OK, STATUS_REFUSED
from physai_ros.protocol.observation import ImageData, ObservationData
from physai_ros.serving.startup.engine_builder import build_core

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


def test_a_keep_alive_overtaken_by_later_rounds_keeps_the_queued_request(env):
    """Under load the 2 s keep-alive can reach the server after observations the client sent
    later: its last_round_id is then behind the server's. Same client session: no restart, so
    the queued round is served (a 16-robot soak lost a round this way)."""
    core, clock, client = env
    assert core.register(client.registration()).accepted
    late_keep_alive = client.registration()  # built now, with last_round_id 0 ...
    assert core.submit(_obs(client, 2, clock.t)) == []
    [superseded] = core.submit(_obs(client, 4, clock.t))  # 4 replaces the queued 2, which is answered
    assert (superseded.round_id, superseded.status) == (2, STATUS_REFUSED)
    res = core.register(late_keep_alive)  # ... arriving after rounds 2 and 4
    assert res.accepted and res.last_round_id == 4
    assert core.scheduler.stats().get("tasks_finished", 0) == 0 and core.take_notices() == []
    assert [(c.round_id, c.status) for c in core.step().chunks] == [(4, STATUS_OK)]


def test_a_restart_answers_the_queued_request_and_the_client_continues_above(env):
    core, clock, client = env
    assert core.register(client.registration()).accepted
    assert core.submit(_obs(client, 2, clock.t)) == []
    assert core.register(client.registration()).last_round_id == 2
    restarted = RobotClientCore(client.robot)  # a new process: a new session, round ids from 0
    res = core.register(restarted.registration())
    assert res.accepted and res.last_round_id == 2
    assert core.scheduler.stats()["tasks_finished"] == 1
    # Dropped by the scheduler and by the core, and answered: nothing accepted goes unanswered.
    [dropped] = core.take_notices()
    assert (dropped.round_id, dropped.status) == (2, STATUS_REFUSED) and dropped.error.startswith("superseded")
    assert core.pending() == 0 and not core.step().chunks
    assert not core.wait_for_work(0.01)
    # The restarted client continues above what the server (and its controller) saw.
    restarted.on_registered(res)
    assert restarted.round_id == 2
    restarted.on_image(0, _obs(client, 0, 0.0).images[0], clock.t)
    restarted.on_joint_state(list(client.robot.joints), [0.0] * 3)
    obs = restarted.tick(clock.t).observation
    assert obs is not None and obs.round_id == 4
    assert core.submit(_obs(client, obs.round_id, clock.t)) == []
    assert [(c.round_id, c.status) for c in core.step().chunks] == [(4, STATUS_OK)]


def test_a_client_without_a_session_is_restarted_when_its_round_ids_go_back(env):
    core, clock, client = env
    legacy = dataclasses.replace(client.registration(), client_session="")
    assert core.register(legacy).accepted
    assert core.submit(_obs(client, 2, clock.t)) == []
    assert core.register(dataclasses.replace(legacy, last_round_id=2)).accepted
    assert core.take_notices() == []
    assert core.register(legacy).accepted  # last_round_id 0 < 2: a restart
    assert [c.round_id for c in core.take_notices()] == [2]


def test_a_silent_robot_is_freed_and_comes_back_above_its_round_ids(env):
    core, clock, client = env
    assert core.register(client.registration()).accepted
    assert core.submit(_obs(client, 2, clock.t)) == []
    assert [c.status for c in core.step().chunks] == [STATUS_OK]
    clock.t += 3.0
    assert core.release_idle(4.0) == []  # silent 3 s < 4 s
    clock.t += 1.5
    assert core.release_idle(4.0) == ["r0"]
    assert "r0" not in core.registry.registrations and "r0" not in core.diagnostics()
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
