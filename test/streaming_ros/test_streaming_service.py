"""The policy server's streaming service without ROS: fleet.yaml switch, slots and admission,
segments on the ROS clock in robot units, rate limiting that never drops a committed node,
bad input, timeouts, and stop/restart of the real streams."""
import math
import time

import numpy as np
import pytest

from physai_ros.config.fleet import FleetConfigError, parse_fleet
from physai_ros.control.trajectory_buffer import TrajectoryBuffer
from physai_ros.engine.processor.normalizer import FeatureStats, Normalizer

from streaming_service_helpers import one_torch_thread  # noqa: F401 (autouse)
from streaming_service_helpers import (ROS_OFFSET, build_service, fleet, fleet_doc, observation,
                                       registration, replace_task)

TICK = 1 / 480


def run(svc, clock, n, vlm_every=16, obs_every=0, robots=(), first_round=2):
    """n ticks of the manual streams; a fresh observation per robot every obs_every ticks."""
    rounds = {r.id: first_round for r in robots}
    for k in range(n):
        if obs_every and k % obs_every == 0:
            for r in robots:
                rounds[r.id] += 2
                assert svc.on_observation(observation(r, rounds[r.id], clock() + ROS_OFFSET, seed=k)) is None
        svc.engine.step(vlm=k % vlm_every == 0)
        clock.t += TICK


# ---------------------------------------------------------------- fleet.yaml
def test_fleet_yaml_streaming_switch_is_parsed_and_checked():
    f = fleet(slots=2, when_full="refuse", segment_rate_hz=90)
    assert f.tasks["stream_task"].mode == "streaming" and f.tasks["stream_task"].segment_rate_hz == 90
    assert f.tasks["pick_place"].mode == "chunked"
    sc = f.server.streaming
    assert (sc.slots, sc.vlm_hz, sc.ae_hz, sc.action_hz, sc.force, sc.when_full) == (2, 30, 480, 240, "random", "refuse")
    for mutate, msg in [
        (lambda d: d["tasks"]["stream_task"].update(mode="fast"), "tasks.stream_task.mode: expected one of"),
        (lambda d: d["tasks"]["stream_task"].update(segment_rate_hz=0), "tasks.stream_task.segment_rate_hz"),
        (lambda d: d["server"]["streaming"].update(ae_hz=-1), "server.streaming.ae_hz"),
        (lambda d: d["server"]["streaming"].update(slots=0), "server.streaming.slots"),
        (lambda d: d["server"]["streaming"].update(when_full="queue"), "server.streaming.when_full"),
        (lambda d: d["server"]["streaming"].update(force="strong"), "server.streaming.force"),
        (lambda d: d["server"]["streaming"].update(segment_hz=5), "server.streaming.segment_hz: unknown key"),
    ]:
        doc = fleet_doc()
        mutate(doc)
        with pytest.raises(FleetConfigError, match=msg.replace(".", r"\.")):
            parse_fleet(doc)


def test_fleet_yaml_picks_the_vlm_process_the_ae_priority_and_the_tick():
    """server.streaming's vlm / ae_priority / tick reach the streams (docs/streaming.md: what held
    480 Hz on 2 cores); the engine is built, not started (no child process here)."""
    from physai_ros.serving.action_runner import ActionModelRunner
    from physai_ros.serving.streaming.service import build_streaming_service
    from physai_ros.engine.processor.tokenizer import PromptTokenizer

    doc = fleet_doc()
    doc["server"]["streaming"].update(vlm="process", ae_priority=7, tick="plain")
    f = parse_fleet(doc)
    assert (f.server.streaming.vlm, f.server.streaming.ae_priority, f.server.streaming.tick) == ("process", 7, "plain")
    from physai_ros.engine.types import Pi0Config
    from physai_ros.config.fleet import tokenizer_path

    runner = ActionModelRunner(Pi0Config.preset("tiny"), PromptTokenizer(tokenizer_path(f), 48), None)
    svc = build_streaming_service(f, lambda seg: None, runner, log=lambda m: None)
    try:
        assert svc.engine.vlm_mode == "process"
        assert svc.engine.core.config.ae_priority == 7
        assert svc.engine.core.expert.tick == "plain"
    finally:
        svc.close(1.0)
    assert parse_fleet(fleet_doc()).server.streaming.vlm == "thread"  # the default stays in-process


