"""The serving core's remote-engine wiring (fleet.yaml server.remote_engines) without a worker:
config validation, a dead worker gets no work while a local engine serves, task bookkeeping.

Needs the remote-engine wiring of the serving core (/tmp/C2_integration.patch)."""
import copy
import time

import numpy as np
import pytest
import yaml

from physai_ros.client.robot_client import RobotClientCore
from physai_ros.config.fleet import FleetConfigError, default_fleet_path, parse_fleet
from physai_ros.protocol.chunk import STATUS_OK
from physai_ros.protocol.observation import ImageData, ObservationData
from physai_ros.ros.remote_engine import RemoteEngine, remote_engines_on
from physai_ros.serving.startup.engine_builder import build_core

from ros_rig import SpunNode


@pytest.fixture(scope="module")
def doc():
    d = yaml.safe_load(default_fleet_path().read_text())
    d["robots"] = d["robots"][:2]
    d["server"].update(scheduler="wait_ratio", max_observation_age_s=30.0)
    return d


def _with(doc, **server):
    d = copy.deepcopy(doc)
    d["server"].update(server)
    return d


def test_remote_engines_parse(doc):
    cfg = parse_fleet(_with(doc, engine_instances=0, remote_engines=[
        {"instance_id": "gpu_a"}, {"instance_id": "gpu_b", "timeout_s": 5, "liveness_timeout_s": 2.5}]))
    assert cfg.server.engine_instances == 0
    assert [(r.instance_id, r.timeout_s, r.liveness_timeout_s) for r in cfg.server.remote_engines] == [
        ("gpu_a", None, None), ("gpu_b", 5.0, 2.5)]
    assert parse_fleet(doc).server.remote_engines == ()


@pytest.mark.parametrize("server, match", [
    (dict(engine_instances=0), r"^server\.engine_instances: expected an integer >= 1"),
    (dict(remote_engines={"instance_id": "a"}), r"^server\.remote_engines: expected a list"),
    (dict(remote_engines=[{"instance_id": "9a"}]), r"^server\.remote_engines\[0\]\.instance_id: expected letters"),
    (dict(remote_engines=[{"instance_id": "engine_0"}]), r"not starting with 'engine_'"),
    (dict(remote_engines=[{"instance_id": "a"}, {"instance_id": "a"}]), r"^server\.remote_engines\[1\]\.instance_id: expected a unique"),
    (dict(remote_engines=[{"instance_id": "a", "timeout_s": 0}]), r"^server\.remote_engines\[0\]\.timeout_s: expected a finite number > 0"),
    (dict(remote_engines=[{"instance_id": "a", "tier": "cloud"}]), r"^server\.remote_engines\[0\]\.tier: unknown key"),
])
def test_bad_remote_engine_entries_name_the_key(doc, server, match):
    with pytest.raises(FleetConfigError, match=match):
        parse_fleet(_with(doc, **server))


def _obs(robot, round_id, task_id=None):
    rng = np.random.default_rng(round_id)
    imgs = tuple(ImageData(robot.image_height, robot.image_width, "rgb8", robot.image_width * 3,
                           rng.integers(0, 256, (robot.image_height, robot.image_width, 3), np.uint8).tobytes())
                 for _ in range(robot.num_views))
    return ObservationData(
        robot_id=robot.id, task_id=task_id or robot.task.name, round_id=round_id, stamp=time.time(),
        images=imgs, state=np.zeros(len(robot.joints), np.float32), wrench=np.zeros(6, np.float32),
        wrench_stamp=0.0, prompt=robot.task.prompt, exec_phase_start=0.0, actions_remaining=0,
        control_period=robot.task.action_period_s, horizon_policy=robot.task.horizon_policy,
        horizon_params=robot.task.horizon_params)


def test_dead_worker_gets_no_work_while_the_local_engine_serves(doc):
    cfg = parse_fleet(_with(doc, engine_instances=1, remote_engines=[{"instance_id": "ghost_worker"}]))
    with pytest.raises(ValueError, match="needs a ROS node"):
        build_core(cfg)
    spun = SpunNode("serving_wiring_test")
    try:
        core = build_core(cfg, instance_id="t", remote_engine=remote_engines_on(spun.node))
        ghost = core.engines["ghost_worker"].engine
        assert isinstance(ghost, RemoteEngine) and ghost.config == core.model_config
        assert not ghost.alive
        for r in cfg.robots:
            assert core.register(RobotClientCore(r).registration()).accepted
        chunks = []
        for k in range(3):
            for r in cfg.robots:
                assert core.submit(_obs(r, 10 + k)) == []
            for _ in range(10):
                chunks += core.step().chunks
                if not core.pending():
                    break
        assert len(chunks) == 6 and all(c.status == STATUS_OK for c in chunks)
        assert {c.engine_instance for c in chunks} == {"engine_0"}
        assert ghost.stats.batches == ghost.stats.unavailable == 0, "nothing was sent to it"
        diag = core.engine_diagnostics()
        assert diag["engine_0"]["alive"] and not diag["engine_0"]["remote"]
        assert diag["ghost_worker"]["alive"] is False and diag["ghost_worker"]["remote"]
        assert diag["ghost_worker"]["why_not_alive"] == "no status received from the worker yet"
    finally:
        spun.close()


def test_reregistration_finishes_the_robots_previous_task(doc):
    cfg = parse_fleet(doc)
    core = build_core(cfg, instance_id="t2")
    robot = cfg.robots[0]
    reg = RobotClientCore(robot).registration()
    assert core.register(reg).accepted
    assert core.scheduler.stats().get("tasks_finished", 0) == 0
    assert core.submit(_obs(robot, 1)) == []
    core.step()
    assert core.register(reg).accepted  # a keep-alive of the same client process
    assert core.scheduler.stats().get("tasks_finished", 0) == 0
    assert core.register(RobotClientCore(robot).registration()).accepted  # the client restarted
    assert core.scheduler.stats()["tasks_finished"] == 1
