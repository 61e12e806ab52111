"""The policy server's execution loop without ROS: one dispatcher thread and one thread per
engine instance, so several instances (local or remote) compute at the same time.

The dispatcher asks the core for the scheduler's batches whenever a request waits and an
instance is free, and hands each batch to its instance's thread; `submit` does the same at once
in the caller's thread (the node's executor), so a request that finds an idle instance reaches
it with one thread switch, not two (the dispatcher's wake-up was 0.4 ms of a 1.8 ms serving
overhead, bench/serving_vs_openpi.py); an instance thread runs one
batch at a time (ServingCore marks it running, so the scheduler never stacks a second one on it)
and hands the chunks to `on_chunks`. Callbacks run in those threads.

An instance thread that dies (a fatal error in its engine: ServingCore.run_batch re-raises
what is not an ordinary Exception) is noticed by the dispatcher: the instance is marked failed,
work queued for it is re-dispatched, and a hot standby, if configured, takes its place.
"""
from __future__ import annotations

import contextlib
import queue
import threading
import time
from typing import Callable, Sequence

from physai_ros.protocol.chunk import ActionChunkData
from physai_ros.serving.compute_priority import ChunkedCompute
from physai_ros.serving.compute_threads import use_threads
from physai_ros.serving.serving_core import BatchWork, ServingCore

# How long the dispatcher sleeps when requests wait but nothing could be placed (held for a
# refresh, or waiting for a busy instance); a submit or a finished batch wakes it earlier.
RETRY_S = 0.005


class ServingThreads:
    def __init__(self, core: ServingCore, on_chunks: Callable[[Sequence[ActionChunkData]], None],
                 on_refresh: Callable[[str, int], None],
                 on_error: Callable[[str], None] = lambda msg: None,
                 on_texts: Callable[[Sequence], None] = lambda texts: None, torch_threads: int | None = None,
                 chunked: ChunkedCompute | None = None):
        """on_texts: the language stream's updates (RobotTextData), after each batch's chunks.
        torch_threads: each instance thread's intra-op threads (serving.compute_threads; None:
        torch's default). chunked: told of every batch on a local instance (the streams wait
        for them: serving.compute_priority)."""
        self.core = core
        self.on_chunks, self.on_refresh, self.on_error, self.on_texts = on_chunks, on_refresh, on_error, on_texts
        self._stop = threading.Event()
        self._queues: dict[str, queue.SimpleQueue] = {iid: queue.SimpleQueue() for iid in core.engines}
        self._threads = [threading.Thread(target=self._dispatch_loop, name="serving_dispatch", daemon=True)]
        self._instance_threads = {iid: threading.Thread(target=self._instance_loop, args=(iid,),
                                                        name=f"serving_{iid}", daemon=True)
                                  for iid in core.engines}
        self._threads += list(self._instance_threads.values())
        self._dead: set[str] = set()
        self._torch_threads = torch_threads
        self.chunked = chunked or ChunkedCompute()

    def start(self) -> "ServingThreads":
        for t in self._threads:
            t.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the threads, waiting at most `timeout` seconds for all of them together (a node
        stops within a budget: physai_ros.ros.spin). An instance thread inside a batch may
        outlive it: it finishes the batch first, and nothing interrupts a torch op."""
        self._stop.set()
        for q in self._queues.values():
            q.put(None)
        end = time.monotonic() + timeout
        for t in self._threads:
            if t.ident is not None:  # (threads stopped before start() have nothing to join)
                t.join(max(0.0, end - time.monotonic()))

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def submit(self, obs) -> list[ActionChunkData]:
        """core.submit, then one scheduling decision in the caller's thread. Returns the chunks
        to publish at once (refusals, superseded rounds). Whatever this could not place (every
        instance busy, a request held for a refresh) the dispatcher thread places later."""
        answers = self.core.submit(obs, notify=False)
        if self._stop.is_set() or not self._dispatch_once(from_submit=True):
            self.core.wake()
        return answers

    def _dispatch_once(self, from_submit: bool = False) -> bool:
        """One core.dispatch, its batches handed to their instance threads. Returns whether a
        batch was handed over. from_submit: the caller is the executor thread; it skips the
        cycle when nothing can be placed (the dispatcher is woken instead)."""
        if from_submit and not self.core.dispatchable():
            return False
        try:
            d = self.core.dispatch()
        except Exception as e:  # keep serving; the failure is logged and visible
            self.on_error(f"scheduling step failed: {type(e).__name__}: {e}")
            return False
        for work in d.work:
            self._queues[work.instance_id].put(work)
        for robot_id, round_id in d.refresh:
            self._call(self.on_refresh, robot_id, round_id)
        return bool(d.work)

    def _dispatch_loop(self) -> None:
        while not self._stop.is_set():
            self._check_instances()
            if not self.core.wait_for_work(0.05):
                continue
            if not self._dispatch_once():
                self.core.wait_for_change(RETRY_S)

    def _check_instances(self) -> None:
        for iid, t in self._instance_threads.items():
            if iid in self._dead or t.is_alive() or not t.ident:
                continue
            self._dead.add(iid)
            self.core.instance_failed(iid, "its serving thread died")
            self.on_error(f"engine instance {iid}: serving thread died; its work is re-dispatched")
            q = self._queues[iid]
            while True:
                try:
                    work = q.get_nowait()
                except queue.Empty:
                    break
                if work is not None:
                    answers = self.core.requeue(work)
                    if answers:
                        self._call(self.on_chunks, answers)

    def _instance_loop(self, instance_id: str) -> None:
        use_threads(self._torch_threads)
        q = self._queues[instance_id]
        local = not self.core.engines[instance_id].remote
        while True:
            work: BatchWork | None = q.get()
            if work is None:
                return
            try:
                with self.chunked.batch() if local else contextlib.nullcontext():
                    chunks = self.core.run_batch(work)
            except Exception as e:  # run_batch already freed the instance
                self.on_error(f"batch on {instance_id} failed: {type(e).__name__}: {e}")
                continue
            if not self._stop.is_set():
                self._call(self.on_chunks, chunks)
            # Text after the chunks are out: actions never wait for it (OxyGen's frame order).
            texts = self.core.run_language(instance_id) + self.core.take_text_notices()
            if texts and not self._stop.is_set():
                self._call(self.on_texts, texts)

    def _call(self, fn, *args) -> None:
        try:
            fn(*args)
        except Exception as e:  # a publishing failure must not kill the instance's thread
            if not self._stop.is_set():
                self.on_error(f"{getattr(fn, '__name__', 'callback')} failed: {type(e).__name__}: {e}")
