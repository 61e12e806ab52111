"""serving.pipeline.on_worker: an engine worker answering the pipeline components' questions on
its own engine (no ROS; the real-process run is test/fleet/test_factory_fleet_ros.py). Tiny random
preset: the answers are the model's (garbage text), what is checked is the contract."""
from __future__ import annotations

import yaml

from physai_ros.engine.engine import Pi0Engine
from physai_ros.engine.types import Pi0Config
from physai_ros.serving.pipeline.on_worker import WorkerComponents

from component_helpers import fleet_doc, request


def _worker(tmp_path):
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(fleet_doc()))
    engine = Pi0Engine(Pi0Config.preset("tiny"), device="cpu", seed=0, language=True)
    return WorkerComponents(engine, str(path), "gpu_b")


def test_each_question_gets_one_answer_with_its_ids_and_the_workers_backend_name(tmp_path):
    w = _worker(tmp_path)
    reqs = [request("r0", "safety", 7), request("r1", "monitor", 8, views=2)]
    out = w.answer(reqs)
    assert [(a.robot_id, a.query_id, a.component) for a in out] == [("r0", 7, "safety"), ("r1", 8, "monitor")]
    assert all(a.backend.startswith("vla_backbone@gpu_b/") and a.error == "" for a in out), out
    assert w.answered == 2 and w.errors == 0


def test_a_question_the_backbone_cannot_read_comes_back_with_the_reason(tmp_path):
    w = _worker(tmp_path)
    bad = request("r0", "safety", 9, state="x")  # a state that is no array
    out = w.answer([bad])
    assert len(out) == 1 and out[0].query_id == 9 and out[0].error.startswith("backend_error: ")
    assert w.errors == 1
    assert w.answer([request("r0", "safety", 10)])[0].error == ""  # the next one is answered