def test_the_streams_run_over_the_chunked_engines_model_unless_a_vlm_process_needs_its_own():
    """One copy of the weights in a server with both modes (a full-depth pi0 server with two was
    killed for memory on a 24 GB host); a VLM process builds its own copy, so it keeps one."""
    from physai_ros.serving.startup.engine_builder import build_core
    from physai_ros.serving.streaming.service import build_streaming_service

    f = parse_fleet(fleet_doc())
    core = build_core(f)
    chunked = core.engines["engine_0"].engine
    svc = build_streaming_service(f, lambda seg: None, core.action_runner, log=lambda m: None, chunked=chunked)
    try:
        assert svc.engine.core.expert.model is chunked.model
        assert svc.engine.core.engine.model is chunked.model
    finally:
        svc.close(1.0)
    doc = fleet_doc()
    doc["server"]["streaming"].update(vlm="process")
    f = parse_fleet(doc)
    svc = build_streaming_service(f, lambda seg: None, core.action_runner, log=lambda m: None, chunked=chunked)
    try:
        assert svc.engine.core.expert.model is not chunked.model
    finally:
        svc.close(1.0)


# ---------------------------------------------------------------- slots
def test_slots_admission_chunked_fallback_refusal_and_release():
    f = fleet(slots=1, when_full="chunked")
    svc, clock, _ = build_service(f)
    r0, r1, r2 = f.robots
    assert svc.admit(registration(r0), r0.task).streaming
    again = svc.admit(registration(r0, last_round_id=8), r0.task)  # periodic re-registration keeps it
    assert again.accepted and again.streaming and svc.streaming_robots() == ["robot_0"]
    full = svc.admit(registration(r1), r1.task)
    assert full.accepted and not full.streaming and full.reason.startswith("chunked: all 1 streaming slot(s) taken")
    # A robot on a chunked task, or registering without streaming, is not a streaming robot.
    chunked_task = replace_task(r2, mode="chunked")
    assert svc.admit(registration(chunked_task), chunked_task.task) == type(full)(True, False, "")
    # Switching the slot holder to a chunked registration frees the slot for the next robot.
    assert not svc.admit(registration(r0, streaming=False), r0.task).streaming
    assert svc.streaming_robots() == [] and svc.released["left_streaming"] == 1
    assert svc.admit(registration(r1), r1.task).streaming

    g = fleet(slots=1, when_full="refuse")
    svc2, _, _ = build_service(g)
    assert svc2.admit(registration(g.robots[0]), g.robots[0].task).streaming
    no = svc2.admit(registration(g.robots[1]), g.robots[1].task)
    assert not no.accepted and no.reason.startswith("streaming_capacity:")
    assert svc2.refused["streaming_capacity"] == 1


