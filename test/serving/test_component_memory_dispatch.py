"""Kairos's memory-aware time-slot dispatcher in the component service
(serving.pipeline.memory_dispatch): the pure admission rules, then the service with scripted
backends that say each question's K/V (batches bounded by the budget, every question answered
once; memory placement sending questions to a free instance), the real VLA backbone's estimate
against the K/V its decoding holds, and the fleet.yaml keys."""
import threading

import pytest

from physai_ros.client.robot_client import RobotClientCore
from physai_ros.config.fleet import parse_fleet
from physai_ros.config_fields import FleetConfigError
from physai_ros.pipeline.backend import KVDemand
from physai_ros.pipeline.vla_backend import VLABackboneBackend
from physai_ros.serving.pipeline.memory_dispatch import ComponentMemoryDispatch, demand_of, gated_instances
from physai_ros.serving.pipeline.service import ComponentService, ComponentServiceSettings
from physai_ros.serving.startup.engine_builder import build_core
from physai_lab.scripted_backend import ScriptedBackend

from component_helpers import Collector, fleet_doc, request

MB = 1 << 20
COMPONENTS = ("safety", "monitor", "system2")


def test_a_question_is_admitted_only_where_every_slot_fits():
    d = ComponentMemoryDispatch(["a"], 3 * MB)
    one = KVDemand(MB, MB)  # 1 MiB at once, 2 MiB by its last token
    first = d.admit("t/safety", one, "a", {"a"}, 10.0)
    assert first.instance == "a" and first.ticket is not None and not first.over_budget
    # A second one's last slot would make 4 MiB: it waits, and is counted.
    assert d.admit("t/monitor", one, "a", {"a"}, 10.0) == d.admit("t/monitor", one, "a", {"a"}, 10.0)
    assert d.admit("t/monitor", one, "a", {"a"}, 10.0).instance is None and d.waited == 3
    d.complete(first.ticket, 10.2)
    assert d.admit("t/monitor", one, "a", {"a"}, 10.2).instance == "a"


def test_too_big_for_an_empty_instance_runs_alone_rather_than_never():
    d = ComponentMemoryDispatch(["a"], MB)
    big = d.admit("t/system2", KVDemand(2 * MB, 0), "a", {"a"}, 0.0)
    assert big.instance == "a" and big.over_budget and d.over_budget == 1
    assert d.diagnostics()["memory.peak_mb.a"] == 2.0  # the overflow is shown, not hidden
    assert d.admit("t/safety", KVDemand(1, 0), "a", {"a"}, 0.0).instance is None  # it has the instance
    d.complete(big.ticket, 0.1)
    assert d.admit("t/safety", KVDemand(1, 0), "a", {"a"}, 0.1).instance == "a"


def test_the_lowest_expected_peak_wins_and_a_tie_goes_to_the_route():
    d = ComponentMemoryDispatch(["a", "b"], 10 * MB)
    q = KVDemand(MB, 0)
    assert d.admit("t/safety", q, "a", {"a", "b"}, 0.0, route="b").instance == "b"  # tie: the route's; nothing committed
    assert d.admit("t/safety", q, "b", {"a", "b"}, 0.0, route="b").instance == "b"
    # b now holds 1 MiB: a has the lower peak, whatever the route says.
    placed = d.admit("t/safety", q, "a", {"a", "b"}, 0.0, route="b")
    assert placed.instance == "a" and d.off_route == 1 and d.admitted == 2


def test_an_agents_measured_time_sets_how_long_its_memory_is_held():
    d = ComponentMemoryDispatch(["a"], MB, default_expected_s=0.5)
    assert d.expected_s("t/system2") == 0.5
    for _ in range(3):
        d.observed("t/system2", 2.0)
    assert d.expected_s("t/system2") == pytest.approx(2.0)
    assert d.demand("t/system2", KVDemand(10, 40)).decode_bytes_per_s == pytest.approx(20.0)


def test_only_backends_that_say_their_memory_are_gated():
    shared, other, text_only = Sized(), Sized(), ScriptedBackend()
    got = gated_instances({"vla": shared, "vla@engine_0": shared, "vla@engine_1": other, "hf:x@cpu": text_only}, "vla")
    assert got == {"vla": "vla@engine_0", "vla@engine_0": "vla@engine_0", "vla@engine_1": "vla@engine_1"}


def test_a_backend_that_cannot_size_a_query_still_gets_it_served():
    class Broken:
        def kv_demand(self, q):
            raise RuntimeError("no tokenizer")
    assert demand_of(Broken(), object()) == KVDemand(0, 0)


class Sized(ScriptedBackend):
    """A scripted backend whose every question holds `mb` MiB, recording its batches; `hold`
    blocks answering until set."""

    name = "sized"

    def __init__(self, mb: float = 1.0):
        super().__init__()
        self.mb, self.batches, self.hold = mb, [], threading.Event()
        self.hold.set()
        for r in ("r0", "r1"):
            for c in COMPONENTS:
                self.default(r, c, "safe")

    def kv_demand(self, q):
        return KVDemand(int(self.mb * MB), 0)

    def answer(self, queries):
        assert self.hold.wait(20)
        self.batches.append([(q.robot_id, q.component) for q in queries])
        return super().answer(queries)


