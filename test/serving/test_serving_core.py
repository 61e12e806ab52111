"""The policy server's logic with the real tiny pi0 engine and the real FIFO scheduler."""
import dataclasses
import time

import numpy as np
import pytest
import yaml

from physai_ros.client.robot_client import RobotClientCore
from physai_ros.config.fleet import default_fleet_path, parse_fleet
from physai_ros.protocol.chunk import STATUS_ERROR, STATUS_OK, STATUS_REFUSED
from physai_ros.protocol.observation import ImageData
from physai_ros.serving import validation as V
from physai_ros.serving.startup.engine_builder import build_core

from observation_builders import make_image, make_obs


def _patient(fleet):
    # Stale means older than 30 s here: a loaded CI machine must not turn valid inputs stale.
    return dataclasses.replace(fleet, server=dataclasses.replace(fleet.server, max_observation_age_s=30.0))


@pytest.fixture(scope="module")
def core(fleet):
    c = build_core(_patient(fleet), instance_id="test")
    for r in fleet.robots:
        res = c.register(RobotClientCore(r).registration())
        assert res.accepted, res.reason
    return c


def drain(core, now=None):
    chunks = []
    for _ in range(20):
        out = core.step(now)
        chunks += out.chunks
        if core.pending() == 0:
            break
    return chunks


def test_batch_of_robots_each_gets_its_own_chunk(core, fleet):
    obs = [make_obs(r, 100 + i) for i, r in enumerate(fleet.robots)]
    for o in obs:
        assert core.submit(o) == []
    chunks = drain(core)
    assert sorted((c.robot_id, c.round_id) for c in chunks) == sorted((o.robot_id, o.round_id) for o in obs)
    cfg = core.model_config
    for c in chunks:
        r = fleet.robot(c.robot_id)
        assert c.status == STATUS_OK, c.error
        assert c.actions.shape == (cfg.chunk_size, len(r.joints))
        assert np.isfinite(c.actions).all()
        assert 1 <= c.horizon <= cfg.chunk_size
        assert c.confidence.shape == (cfg.chunk_size,) and ((c.confidence >= 0) & (c.confidence <= 1)).all()
        assert c.joint_names == r.joints and c.dt == pytest.approx(r.task.action_period_s)
        assert c.inference_ms > 0 and c.queue_ms >= 0 and c.engine_instance == "engine_0"
    # robot_1 runs the static policy [H] of its task in fleet.yaml; the stamp is the observation's.
    by_robot = {c.robot_id: c for c in chunks}
    reach = [r for r in fleet.robots if r.id == "robot_1"][0].task
    assert reach.horizon_policy == "static"
    assert by_robot["robot_1"].horizon == min(int(reach.horizon_params[0]), cfg.chunk_size)
    assert by_robot["robot_0"].stamp == obs[0].stamp


def test_different_prompts_change_the_actions(core, fleet):
    r = fleet.robots[0]
    a = make_obs(r, 200)
    b = make_obs(r, 201, stamp=a.stamp, images=a.images, prompt="wipe the table with the sponge")
    core.submit(a)
    ca = drain(core)[0]
    core.submit(b)
    cb = drain(core)[0]
    assert not np.allclose(ca.actions, cb.actions)


