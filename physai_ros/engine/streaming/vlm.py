"""The VLM stream in its own process, the KV cache handed over through shared memory.

On the CPU the VLM stream as a thread of the action-expert (AE) process shares the GIL with the
tick: each of the tick's ~140 torch calls may wait for the VLM thread's Python, which shows as
missed ticks (docs/streaming.md, "The tick"). `StreamingEngine(core, vlm="process")` runs the
VLM passes in a spawned child process instead:

- the parent forwards every robot's newest observation (add / update / remove) through a
  torch.multiprocessing queue (tensors travel as shared-memory handles);
- the child runs `Pi0Engine.prefix` at vlm_hz on the same weights and publishes each cache
  into a `SharedKVDoubleBuffer`: two slots of shared-memory tensors sized for max_robots x
  max_prefix_len, a header (version, front slot, batch and length per slot, reader leases,
  pass statistics) and a lock shared by both processes;
- the AE thread reads it through the same `read()` lease as the in-process KVDoubleBuffer, so
  StreamingCore.tick is unchanged; robot ids and capture times travel as a small JSON record
  per slot, parsed only when the version changes.

The writer never overwrites a slot a reader holds (the reader's lease lasts one prepare, i.e.
one copy into the expert's buffers, on a new version only). CPU only (a CUDA cache would need
CUDA IPC handles; not written).
"""
from __future__ import annotations

import json
import logging
import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Dict, Iterator, Optional

import torch
import torch.multiprocessing as tmp

from physai_ros.engine.streaming.kv_exchange import KVSnapshot
from physai_ros.engine.types import EngineInput, Pi0Config, PrefixCache

log = logging.getLogger(__name__)

# header fields (int64)
_VERSION, _FRONT, _B0, _T0, _B1, _T1, _R0, _R1, _PASSES, _PASS_US, _ERRORS, _LAST_PASS_US = range(12)
_META_BYTES = 1 << 16


@dataclass
class VLMSpec:
    """What the child needs to build the same prefix model (picklable)."""

    config: Pi0Config
    weights: Optional[Dict[str, torch.Tensor]]  # None: random_weights(config, seed)
    seed: int = 0
    dtype: torch.dtype = torch.float32
    backend: str = "torch"
    torch_threads: int = 1

    def build_engine(self):
        from physai_ros.engine.engine import Pi0Engine
        from physai_ros.engine.streaming.force_token import ForceProjection
        from physai_ros.engine.checkpoint.params import random_weights

        w = dict(self.weights) if self.weights is not None else random_weights(self.config, seed=self.seed)
        ForceProjection.pop_from(w, self.config.expert.width)
        return Pi0Engine(self.config, w, device="cpu", dtype=self.dtype, fast=True, backend=self.backend, seed=self.seed)


