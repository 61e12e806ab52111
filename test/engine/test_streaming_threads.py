"""The two streams on real threads: start, serve, a robot leaving, stop, restart.
No timing thresholds: the test waits (bounded) for events and checks what happened."""
import threading
import time

import numpy as np

from physai_ros.engine.streaming.stream_engine import StreamingEngine
from physai_ros.serving.compute_priority import ChunkedCompute

from streaming_helpers import one_torch_thread  # noqa: F401 (autouse)
from streaming_helpers import build, robot_input
from machine_load import Deadline

def wait_for(cond, timeout=60.0):
    deadline = Deadline(timeout)
    while not cond():
        if deadline.expired():
            return False
        time.sleep(0.01)
    return True


def test_streams_run_on_threads_stop_and_restart_cleanly():
    core = build(force="random", vlm_hz=20.0, ae_hz=240.0, action_hz=120.0, steps_per_token=6)
    core.clock = time.perf_counter
    core.add_robot("a", robot_input(1))
    core.add_robot("b", robot_input(2))
    got = []
    lock = threading.Lock()

    def on_segment(seg):
        with lock:
            got.append(seg)

    eng = StreamingEngine(core, on_segment)
    try:
        for run in range(2):
            eng.start()
            assert eng.running
            core.set_wrench("a", [0, 0, -10.0 * (run + 1), 0, 0, 0])
            rounds = lambda: {s.round_id for s in list(got) if s.robot_id == "a"}  # noqa: E731
            assert wait_for(lambda: len(rounds()) >= 2 and any(s.committed.any() for s in list(got)))
            if run == 0:
                core.remove_robot("b")
                with lock:
                    n_b = sum(s.robot_id == "b" for s in got)
                t_removed = core.stats.ticks
                assert wait_for(lambda: core.stats.ticks >= t_removed + 5)
                with lock:
                    assert sum(s.robot_id == "b" for s in got) == n_b, "a robot that left gets nothing"
            eng.stop()
            assert not eng.running and eng.errors == []
            m = eng.metrics()
            assert m["vlm_hz"] > 0 and m["ae_hz"] > 0 and 0 <= m["missed_tick_fraction"] <= 1
            with lock:
                n = len(got)
            time.sleep(0.05)
            assert len(got) == n, "nothing runs after stop"
    finally:
        if eng.running:
            eng.stop()
    ids = [s.segment_id for s in got if s.robot_id == "a"]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    rounds = [s.round_id for s in got if s.robot_id == "a"]
    assert rounds == sorted(rounds), "round ids never decrease"
    assert all(np.isfinite(s.positions).all() for s in got)


def test_a_failing_consumer_is_counted_and_the_streams_go_on():
    core = build(vlm_hz=20.0, ae_hz=240.0, action_hz=120.0, steps_per_token=6)
    core.clock = time.perf_counter
    core.add_robot("a", robot_input(1))

    def broken(seg):
        raise RuntimeError("publisher gone")

    eng = StreamingEngine(core, broken)
    eng.start()
    try:
        assert wait_for(lambda: eng.error_count >= 3)
        assert wait_for(lambda: core.stats.ticks >= 6)
        assert eng.running
    finally:
        eng.stop()
    assert "on_segment: RuntimeError: publisher gone" in eng.errors[0]


def test_rates_count_every_tick_and_pass_beyond_the_kept_history():
    # The engine keeps only the last `history` tick times; its rates must not shrink once that
    # history is full (a long-running server reported 20000 ticks / its whole run time).
    core = build(vlm_hz=20.0, ae_hz=240.0, action_hz=120.0, steps_per_token=6)
    core.clock = time.perf_counter
    core.add_robot("a", robot_input(1))
    eng = StreamingEngine(core, None, history=8)
    eng.start()
    try:
        assert wait_for(lambda: core.stats.ticks >= 40 and eng.vlm_passes >= 10)
    finally:
        eng.stop()
    m = eng.metrics()
    assert len(eng.tick_starts) == 8 and m["ticks"] >= 40 and m["vlm_passes"] >= 10
    assert m["ae_hz"] == m["ticks"] / m["duration_s"] and m["vlm_hz"] == m["vlm_passes"] / m["duration_s"]
    assert m["scheduled_ticks"] == m["ticks"] + m["missed_ticks"]


def test_streams_wait_their_turn_while_a_chunked_batch_computes():
    """With a batch held, both streams wait in wait_turn (each at most its bound) and count it;
    the ticks that waited past their slot are missed ticks, the streams go on afterwards."""
    core = build(vlm_hz=20.0, ae_hz=240.0, action_hz=120.0, steps_per_token=6)
    core.clock = time.perf_counter
    core.add_robot("a", robot_input(1))
    gate = ChunkedCompute()
    bounds = {"vlm": 0.2, "tick": 0.05}
    asked = set()

    def wait_turn(stream):
        asked.add(stream)
        return gate.wait_idle(bounds[stream])

    eng = StreamingEngine(core, None, wait_turn=wait_turn)
    release = threading.Event()

    def batch():
        with gate.batch():
            release.wait(60.0)

    holder = threading.Thread(target=batch)
    holder.start()
    eng.start()
    try:
        assert wait_for(lambda: eng.vlm_waits >= 2 and eng.tick_waits >= 2)
        release.set()
        holder.join(60.0)
        ticks = eng.ticks
        assert wait_for(lambda: eng.ticks >= ticks + 5), "the ticks resume once the batch is done"
    finally:
        release.set()
        eng.stop()
    m = eng.metrics()
    assert asked == {"vlm", "tick"} and eng.errors == []
    assert m["vlm_waits"] >= 2 and m["vlm_waited_s"] >= 2 * bounds["vlm"] * 0.99
    assert m["tick_waits"] >= 2 and m["tick_waited_s"] >= 2 * bounds["tick"] * 0.99
    assert m["missed_ticks"] > 0