# ---------------------------------------------------------------- segments
def test_published_segments_keep_every_committed_node_on_the_ros_grid_in_robot_units():
    f = fleet(slots=2, segment_rate_hz=60.0)  # 480 Hz ticks, at most 60 messages/s: ~8 ticks merged
    stats = Normalizer(action=FeatureStats("MEAN_STD", mean=np.arange(8, dtype=np.float32),
                                           std=np.full(8, 2.0, np.float32)))
    svc, clock, pub = build_service(f, normalizer=stats)
    robots = f.robots[:2]
    for r in robots:
        assert svc.admit(registration(r, last_round_id=2), r.task).streaming
    seen = []  # every StreamSegment the core produced, in order
    inner = svc.engine.on_segment
    svc.engine.on_segment = lambda s: (seen.append(s), inner(s))
    run(svc, clock, 240, obs_every=16, robots=robots)
    assert svc.starts == 1 and svc.engine.running
    for r in robots:
        mine = [p for p in pub if p.robot_id == r.id]
        raw = [s for s in seen if s.robot_id == r.id]
        assert len(mine) < len(raw) / 4, "rate limited"
        # Every node committed by the core is published exactly once, in time order, unnormalised.
        want_t = np.concatenate([s.node_times()[s.committed] for s in raw]) + svc.offset_s
        want_p = np.concatenate([s.positions[s.committed] for s in raw]) * 2.0 + np.arange(5)
        got_t = np.concatenate([p.start_time + np.arange(len(p.committed))[p.committed] * p.dt for p in mine])
        got_p = np.concatenate([p.positions[p.committed] for p in mine])
        n = len(got_t)
        assert n > 20 and np.allclose(got_t, want_t[:n], atol=1e-9) and np.allclose(got_p, want_p[:n], atol=1e-5)
        assert np.all(np.diff(got_t) > 0)
        # The ROS clock: nodes on the 480 Hz grid, offset from the stream clock by ~ROS_OFFSET.
        assert abs(svc.offset_s - ROS_OFFSET) <= 0.5 / 480 + 1e-9
        for p in mine:
            k = p.start_time * 480
            assert abs(k - round(k)) < 1e-6 and p.dt == pytest.approx(TICK)
            assert p.positions.shape == (len(p.committed), 5) and p.joint_names == r.joints
            c = p.committed
            assert not np.any(c[np.argmin(c):]) or c.all(), "committed nodes are a prefix"
        rounds = [p.round_id for p in mine]
        assert rounds == sorted(rounds) and rounds[-1] > 2 and all(x % 2 == 0 for x in rounds)
        # The robot's trajectory buffer accepts every message (in ROS time).
        buf = TrajectoryBuffer(r.joints, rate_hz=480.0)
        for p in mine:
            out = buf.insert_segment(p.start_time, p.dt, p.positions, p.committed, p.round_id,
                                     now=p.tick_time, joint_names=p.joint_names)
            assert out.accepted, out


def test_a_wrench_step_reaches_the_next_published_segment():
    f = fleet(slots=1, segment_rate_hz=480.0)
    svc, clock, pub = build_service(f)
    r = f.robots[0]
    svc.admit(registration(r), r.task)
    assert svc.on_wrench(r.id, [0.0] * 6, clock() + ROS_OFFSET) == "waiting_for_observation"
    run(svc, clock, 40, obs_every=40, robots=[r])
    stamp = clock() + ROS_OFFSET
    before = len(pub)
    assert svc.on_wrench(r.id, [0, 0, -50.0, 0, 0, 0], stamp) is None
    run(svc, clock, 1)
    after = pub[before:]
    assert after and after[0].wrench_stamp == pytest.approx(stamp, abs=1e-6)
    assert not any(p.wrench_stamp >= stamp - 1e-9 for p in pub[:before])  # nan: no sample yet


def test_a_wrench_step_moves_every_uncommitted_node_of_the_next_message_and_no_committed_one():
    """Twin services, identical inputs; one robot's force sensor steps: its next message differs
    from the twin's in every tentative node (the force token reaches all of them in one tick),
    while every node committed before the step was sent identically."""
    f = fleet(slots=1, segment_rate_hz=480.0)
    twins = [build_service(f) for _ in range(2)]
    r = f.robots[0]
    for svc, clock, _ in twins:
        svc.admit(registration(r), r.task)
        run(svc, clock, 60, obs_every=30, robots=[r])
    n = [len(pub) for _, _, pub in twins]
    a, b = (pub for _, _, pub in twins)
    assert n[0] == n[1] and all(np.array_equal(x.positions, y.positions) for x, y in zip(a, b))
    for k, (svc, clock, _) in enumerate(twins):
        svc.on_wrench(r.id, [0, 0, -50.0 * k, 0, 0, 0], clock() + ROS_OFFSET)
        run(svc, clock, 1)
    x, y = a[n[0]], b[n[1]]
    assert np.array_equal(x.committed, y.committed)
    tentative = ~x.committed
    assert tentative.any()
    assert np.all(np.any(np.abs(x.positions[tentative] - y.positions[tentative]) > 1e-6, axis=1))
    assert np.array_equal(x.positions[~tentative], y.positions[~tentative])