@pytest.fixture(scope="module")
def served():
    fleet = parse_fleet(fleet_doc())
    core = build_core(fleet)
    for rid in ("r0", "r1"):
        assert core.register(RobotClientCore(fleet.robot(rid)).registration()).accepted
    return fleet, core


def _six_questions(svc):
    ids = {}
    for n, (r, c) in enumerate((r, c) for r in ("r0", "r1") for c in COMPONENTS):
        views = 2 if r == "r1" else 1
        assert svc.submit(request(r, c, n + 1, views=views)) is None
        ids[n + 1] = (r, c)
    return ids


def _answers(svc, got, n):
    answers = got.wait(n)
    assert svc.close(5.0)
    return answers


def test_batches_are_bounded_by_the_budget_and_every_question_is_answered_once(served):
    fleet, core = served
    backend, got = Sized(mb=1.0), Collector()
    svc = ComponentService(fleet, core, got, backends={"vla": backend}, start=False,
                           settings=ComponentServiceSettings(kv_budget_mb=2.5, max_batch=8))
    ids = _six_questions(svc)
    svc.start()
    answers = _answers(svc, got, 6)
    assert sorted(a.query_id for a in answers) == sorted(ids) and all(a.ok for a in answers)
    assert [len(b) for b in backend.batches] == [2, 2, 2]  # 8 would fit the batch, 2 the memory
    d = svc.diagnostics()
    assert d["memory.admitted"] == 6 and d["memory.waited_for_memory"] > 0 and d["memory.over_budget"] == 0
    assert 0 < d["memory.peak_mb.vla"] <= 2.5 and d["placement"] == "route"


def test_without_a_budget_the_service_batches_as_before(served):
    fleet, core = served
    backend, got = Sized(mb=1.0), Collector()
    svc = ComponentService(fleet, core, got, backends={"vla": backend}, start=False,
                           settings=ComponentServiceSettings(max_batch=8))
    _six_questions(svc)
    svc.start()
    _answers(svc, got, 6)
    assert [len(b) for b in backend.batches] == [6] and "memory.admitted" not in svc.diagnostics()


def test_memory_placement_sends_questions_to_the_free_instance(served):
    """Two instances; the first blocks in its first batch: with memory placement the other
    answers the rest (route placement would leave them all to the first)."""
    fleet, core = served
    first, second, got = Sized(mb=1.0), Sized(mb=1.0), Collector()
    first.hold.clear()
    svc = ComponentService(fleet, core, got, backends={"vla": first, "vla@engine_1": second}, start=False,
                           settings=ComponentServiceSettings(kv_budget_mb=1.5, placement="memory", max_batch=8))
    ids = _six_questions(svc)
    svc.start()
    got.wait(5)
    first.hold.set()
    answers = _answers(svc, got, 6)
    assert sorted(a.query_id for a in answers) == sorted(ids)
    assert [len(b) for b in first.batches] == [1] and [len(b) for b in second.batches] == [1] * 5
    d = svc.diagnostics()
    assert d["memory.off_route"] == 5 and d["placement"] == "memory"
    assert {a.backend for a in answers} == {"sized"} and svc.batches["vla@engine_1"] == 5


def test_the_backbones_estimate_is_the_memory_its_request_holds(served):
    """prompt_bytes is exactly the request's K/V once its question is read (the valid prefix of
    its views and prompt, then the question's tokens); with the answer's tokens it bounds what
    the request holds after decoding."""
    fleet, core = served
    backend = VLABackboneBackend.from_core(core, attach=False)
    cfg = backend.config
    per_token = 2 * cfg.vlm.depth * cfg.vlm.num_kv_heads * cfg.vlm.head_dim * 4  # float32
    for views, robot in ((1, "r0"), (2, "r1")):
        q = request(robot, "system2", 1, views=views, question="next step? task: pick the cube", max_tokens=6).query
        want = backend.kv_demand(q)
        job = backend._job(0, q)
        backend._run([job])
        assert not job.error, job.error
        r = job.request
        assert r.n_prefix == views * cfg.vision.num_tokens + int(backend.runner.tokens(q.task_prompt, q.state).mask.sum())
        assert want.prompt_bytes == (r.n_prefix + len(r.question)) * per_token
        assert want.answer_bytes == q.max_tokens * per_token
        assert r.kv_bytes() <= want.prompt_bytes + want.answer_bytes


@pytest.mark.parametrize("components, error", [
    ({"kv_budget_mb": 0}, "server.components.kv_budget_mb: expected a finite number > 0"),
    ({"placement": "anywhere"}, "server.components.placement"),
])
def test_fleet_yaml_refuses_a_bad_budget_or_placement(components, error):
    doc = fleet_doc()
    doc["server"]["components"] = components
    with pytest.raises(FleetConfigError, match=error):
        parse_fleet(doc)


def test_fleet_yaml_budget_and_placement_reach_the_config():
    doc = fleet_doc()
    doc["server"]["components"] = {"kv_budget_mb": 64, "placement": "memory"}
    c = parse_fleet(doc).server.components
    assert (c.kv_budget_mb, c.placement) == (64.0, "memory")
