"""An engine worker's logic without ROS: measure the profile, serve requests, report status.

serve() never raises: whatever a request does wrong (bad sizes, bad values, an engine error)
comes back as an error result for that batch_id, is counted, and the next request is served.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable, Optional

import torch
from physai_ros_interfaces.msg import EngineBatchRequest, EngineBatchResult

from physai_ros.protocol.topics import check_instance_id
from physai_ros.scheduler.types import LatencyProfile
from physai_ros.workers.codec import (BadRequest, WorkerStatus, config_to_json, decode_request, encode_result,
                                      error_result)
from physai_ros.workers.profiling import measure_profile


class WorkerCore:
    def __init__(self, engine: Any, instance_id: str, tier: str = "edge", max_batch: int = 8,
                 model: str = "", heartbeat_period_s: float = 0.5,
                 clock: Callable[[], float] = time.monotonic):
        if tier not in ("edge", "cloud"):
            raise ValueError(f"tier: expected 'edge' or 'cloud', got {tier!r}")
        if max_batch < 1:
            raise ValueError(f"max_batch: expected >= 1, got {max_batch}")
        self.engine = engine
        self.config = engine.config
        self.instance_id = check_instance_id(instance_id)
        self.tier = tier
        self.max_batch = max_batch
        self.model = model
        self.heartbeat_period_s = heartbeat_period_s
        self.clock = clock
        self.profile: Optional[LatencyProfile] = None
        self._config_json = config_to_json(self.config)
        self._lock = threading.Lock()
        self.batches_served = 0
        self.robots_served = 0
        self.errors = 0
        self.errors_by_kind: dict[str, int] = {}
        self.last_error = ""
        self.queue_depth = 0

    def measure(self, reps: int = 3, views: int = 2, tokens: int = 32) -> LatencyProfile:
        self.profile = measure_profile(self.engine.infer, self.config, self.max_batch, reps, views, tokens)
        return self.profile

    def serve(self, req: EngineBatchRequest, received_at: Optional[float] = None) -> EngineBatchResult:
        t0 = self.clock()
        queue_ms = (t0 - received_at) * 1e3 if received_at is not None else 0.0
        batch_id = getattr(req, "batch_id", "")
        try:
            inputs = decode_request(req, self.config, self.max_batch)
            with torch.inference_mode():
                outputs = self.engine.infer(inputs)
            res = encode_result(outputs, self.config, batch_id, self.instance_id, queue_ms)
        except BadRequest as e:
            return self._failed(batch_id, "bad_request", f"bad request: {e}", queue_ms)
        except Exception as e:  # an engine failure on one batch must not stop the worker
            return self._failed(batch_id, "engine", f"engine failed: {type(e).__name__}: {e}", queue_ms)
        with self._lock:
            self.batches_served += 1
            self.robots_served += len(inputs)
        return res

    def _failed(self, batch_id: str, kind: str, msg: str, queue_ms: float) -> EngineBatchResult:
        with self._lock:
            self.errors += 1
            self.errors_by_kind[kind] = self.errors_by_kind.get(kind, 0) + 1
            self.last_error = msg
        return error_result(batch_id, self.instance_id, msg, queue_ms)

    def refuse(self, batch_id: str, reason: str) -> EngineBatchResult:
        """An error result for a request the node could not even queue (e.g. queue full)."""
        return self._failed(batch_id, "refused", reason, 0.0)

    def status(self) -> WorkerStatus:
        with self._lock:
            return WorkerStatus(
                instance_id=self.instance_id, tier=self.tier, ready=self.profile is not None,
                max_batch=self.max_batch, profile=self.profile, model_config=self._config_json,
                model=self.model, heartbeat_period_s=self.heartbeat_period_s,
                batches_served=self.batches_served, robots_served=self.robots_served,
                errors=self.errors, last_error=self.last_error, queue_depth=self.queue_depth)


def build_engine(preset: str, checkpoint: str, seed: int, device: str, log=None, language: bool = False):
    """The worker's engine: the LeRobot checkpoint when one is named, else the preset's random
    weights from `seed`; returns (engine, a description of the model for its status)."""
    from physai_ros.engine.engine import Pi0Engine

    engine = Pi0Engine.from_preset_or_checkpoint(preset, checkpoint or None, device=device, seed=seed,
                                                 language=language)
    if checkpoint and log is not None:
        log(engine.checkpoint_format.summary())
    return engine, (checkpoint if checkpoint else f"{preset} (seed {seed})")
