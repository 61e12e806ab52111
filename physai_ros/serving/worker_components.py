"""The VLM components a factory plan places on an engine worker (issue 24, docs/factory.md): the
questions the policy server forwards are answered by the served model's backbone on the worker's
engine (pipeline.vla_backend, own prefill: System 1's prefix KV cache lives in another process).

No ROS: nodes/engine_worker adapts it (topics protocol.topics.component_request_topic /
component_result_topic, signed both ways). answer() never raises: a question that cannot be
answered comes back with the reason, the next one is answered.
"""
from __future__ import annotations

import time
from typing import Any, Sequence

from physai_ros.pipeline.vla_backend import VLABackboneBackend
from physai_ros.protocol.component import BACKEND_ERROR, ComponentAnswerData, ComponentRequest

from .action_runner import ActionModelRunner
from .config import load_fleet
from .factory import model_io


class WorkerComponents:
    def __init__(self, engine: Any, fleet_file: str, instance_id: str):
        cfg = load_fleet(fleet_file or None)
        tokenizer, normalizer, style = model_io(cfg, engine)
        runner = ActionModelRunner(engine.config, tokenizer, normalizer, style)
        self.backend = VLABackboneBackend(engine, runner, name=f"vla_backbone@{instance_id}")
        self.answered = 0
        self.errors = 0

    def answer(self, reqs: Sequence[ComponentRequest]) -> list[ComponentAnswerData]:
        started = time.monotonic()
        try:
            raw = self.backend.answer([r.query for r in reqs])
            if len(raw) != len(reqs):
                raise RuntimeError(f"{len(raw)} answers for {len(reqs)} queries")
        except Exception as e:  # the backend failed as a whole: each question gets the reason
            raw = [None] * len(reqs)
            why = f"{BACKEND_ERROR}: {type(e).__name__}: {e}"
        out = []
        for r, a in zip(reqs, raw):
            err = why if a is None else (f"{BACKEND_ERROR}: {a.error}" if a.error else "")
            meta = getattr(a, "meta", None) or {}
            name = self.backend.name + (f"/{meta['path']}" if isinstance(meta.get("path"), str) else "")
            self.errors += bool(err)
            self.answered += not err
            out.append(ComponentAnswerData(
                robot_id=r.robot_id, query_id=r.query_id, component=r.component, text="" if err else a.text,
                error=err, tokens=0 if a is None else int(a.tokens or 0),
                latency_ms=(time.monotonic() - started) * 1e3 if a is None else float(a.latency_ms or 0.0),
                queue_ms=0.0, backend=name, stamp=time.time()))
        return out

    def close(self) -> None:
        self.backend.close()