def test_every_validation_refusal_is_named_counted_and_isolated(core, fleet):
    r0, r1 = fleet.robots[0], fleet.robots[1]
    now = time.time()
    before = core.diagnostics()["robot_1"]["refused_total"]
    base = 300
    bad = {
        V.UNKNOWN_ROBOT: make_obs(r0, base, robot_id="ghost"),
        V.WRONG_TASK: make_obs(r0, base + 1, task_id="other"),
        V.NUM_VIEWS: make_obs(r0, base + 2, images=(make_image(),)),
        V.IMAGE_SIZE: make_obs(r0, base + 3, images=(make_image(100, 100), make_image())),
        V.IMAGE_ENCODING: make_obs(r0, base + 4, images=(ImageData(224, 224, "yuv422", 448, b"\0" * 224 * 448), make_image())),
        V.IMAGE_DATA: make_obs(r0, base + 5, images=(ImageData(224, 224, "rgb8", 672, b"\0" * 10), make_image())),
        V.STATE_DIM: make_obs(r0, base + 6, state=np.zeros(3, np.float32)),
        V.NON_FINITE: make_obs(r0, base + 7, state=np.array([np.nan] * 5, np.float32)),
        V.STALE: make_obs(r0, base + 8, stamp=now - 60),
        V.FUTURE: make_obs(r0, base + 9, stamp=now + 60),
        V.HORIZON_POLICY: make_obs(r0, base + 10, horizon_policy="static", horizon_params=(0.0,)),
    }
    for reason, o in bad.items():
        [res] = core.submit(o, now)
        assert res is not None and res.status == STATUS_REFUSED, reason
        assert res.error.startswith(reason + ":"), (reason, res.error)
        assert res.round_id == o.round_id and res.robot_id == o.robot_id
    # round ids must increase: accept 400, then refuse 400 again and 399.
    assert core.submit(make_obs(r0, 400), now) == []
    for rid in (400, 399):
        [res] = core.submit(make_obs(r0, rid), now)
        assert res.error.startswith(V.ROUND_ID)
    # A wrench NaN is refused as non_finite too.
    assert core.submit(make_obs(r0, 401, wrench=np.array([np.inf] + [0] * 5, np.float32)), now)[0].error.startswith(V.NON_FINITE)
    # Meanwhile robot_1 is served untouched.
    assert core.submit(make_obs(r1, 900), now) == []
    chunks = drain(core)
    assert {(c.robot_id, c.round_id, c.status) for c in chunks} == {("robot_0", 400, STATUS_OK), ("robot_1", 900, STATUS_OK)}
    d = core.diagnostics()
    assert d["robot_1"]["refused_total"] == before
    refused = d["robot_0"]["refused"]
    for reason in set(bad) - {V.UNKNOWN_ROBOT}:
        assert refused.get(reason, 0) >= 1, reason
    assert refused[V.ROUND_ID] >= 2 and "ghost" not in d and core.failover_diagnostics()["unregistered.refused.unknown_robot"] >= 1


def test_bad_registrations_are_refused_with_reasons(core, fleet):
    reg = RobotClientCore(fleet.robots[0]).registration()
    from dataclasses import replace
    cases = [replace(reg, num_views=5), replace(reg, state_dim=99), replace(reg, action_dim=0),
             replace(reg, joint_names=("a",)), replace(reg, prompt="  "), replace(reg, control_period=0.0)]
    for bad in cases:
        res = core.register(replace(bad, robot_id="bad_robot"))
        assert not res.accepted and res.reason.startswith(V.BAD_REGISTRATION), res
    assert "bad_robot" not in core.registry.registrations


def test_reregistration_continues_round_ids_above_the_robots_history(core, fleet):
    r = fleet.robots[2]
    reg = RobotClientCore(r).registration()
    from dataclasses import replace
    assert core.register(replace(reg, last_round_id=5000)).accepted
    assert core.submit(make_obs(r, 4999))[0].error.startswith(V.ROUND_ID)
    assert core.submit(make_obs(r, 5001)) == []
    assert drain(core)[0].round_id == 5001


def test_engine_failure_answers_error_and_server_keeps_serving(fleet):
    c = build_core(_patient(fleet), instance_id="t2")
    r = fleet.robots[0]
    c.register(RobotClientCore(r).registration())
    slot = c.engines["engine_0"]
    real = slot.engine.infer
    slot.engine.infer = lambda inputs: (_ for _ in ()).throw(RuntimeError("device lost"))
    c.submit(make_obs(r, 2))
    out = drain(c)
    assert out[0].status == STATUS_ERROR and "device lost" in out[0].error
    slot.engine.infer = real
    c.submit(make_obs(r, 4))
    assert drain(c)[0].status == STATUS_OK


def test_newer_round_supersedes_a_queued_one_with_an_answer(core, fleet):
    r = fleet.robots[3]
    now = time.time()
    assert core.submit(make_obs(r, 7000, stamp=now), now) == []
    [notice] = core.submit(make_obs(r, 7002, stamp=now), now)
    assert notice.status == STATUS_REFUSED and notice.round_id == 7000 and notice.error.startswith("superseded")
    assert [c.round_id for c in drain(core)] == [7002]


