"""The VLM components a factory plan places on an engine worker (docs/factory.md): the
questions the policy server forwards are answered by the served model's backbone on the worker's
engine (pipeline.vla_backend, own prefill: System 1's prefix KV cache lives in another process).

No ROS: nodes/engine_worker adapts it (topics protocol.topics.component_request_topic /
component_result_topic, signed both ways). answer() never raises: a question that cannot be
answered comes back with the reason, the next one is answered.
"""
from __future__ import annotations

import time
from dataclasses import replace
from typing import Any, Sequence

from physai_ros.config.fleet import load_fleet
from physai_ros.pipeline.vla_backend import VLABackboneBackend
from physai_ros.protocol.component import ComponentAnswerData, ComponentRequest
from physai_ros.serving.action_runner import ActionModelRunner
from physai_ros.serving.pipeline.backends import answer_data, ask
from physai_ros.serving.startup.engine_builder import model_io


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
        raw = ask(self.backend, [r.query for r in reqs])
        # A call that failed as a whole reports the time it took.
        raw = [replace(a, latency_ms=(time.monotonic() - started) * 1e3) if a.meta.get("call_failed") else a
               for a in raw]
        out = [answer_data(r, a, self.backend, queue_ms=0.0) for r, a in zip(reqs, raw)]
        failed = sum(bool(a.error) for a in out)
        self.errors += failed
        self.answered += len(out) - failed
        return out

    def close(self) -> None:
        self.backend.close()