class SharedKVDoubleBuffer:
    """A KVDoubleBuffer whose slots live in shared memory: publish() in one process, read() in
    another (or the same). Create it in the parent before starting the child."""

    def __init__(self, config: Pi0Config, max_robots: int, dtype: torch.dtype = torch.float32, ctx=None):
        ctx = ctx or tmp.get_context("spawn")
        vlm = config.vlm
        t = config.max_prefix_len
        self.max_robots, self.max_len = max_robots, t

        def shared(*shape, dt=dtype):
            return torch.zeros(*shape, dtype=dt).share_memory_()

        self.keys = [[shared(max_robots, t, vlm.num_kv_heads, vlm.head_dim) for _ in range(vlm.depth)] for _ in range(2)]
        self.values = [[shared(max_robots, t, vlm.num_kv_heads, vlm.head_dim) for _ in range(vlm.depth)] for _ in range(2)]
        self.pad = [shared(max_robots, t, dt=torch.bool) for _ in range(2)]
        self.next_pos = [shared(max_robots, dt=torch.int64) for _ in range(2)]
        self.meta = [shared(_META_BYTES, dt=torch.uint8) for _ in range(2)]
        self.header = shared(16, dt=torch.int64)
        self.header[_FRONT] = -1
        self.lock = ctx.Lock()
        self._snap: Optional[KVSnapshot] = None  # reader side: the parsed snapshot of the front version

    def __getstate__(self):
        d = dict(self.__dict__)
        d["_snap"] = None
        return d

    @property
    def version(self) -> int:
        return int(self.header[_VERSION])

    def stats(self) -> dict:
        h = self.header.tolist()
        return {"passes": h[_PASSES], "pass_ms_total": h[_PASS_US] / 1e3, "errors": h[_ERRORS],
                "last_pass_ms": h[_LAST_PASS_US] / 1e3}

    def record_pass(self, seconds: float, ok: bool) -> None:
        with self.lock:
            self.header[_PASSES] += 1
            self.header[_PASS_US] += int(seconds * 1e6)
            self.header[_LAST_PASS_US] = int(seconds * 1e6)
            if not ok:
                self.header[_ERRORS] += 1

    def publish(self, cache: PrefixCache, robot_ids, captured_at, published_at: float) -> int:
        b, t = cache.pad.shape
        if b > self.max_robots or t > self.max_len:
            raise ValueError(f"cache [{b}, {t}] exceeds the shared slots [{self.max_robots}, {self.max_len}]")
        if len(robot_ids) != b or len(captured_at) != b:
            raise ValueError(f"{len(robot_ids)} robot ids / {len(captured_at)} capture times for a cache of batch {b}")
        meta = json.dumps({"ids": list(robot_ids), "captured": [float(c) for c in captured_at],
                           "published": float(published_at)}).encode()
        if len(meta) + 8 > _META_BYTES:
            raise ValueError("robot ids too long for the shared record")
        while True:
            with self.lock:
                back = 0 if int(self.header[_FRONT]) != 0 else 1
                if int(self.header[_R0 + back]) == 0:
                    break
            time.sleep(1e-4)  # a reader still copies out of the back slot: a short wait
        for dst, src in zip(self.keys[back], cache.keys):
            dst[:b, :t].copy_(src)
        for dst, src in zip(self.values[back], cache.values):
            dst[:b, :t].copy_(src)
        self.pad[back][:b, :t].copy_(cache.pad)
        self.next_pos[back][:b].copy_(cache.next_pos)
        m = self.meta[back]
        m[:8].copy_(torch.tensor([len(meta)], dtype=torch.int64).view(torch.uint8))
        m[8:8 + len(meta)].copy_(torch.frombuffer(bytearray(meta), dtype=torch.uint8))
        with self.lock:
            self.header[_B0 + 2 * back] = b
            self.header[_T0 + 2 * back] = t
            self.header[_VERSION] += 1
            self.header[_FRONT] = back
            return int(self.header[_VERSION])

    @contextmanager
    def read(self) -> Iterator[Optional[KVSnapshot]]:
        """Lease the newest complete snapshot (None before the first publish)."""
        with self.lock:
            front = int(self.header[_FRONT])
            if front < 0:
                slot = -1
            else:
                slot = front
                version = int(self.header[_VERSION])
                b, t = int(self.header[_B0 + 2 * slot]), int(self.header[_T0 + 2 * slot])
                self.header[_R0 + slot] += 1
        if slot < 0:
            yield None
            return
        try:
            snap = self._snap
            if snap is None or snap.version != version:
                m = self.meta[slot]
                n = int(m[:8].view(torch.int64)[0])
                meta = json.loads(bytes(m[8:8 + n].numpy()).decode())
                cache = PrefixCache(keys=[k[:b, :t] for k in self.keys[slot]], values=[v[:b, :t] for v in self.values[slot]],
                                    pad=self.pad[slot][:b, :t], next_pos=self.next_pos[slot][:b])
                snap = KVSnapshot(version, cache, tuple(meta["ids"]), tuple(meta["captured"]), meta["published"])
                self._snap = snap
            yield snap
        finally:
            with self.lock:
                self.header[_R0 + slot] -= 1