def test_refresh_may_repeat_its_round_id(core, fleet):
    r = fleet.robots[3]
    now = time.time()
    assert core.submit(make_obs(r, 7100, stamp=now), now) == []
    # The server asked for a fresher observation of round 7100: same round, refresh=True.
    assert core.submit(make_obs(r, 7100, stamp=now + 0.01, refresh=True), now) == []
    [c] = drain(core)
    assert c.round_id == 7100 and c.stamp == pytest.approx(now + 0.01)
    # Without the refresh flag the same round is refused.
    assert core.submit(make_obs(r, 7100, stamp=now), now)[0].error.startswith(V.ROUND_ID)


def test_user_horizon_policy_by_import_path_and_its_failure(fleet):
    cls = "physai_ros.engine.horizon:ConfidenceHorizon"
    tasks = dict(fleet.tasks)
    tasks["pick_place"] = dataclasses.replace(tasks["pick_place"], horizon_policy=cls, horizon_params=(0.5, 2.0))
    core = build_core(_patient(dataclasses.replace(fleet, tasks=tasks)), instance_id="policies")
    r = fleet.robots[0]
    assert core.register(RobotClientCore(r).registration()).accepted
    now = time.time()
    core.submit(make_obs(r, 8000, stamp=now, horizon_policy=cls, horizon_params=()), now)
    [c] = drain(core)
    # ConfidenceHorizon's defaults can't be built without t: the robot gets an ERROR, not a crash.
    assert c.status == STATUS_ERROR and "horizon policy" in c.error
    core.submit(make_obs(r, 8002, stamp=now, horizon_policy="static", horizon_params=(3.0,)), now)
    [c] = drain(core)
    assert c.status == STATUS_OK and c.horizon == 3
    # Any class or callable fleet.yaml does not configure is refused, never imported or called.
    for k, name in enumerate(["os:abort", "builtins:exit", "physai_ros.engine.horizon:StaticHorizon"]):
        [c] = core.submit(make_obs(r, 8004 + 2 * k, stamp=now, horizon_policy=name, horizon_params=(1.0,)), now)
        assert c.status == STATUS_REFUSED and c.error.startswith("horizon_policy: policy class"), c.error
    assert core.diagnostics()["robot_0"]["refused"]["horizon_policy"] == 3


def test_warm_up_runs_every_engine_instance(core):
    calls = core.engines["engine_0"].engine.stats.calls
    assert core.warm_up(views=2) > 0
    assert core.engines["engine_0"].engine.stats.calls == calls + 1


def test_a_robot_whose_cameras_differ_in_size_is_served_and_each_view_checked(fleet):
    """fleet.yaml `cameras: [{topic, height, width}]`: a 96x128 wrist view beside a 128x96 top
    view registers (the sizes travel per view), is served, and a view of the other's size is
    refused naming the view and its own registered size."""
    doc = yaml.safe_load(default_fleet_path().read_text())
    doc["robots"] = [dict(doc["robots"][0], simulated=False, cameras=[  # a real arm's camera names
        {"topic": "wrist/image_raw", "height": 96, "width": 128},
        {"topic": "top/image_raw", "height": 128, "width": 96}])]
    arm = parse_fleet(doc).robots[0]
    assert arm.camera_topics == ("wrist/image_raw", "top/image_raw")
    assert [arm.camera_size(i) for i in range(2)] == [(96, 128), (128, 96)]
    core = build_core(_patient(dataclasses.replace(fleet, robots=(arm,))), instance_id="views")
    reg = RobotClientCore(arm).registration()
    assert reg.view_sizes == ((96, 128), (128, 96))
    assert core.register(reg).accepted
    assert core.submit(make_obs(arm, 1)) == []
    chunks = drain(core)
    assert [c.status for c in chunks] == [STATUS_OK]
    swapped = make_obs(arm, 2, images=(make_image(128, 96), make_image(96, 128)))
    refused = core.submit(swapped)
    assert [c.status for c in refused] == [STATUS_REFUSED]
    assert refused[0].error == f"{V.IMAGE_SIZE}: view 0: 128x96, registered 96x128"
    bad = dataclasses.replace(reg, robot_id="robot_9", view_sizes=((96, 128),))
    assert "1 view sizes for num_views=2" in core.register(bad).reason