# ---------------------------------------------------------------- bad input, timeouts
def test_bad_input_is_refused_counted_and_the_stream_goes_on():
    f = fleet(slots=1)
    svc, clock, pub = build_service(f)
    r, other = f.robots[0], f.robots[1]
    svc.admit(registration(r), r.task)
    now = clock() + ROS_OFFSET
    assert svc.on_observation(observation(other, 2, now)).reason == "not_streaming"
    bad_views = observation(r, 2, now)
    bad_views = type(bad_views)(**{**vars(bad_views), "images": bad_views.images * 2})
    assert svc.on_observation(bad_views).reason == "num_views"
    assert svc.on_observation(observation(r, 2, now - 60)).reason == "stale_timestamp"
    assert svc.on_observation(observation(r, 2, now, state=np.full(5, np.nan, np.float32))).reason == "non_finite"
    assert svc.on_observation(observation(r, 2, now)) is None
    assert svc.on_observation(observation(r, 2, now)).reason == "round_id_not_increasing"
    assert svc.on_wrench(r.id, [math.nan] * 6, now).startswith("wrench")
    assert svc.on_wrench(r.id, [1.0] * 5, now).startswith("wrench")
    assert svc.on_wrench(other.id, [0.0] * 6, now).startswith("not_streaming")
    refused = svc.diagnostics()["robots"][r.id]["refused"]
    assert refused == {"num_views": 1, "stale_timestamp": 1, "non_finite": 1, "round_id_not_increasing": 1, "wrench": 2}
    run(svc, clock, 20)
    assert any(p.robot_id == r.id for p in pub)


def test_a_silent_robot_loses_its_slot_and_the_streams_stop_until_the_next_robot():
    f = fleet(slots=1, segment_rate_hz=480.0)
    svc, clock, pub = build_service(f)
    r0, r1 = f.robots[:2]
    svc.admit(registration(r0), r0.task)
    run(svc, clock, 20, obs_every=10, robots=[r0])
    assert svc.engine.running and svc.reap() == []
    clock.t += f.server.streaming.timeout_s + 0.1
    assert svc.reap() == ["robot_0"] and not svc.engine.running and svc.streaming_robots() == []
    assert svc.core.robot_ids == [], "the engine's slot is free too"
    assert svc.admit(registration(r1), r1.task).streaming
    n = len(pub)
    run(svc, clock, 20, obs_every=10, robots=[r1])
    assert svc.engine.running and svc.starts == 2
    assert {p.robot_id for p in pub[n:]} == {"robot_1"}


def test_round_ids_never_decrease_for_a_robot_whose_client_restarted():
    f = fleet(slots=1, segment_rate_hz=480.0)
    svc, clock, pub = build_service(f)
    r = f.robots[0]
    svc.admit(registration(r), r.task)
    run(svc, clock, 40, obs_every=10, robots=[r], first_round=100)
    high = max(p.round_id for p in pub)
    assert high >= 102
    svc.release(r.id, "test")
    # The restarted client registers with last_round_id 0 and counts from 2 again: accepted,
    # and its segments keep the highest round id its controller has seen until they pass it.
    svc.admit(registration(r, last_round_id=0), r.task)
    n = len(pub)
    run(svc, clock, 40, obs_every=10, robots=[r], first_round=0)
    assert pub[n:] and min(p.round_id for p in pub[n:]) == high
    assert svc.diagnostics()["robots"][r.id]["refused"] == {}


def test_real_streams_start_stop_and_restart_through_the_service():
    f = fleet(slots=1, segment_rate_hz=120.0)
    svc, _, pub = build_service(f, clock=time.perf_counter, manual=False)
    svc.ros_clock = time.time
    r = f.robots[0]
    try:
        for visit in range(2):
            assert svc.admit(registration(r, last_round_id=100 * visit), r.task).streaming
            rid = 100 * visit
            end = time.monotonic() + 60
            n0 = len(pub)
            while time.monotonic() < end and not any(p.committed.any() for p in pub[n0:]):
                rid += 2
                assert svc.on_observation(observation(r, rid, time.time(), seed=rid)) is None
                svc.on_wrench(r.id, [0, 0, -5.0 * visit, 0, 0, 0], time.time())
                time.sleep(0.03)
            assert svc.engine.running and any(p.committed.any() for p in pub[n0:])
            assert all(p.round_id > 100 * visit for p in pub[n0:])
            svc.release(r.id, "test")
            assert not svc.engine.running and svc.engine.errors == []
            n = len(pub)
            time.sleep(0.05)
            assert len(pub) == n, "nothing is published after the slot is freed"
        assert svc.starts == 2
    finally:
        svc.close()