def _vlm_main(spec: VLMSpec, buffer: SharedKVDoubleBuffer, inbox, stop, ready, vlm_hz: float, clock_offset: float) -> None:
    """Child process: newest observation per robot key from `inbox`, a prefix pass of all of
    them at vlm_hz, each published into `buffer`. Times are sent in the parent's
    time.perf_counter clock (perf_counter is system-wide monotonic on Linux; the offset is 0)."""
    try:
        torch.set_num_threads(spec.torch_threads)
        engine = spec.build_engine()
        robots: Dict[str, tuple] = {}  # key -> (slot, obs, captured)
        ready.put("ready")
    except Exception:  # the parent reports it
        ready.put(traceback.format_exc())
        return
    period = 1.0 / vlm_hz
    nxt = time.perf_counter()
    while not stop.is_set():
        while True:  # newest state of the robot table
            try:
                msg = inbox.get_nowait()
            except Exception:
                break
            if msg[0] == "set":  # key, slot, observation, captured_at
                robots[msg[1]] = (msg[2], from_wire(msg[3]), msg[4])
            elif msg[0] == "remove":
                robots.pop(msg[1], None)
            elif msg[0] == "table":  # the whole table at start
                robots = {m[1]: (m[2], from_wire(m[3]), m[4]) for m in msg[1]}
        d = nxt - time.perf_counter()
        if d > 0:
            stop.wait(min(d, 0.05))
            continue
        t0 = time.perf_counter()
        ok = True
        if robots:
            items = sorted(robots.items(), key=lambda kv: kv[1][0])
            try:
                cache = engine.prefix([o for _, (_, o, _) in items])
                buffer.publish(cache, [k for k, _ in items], [c for _, (_, _, c) in items], time.perf_counter() + clock_offset)
            except Exception:
                ok = False
                log.exception("VLM process: pass failed")
            buffer.record_pass(time.perf_counter() - t0, ok)
        nxt += period
        if time.perf_counter() > nxt:  # behind: run again now, no burst
            nxt = time.perf_counter()


class VLMProcess:
    """The child process and its inbox. start() blocks until the child's engine is built."""

    def __init__(self, spec: VLMSpec, buffer: SharedKVDoubleBuffer, vlm_hz: float):
        self.ctx = tmp.get_context("spawn")
        self.spec, self.buffer, self.vlm_hz = spec, buffer, vlm_hz
        self.inbox = self.ctx.Queue()
        self._stop = self.ctx.Event()
        self._proc = None

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.is_alive()

    def start(self, timeout: float = 300.0) -> float:
        """Returns the seconds the child took to start (spawn, import, build the engine)."""
        t0 = time.perf_counter()
        ready = self.ctx.Queue()
        self._stop.clear()
        self._proc = self.ctx.Process(target=_vlm_main, name="vlm-stream",
                                      args=(self.spec, self.buffer, self.inbox, self._stop, ready, self.vlm_hz, 0.0),
                                      daemon=True)
        self._proc.start()
        msg = ready.get(timeout=timeout)
        if msg != "ready":
            self.stop()
            raise RuntimeError(f"VLM process failed to start:\n{msg}")
        return time.perf_counter() - t0

    def send(self, *msg) -> None:
        self.inbox.put(msg)

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._proc is not None:
            self._proc.join(timeout)
            if self._proc.is_alive():
                self._proc.terminate()
                self._proc.join(2.0)
        self._proc = None


def to_wire(obs: EngineInput) -> dict:
    """An observation for the child, by value (numpy arrays through the queue's pipe: no
    shared-memory file per frame). Only what the prefix reads."""
    images = [f.cpu().numpy() for f in obs.images] if isinstance(obs.images, tuple) else obs.images.cpu().numpy()
    return {"images": images, "image_masks": obs.image_masks.cpu().numpy(),
            "tokens": obs.tokens.cpu().numpy(), "token_mask": obs.token_mask.cpu().numpy(),
            "state": obs.state.cpu().numpy()}


def from_wire(d: dict) -> EngineInput:
    """to_wire's observation again (raw camera frames, a list there, a tuple again)."""
    return EngineInput(**{k: tuple(torch.from_numpy(f) for f in v) if isinstance(v, list) else torch.from_numpy(v)
                          for k, v in d.items()})
