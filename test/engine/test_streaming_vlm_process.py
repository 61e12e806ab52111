"""The VLM stream in its own process (streaming_vlm.py): shared-memory KV hand-over, the same
caches as in process, robots joining and leaving, start / stop / restart. No timing thresholds:
waits are bounded polls."""
import threading
import time

import torch

from physai_ros.engine.streaming.expert import StreamingExpert
from physai_ros.engine.streaming.stream_engine import StreamingEngine
from physai_ros.engine.streaming.streams import StreamingConfig, StreamingCore
from physai_ros.engine.streaming.vlm import SharedKVDoubleBuffer

from streaming_helpers import one_torch_thread  # noqa: F401 (autouse)
from streaming_helpers import CFG, robot_input
from machine_load import Deadline


def _wait(cond, timeout=60.0):
    deadline = Deadline(timeout)
    while not deadline.expired():
        if cond():
            return True
        time.sleep(0.02)
    return False


def test_shared_buffer_round_trip_and_leases():
    engine, _ = StreamingExpert.build(CFG)
    buf = SharedKVDoubleBuffer(CFG, max_robots=3)
    with buf.read() as snap:
        assert snap is None
    caches = [engine.prefix([robot_input(i, 2, 4 + 3 * i) for i in range(n)]) for n in (2, 1)]
    v1 = buf.publish(caches[0], ["a", "b"], [1.0, 2.0], 3.0)
    with buf.read() as snap:
        assert snap.version == v1 and snap.robot_ids == ("a", "b") and snap.captured_at == (1.0, 2.0)
        for got, ref in zip(snap.cache.keys + snap.cache.values, caches[0].keys + caches[0].values):
            assert torch.equal(got, ref)
        assert torch.equal(snap.cache.pad, caches[0].pad) and torch.equal(snap.cache.next_pos, caches[0].next_pos)
        # While this lease is held, a publish goes to the other slot, and the one after it waits.
        v2 = buf.publish(caches[1], ["c"], [4.0], 5.0)
        done = threading.Event()
        t = threading.Thread(target=lambda: (buf.publish(caches[0], ["a", "b"], [1.0, 2.0], 6.0), done.set()))
        t.start()
        time.sleep(0.2)
        assert not done.is_set(), "the writer must not overwrite a leased slot"
        assert snap.robot_ids == ("a", "b") and torch.equal(snap.cache.keys[0], caches[0].keys[0])
    t.join(10)
    assert done.is_set()
    with buf.read() as snap:
        assert snap.version == v2 + 1 > v1


def test_vlm_process_serves_the_same_caches_and_follows_the_robot_table():
    engine, expert = StreamingExpert.build(CFG, force="random")
    core = StreamingCore(engine, expert, StreamingConfig(vlm_hz=30, ae_hz=120, action_hz=10, steps_per_token=4))
    inputs = [robot_input(20 + i, 2, 5 + 2 * i) for i in range(2)]
    core.add_robot("a", inputs[0])
    core.add_robot("b", inputs[1])
    segments = []
    streams = StreamingEngine(core, on_segment=segments.append, vlm="process")
    streams.start()
    try:
        assert _wait(lambda: core.kv.version > 0 and len(segments) > 5)
        with core.kv.read() as snap:
            ref = engine.prefix(inputs)
            assert snap.robot_ids == tuple(r.key for r in sorted(core._robots.values(), key=lambda r: r.slot))
            for got, want in zip(snap.cache.keys + snap.cache.values, ref.keys + ref.values):
                assert torch.equal(got, want), "the child's prefix is the parent's, bit for bit"
        core.remove_robot("b")
        assert _wait(lambda: _ids(core) == (core._robots["a"].key,))
        core.update_observation("a", robot_input(30, 2, 9))
        v = core.kv.version
        assert _wait(lambda: core.kv.version > v + 1)
        with core.kv.read() as snap:
            assert torch.equal(snap.cache.keys[0], engine.prefix([robot_input(30, 2, 9)]).keys[0])
    finally:
        streams.stop()
    m = streams.metrics()
    assert m["vlm"] == "process" and m["vlm_hz"] > 0 and m["error_count"] == 0, m
    rounds = [s.round_id for s in segments if s.robot_id == "a"]
    assert rounds == sorted(rounds)
    # Restart: a fresh child, the streams serve again.
    n = len(segments)
    streams.start()
    try:
        assert _wait(lambda: len(segments) > n + 5)
    finally:
        streams.stop()
    assert streams.metrics()["error_count"] == 0


def _ids(core):
    with core.kv.read() as snap:
        return snap.robot_ids
