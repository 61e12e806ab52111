"""The two streams of full streaming inference (streams.StreamingCore) on their own threads at
`vlm_hz` / `ae_hz` (CPU: torch drops the GIL inside kernels; CUDA: each thread issues its work on
its own torch.cuda.Stream and the KV hand-over is ordered by events). Missed ticks are counted,
never queued: a late tick takes a bigger flow step (see schedule.py). `vlm="process"` runs the
VLM stream in its own process instead, the cache through shared memory (vlm.py; CPU): the tick no
longer waits for the VLM thread's Python under the GIL.
"""
from __future__ import annotations

import collections
import logging
import math
import os
import threading
import time
from typing import Callable, List, Optional

import numpy as np
import torch

from physai_ros.engine.streaming.streams import StreamingCore, StreamSegment

log = logging.getLogger(__name__)


class StreamingEngine:
    """The two streams on two threads. start() / stop() may be called repeatedly."""

    def __init__(self, core: StreamingCore, on_segment: Optional[Callable[[StreamSegment], None]] = None,
                 history: int = 20000, vlm: str = "thread", vlm_spec=None,
                 wait_turn: Optional[Callable[[str], float]] = None):
        """vlm: "thread" (the VLM stream on a thread of this process) or "process" (its own
        process, the KV cache through shared memory: streaming_vlm.py; CPU only). vlm_spec:
        how the child builds the prefix model (default: the one StreamingExpert.build recorded).
        wait_turn: called by each stream ("vlm", "tick") before its pass or tick; it may block (the
        server's chunked batches go first: serving.compute_priority); returns the seconds waited.
        A tick that waited past its slot counts as missed, like a late one."""
        if vlm not in ("thread", "process"):
            raise ValueError(f"vlm={vlm!r}: expected 'thread' or 'process'")
        if vlm == "process":
            if core.engine.device.type != "cpu":
                raise ValueError("vlm='process' runs on the CPU only (a CUDA cache would need IPC handles)")
            vlm_spec = vlm_spec or getattr(core.expert, "vlm_spec", None)
            if vlm_spec is None:
                raise ValueError("vlm='process' needs a VLMSpec (StreamingExpert.build records one)")
        self.vlm_mode, self.vlm_spec = vlm, vlm_spec
        self.wait_turn = wait_turn
        self._vlm_proc = None
        self._shared_kv = None
        self.vlm_start_s: Optional[float] = None
        self._vlm_stats0 = self._vlm_stats = None
        self.core = core
        self.on_segment = on_segment
        self._stop = threading.Event()
        self._threads: List[threading.Thread] = []
        self._history = history
        self.errors: List[str] = []
        self.error_count = 0
        self.ae_scheduling = "not started"
        self._reset_metrics()
        cuda = core.engine.device.type == "cuda" and torch.cuda.is_available()
        self._streams = (torch.cuda.Stream(core.engine.device), torch.cuda.Stream(core.engine.device)) if cuda else (None, None)

    def _reset_metrics(self) -> None:
        h = self._history
        self.tick_starts: collections.deque = collections.deque(maxlen=h)
        self.tick_ms: collections.deque = collections.deque(maxlen=h)
        self.vlm_ms: collections.deque = collections.deque(maxlen=h)
        # Counts since start: the deques above keep only the last `history` entries, so rates
        # over a long run come from these (a full deque would say 20000 / run time).
        self.ticks = 0
        self.vlm_passes = 0
        # Passes and ticks that waited in wait_turn, and for how long in all.
        self.vlm_waits = self.tick_waits = 0
        self.vlm_waited_s = self.tick_waited_s = 0.0
        self.scheduled_ticks = 0
        self.missed_ticks = 0
        self.error_count = 0
        self.started_at = self.stopped_at = None

    @property
    def running(self) -> bool:
        return any(t.is_alive() for t in self._threads)

    def start(self) -> None:
        if self.running:
            raise RuntimeError("streams already running")
        self._stop.clear()
        self._reset_metrics()
        self.core.restart_robots()
        if self.vlm_mode == "process":
            self._start_vlm_process()
        self.started_at = self.core.clock()
        self._threads = [threading.Thread(target=self._run, args=(self._ae_loop, self._streams[1]), name="ae-stream", daemon=True)]
        if self.vlm_mode == "thread":
            self._threads.insert(0, threading.Thread(target=self._run, args=(self._vlm_loop, self._streams[0]),
                                                     name="vlm-stream", daemon=True))
        for t in self._threads:
            t.start()

    def stop(self, timeout: float = 10.0) -> None:
        """`timeout`: for both threads together."""
        self._stop.set()
        end = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, end - time.monotonic()))
        stopped_at = self.core.clock()
        if self._vlm_proc is not None:
            with self.core._lock:
                self.core.vlm_sink = None
            self._vlm_stats = self._shared_kv.stats()
            self._vlm_proc.stop(max(1.0, end - time.monotonic()))
            self._vlm_proc = None
        if self.running:
            raise RuntimeError("a stream thread did not stop in time")
        self._threads = []
        self.stopped_at = stopped_at

    def _start_vlm_process(self) -> None:
        from physai_ros.engine.streaming.vlm import SharedKVDoubleBuffer, VLMProcess, to_wire

        core = self.core
        if self._shared_kv is None:
            self._shared_kv = SharedKVDoubleBuffer(core.engine.config, core.config.max_robots, core.engine.dtype)
        proc = VLMProcess(self.vlm_spec, self._shared_kv, core.config.vlm_hz)
        self.vlm_start_s = proc.start()
        self._vlm_proc = proc

        def sink(kind, key, *rest):
            if kind == "set":
                slot, obs, captured = rest
                proc.send("set", key, slot, to_wire(obs), float(captured))
            else:
                proc.send(kind, key)

        with core._lock:
            core.kv = self._shared_kv
            core._kv_key = None
            # The whole robot table in one message: the child's first pass has every robot (one
            # message per robot let it publish 1..n-1-robot snapshots first; each new robot
            # count is a new shape, a recompilation for tick="compiled").
            proc.send("table", [("set", key, slot, to_wire(obs), float(cap)) for _, key, slot, obs, cap in core.vlm_table()])
            core.vlm_sink = sink
        self._vlm_stats0 = self._shared_kv.stats()
        self._vlm_stats = None

    def _run(self, loop, stream) -> None:
        try:
            if stream is not None:
                with torch.cuda.stream(stream):
                    loop()
            else:
                loop()
        except Exception as exc:  # a stream that dies must say why, not vanish
            log.exception("streaming thread failed")
            self.errors.append(f"{type(exc).__name__}: {exc}")

    def _guard(self, what: str, fn, *args):
        """One failing pass is reported and counted; the stream keeps its rate."""
        try:
            return fn(*args)
        except Exception as exc:
            msg = f"{what}: {type(exc).__name__}: {exc}"
            if len(self.errors) < 100:
                self.errors.append(msg)
            self.error_count += 1
            log.warning("streaming %s", msg)
            return None

    def _wait_until(self, t: float) -> bool:
        d = t - self.core.clock()
        if d > 0:
            return not self._stop.wait(d)
        return not self._stop.is_set()

    def _vlm_loop(self) -> None:
        clock, period = self.core.clock, 1.0 / self.core.config.vlm_hz
        nxt = clock()
        while self._wait_until(nxt):
            waited = self.wait_turn("vlm") if self.wait_turn is not None else 0.0
            if waited > 0:
                self.vlm_waits += 1
                self.vlm_waited_s += waited
            t0 = clock()
            self.vlm_passes += 1
            self._guard("vlm", self.core.vlm_pass, t0)
            self.vlm_ms.append((clock() - t0) * 1e3)
            nxt += period
            if clock() > nxt:  # behind: run again now, do not queue a burst
                nxt = clock()

    def _set_ae_scheduling(self) -> None:
        prio = int(self.core.config.ae_priority)
        self.ae_scheduling = "ordinary"
        if prio <= 0:
            return
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(prio))  # this thread only
            self.ae_scheduling = f"SCHED_FIFO {prio}"
        except (AttributeError, OSError) as exc:
            self.ae_scheduling = f"ordinary (SCHED_FIFO {prio} refused: {exc})"
            log.warning("streaming: AE thread %s", self.ae_scheduling)

    def _ae_loop(self) -> None:
        self._set_ae_scheduling()
        clock, period = self.core.clock, self.core.period
        t_start = clock()
        k = 0
        while self._wait_until(t_start + k * period):
            waited = self.wait_turn("tick") if self.wait_turn is not None else 0.0
            if waited > 0:
                self.tick_waits += 1
                self.tick_waited_s += waited
            t0 = clock()
            self.tick_starts.append(t0)
            self.ticks += 1
            segs = self._guard("tick", self.core.tick, t0) or ()
            if segs and self.on_segment is not None:
                # Under the robot-table lock, so once remove_robot returns nothing more is
                # delivered for that robot; on_segment must be short (hand off / publish).
                with self.core._lock:
                    for seg in segs:
                        if seg.robot_id in self.core._robots:
                            self._guard("on_segment", self.on_segment, seg)
            done = clock()
            self.tick_ms.append((done - t0) * 1e3)
            self.scheduled_ticks += 1
            nk = k + 1
            if done > t_start + nk * period:  # ticks whose slot has passed are missed, not queued
                skipped = math.ceil((done - t_start) / period) - nk
                self.missed_ticks += skipped
                self.scheduled_ticks += skipped
                nk += skipped
            k = nk

    def metrics(self) -> dict:
        """Achieved rates while running and tick-period statistics (ms)."""
        end = self.stopped_at if self.stopped_at is not None else self.core.clock()
        dur = max(end - (self.started_at or end), 1e-9)
        ts = np.diff(np.asarray(self.tick_starts)) * 1e3 if len(self.tick_starts) > 1 else np.zeros(1)
        tm = np.asarray(self.tick_ms) if self.tick_ms else np.zeros(1)
        vm = np.asarray(self.vlm_ms) if self.vlm_ms else np.zeros(1)
        passes = self.vlm_passes
        if self.vlm_mode == "process" and self._vlm_stats0 is not None:
            now = self._vlm_stats or self._shared_kv.stats()
            passes = now["passes"] - self._vlm_stats0["passes"]
            vm = np.asarray([(now["pass_ms_total"] - self._vlm_stats0["pass_ms_total"]) / max(passes, 1)])
        return {
            "duration_s": dur,
            "vlm": self.vlm_mode,
            "vlm_hz": passes / dur,
            "ae_hz": self.ticks / dur,
            "vlm_passes": passes,
            "vlm_waits": self.vlm_waits,
            "vlm_waited_s": self.vlm_waited_s,
            "tick_waits": self.tick_waits,
            "tick_waited_s": self.tick_waited_s,
            "ticks": self.ticks,
            "scheduled_ticks": self.scheduled_ticks,
            "missed_ticks": self.missed_ticks,
            "tick_period_ms_p50": float(np.percentile(ts, 50)),
            "tick_period_ms_p99": float(np.percentile(ts, 99)),
            "tick_compute_ms_p50": float(np.percentile(tm, 50)),
            "tick_compute_ms_p90": float(np.percentile(tm, 90)),
            "tick_compute_ms_p99": float(np.percentile(tm, 99)),
            "tick_compute_ms_max": float(tm.max()),
            "ticks_over_period": float(np.mean(tm > self.core.period * 1e3)),
            "vlm_pass_ms_p50": float(np.percentile(vm, 50)),
            "missed_tick_fraction": self.missed_ticks / max(self.scheduled_ticks, 1),
            "errors": list(self.errors),
            "error_count": self.error_count,
            "ae_scheduling": self.ae_scheduling,
        }
