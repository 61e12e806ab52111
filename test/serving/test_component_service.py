"""The policy server's component service without ROS (serving.pipeline.service):
validation refusals with reasons and counts, supersede, busy, batching, a bad query or a failing
backend costing nobody else, shutdown; a scripted backend, then the tiny preset's own VLA
backbone through the real serving core."""
import dataclasses
import threading
import time

import pytest

from physai_ros.client.robot_client import RobotClientCore
from physai_ros.config.fleet import parse_fleet
from physai_ros.config_fields import FleetConfigError
from physai_lab.scripted_backend import Scripted, ScriptedBackend
from physai_ros.protocol.component import ComponentRequest
from physai_ros.serving.pipeline.backends import check_component_models, distinct, load_backends, plan_routes
from physai_ros.serving.pipeline.service import ComponentService, ComponentServiceSettings
from physai_ros.serving.startup.engine_builder import build_core
from physai_ros.serving.startup.preflight import ServerFilesError, check_server_files

from component_helpers import PROMPT, Collector, fleet_doc, request


@pytest.fixture(scope="module")
def served():
    """The tiny fleet's config and serving core (language stream on for the vla components), r0
    (one view), r1 (two views, both on `inspect`) and r2 (task `plain`, no pipeline) registered."""
    fleet = parse_fleet(fleet_doc())
    core = build_core(fleet)
    for rid in ("r0", "r1", "r2"):
        assert core.register(RobotClientCore(fleet.robot(rid)).registration()).accepted
    return fleet, core


class Recording(ScriptedBackend):
    """A scripted backend that records its batch sizes and may be made to block or raise."""

    name = "recording"

    def __init__(self):
        super().__init__()
        self.batches, self.gate, self.fail_next = [], threading.Event(), False
        self.gate.set()

    def answer(self, queries):
        self.gate.wait(10)
        self.batches.append(len(queries))
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("device lost")
        return super().answer(queries)


def _service(served, backend, **settings):
    fleet, core = served
    got = Collector()
    svc = ComponentService(fleet, core, got, backends={"vla": backend},
                           settings=ComponentServiceSettings(**settings), start=False)
    return svc, got


def test_routes_every_vlm_component_of_a_pipeline_task_to_one_backend(served):
    fleet, _ = served
    assert plan_routes(fleet) == {("inspect", c): "vla" for c in ("system2", "safety", "monitor")}


def test_answers_carry_the_query_id_text_and_backend(served):
    backend = ScriptedBackend().default("r0", "safety", "safe").default("r1", "monitor", "ongoing")
    svc, got = _service(served, backend)
    svc.start()
    try:
        assert svc.submit(request("r0", "safety", 7)) is None
        assert svc.submit(request("r1", "monitor", 3, views=2, question="ongoing, done, or failed?")) is None
        got.wait(2)
        (a,), (b,) = got.by_id(7), got.by_id(3, "r1")
        assert (a.text, a.error, a.component, a.backend) == ("safe", "", "safety", "scripted")
        assert (b.text, b.ok) == ("ongoing", True) and a.queue_ms >= 0
        assert backend.asked[0].task_prompt == PROMPT and backend.asked[0].images[0].shape == (32, 32, 3)
        d = svc.diagnostics()
        assert (d["asked"], d["answered"], d["refused"]) == (2, 2, 0)
        assert d["safety.latency_ms_p99"] >= d["safety.latency_ms_p50"] >= 0
    finally:
        assert svc.close(5.0)
    assert backend.closed


@pytest.mark.parametrize("req, reason", [
    (request("ghost"), "unknown_robot"),
    (request("r0", task_id="plain"), "wrong_task"),
    (request("r2", task_id="plain"), "unknown_component"),  # a task without a pipeline
    (request("r0", "system1"), "unknown_component"),
    (request("r0", "planner"), "unknown_component"),
    (request("r0", question="  "), "bad_question"),
    (request("r0", question="x" * 2000), "bad_question"),
    (request("r0", question="safe?\x07"), "bad_question"),
    (request("r0", prompt="a\x00b"), "bad_question"),
    (request("r0", max_tokens=0), "max_tokens"),
    (request("r0", max_tokens=100_000), "max_tokens"),
    (request("r0", views=2), "bad_images"),
    (request("r1", views=1), "bad_images"),
    (request("r0", hw=(16, 32)), "bad_images"),
    (request("r0", state=[float("nan")] * 5), "bad_state"),
    (request("r0", state=[0.0] * 3), "bad_state"),
])
def test_a_bad_query_is_refused_with_its_reason_and_counted(served, req, reason):
    backend = ScriptedBackend().default(req.robot_id, req.component, "safe")
    svc, got = _service(served, backend)
    refused = svc.submit(req)
    assert refused is not None and refused.error.startswith(f"{reason}: ") and refused.reason == reason
    assert got.answers == [refused]  # answered once, through on_answers
    assert svc.diagnostics()[f"refused.{reason}"] == 1 and svc.queued() == 0
    svc.close(1.0)
    assert backend.asked == []


def test_a_request_of_the_wrong_types_is_refused_not_raised(served):
    svc, got = _service(served, ScriptedBackend())
    broken = ComponentRequest(1, "inspect", request().query.__class__("r0", "safety", None, None, None))
    assert svc.submit(broken).reason == "bad_question"
    svc.close(1.0)


def test_a_newer_query_supersedes_the_queued_one_and_a_full_queue_is_busy(served):
    backend = Recording()
    for c in ("safety", "monitor", "system2"):
        backend.default("r0", c, "safe").default("r1", c, "safe")
    svc, got = _service(served, backend, max_queue=2)
    assert svc.submit(request("r0", "safety", 1)) is None
    assert svc.submit(request("r0", "safety", 2)) is None  # replaces 1
    (old,) = got.by_id(1)
    assert old.reason == "superseded" and "query 2" in old.error
    assert svc.submit(request("r0", "monitor", 3)) is None
    busy = svc.submit(request("r1", "system2", 4, views=2))
    assert busy.reason == "busy" and svc.queued() == 2
    # A newer query of a queued (robot, component) still gets in: it replaces one.
    assert svc.submit(request("r0", "monitor", 5)) is None and got.by_id(3)[0].reason == "superseded"
    svc.start()
    got.wait(5)
    assert backend.batches == [2]  # the two waiting queries in one batch
    assert {a.query_id for a in got.answers if a.ok} == {2, 5}
    d = svc.diagnostics()
    assert (d["refused.superseded"], d["refused.busy"], d["answered"], d["safety.asked"]) == (2, 1, 2, 2)
    svc.close(5.0)


def test_batches_are_bounded_by_max_batch(served):
    backend = Recording()
    for r in ("r0", "r1"):
        for c in ("safety", "monitor", "system2"):
            backend.default(r, c, "ok")
    svc, got = _service(served, backend, max_batch=4)
    n = 0
    for r, views in (("r0", 1), ("r1", 2)):
        for c in ("safety", "monitor", "system2"):
            n += 1
            assert svc.submit(request(r, c, n, views=views)) is None
    svc.start()
    got.wait(6)
    assert backend.batches == [4, 2] and all(a.ok for a in got.answers)
    svc.close(5.0)


def test_one_bad_query_or_a_failing_backend_costs_nobody_else(served):
    backend = Recording()
    backend.default("r0", "safety", "safe")
    backend.respond_with("r1", "safety", lambda q: Scripted(error="ValueError: cannot read view 1"))
    svc, got = _service(served, backend)
    assert svc.submit(request("r0", "safety", 1)) is None
    assert svc.submit(request("r1", "safety", 1, views=2)) is None
    svc.start()
    got.wait(2)
    assert got.by_id(1)[0].text == "safe"
    bad = got.by_id(1, "r1")[0]
    assert bad.reason == "backend_error" and "cannot read view 1" in bad.error and bad.text == ""
    # The whole backend call raising: that batch's queries get the reason, the next batch works.
    backend.fail_next = True
    assert svc.submit(request("r0", "safety", 2)) is None
    got.wait(3)
    assert got.by_id(2)[0].error == "backend_error: RuntimeError: device lost"
    assert svc.submit(request("r0", "safety", 3)) is None
    got.wait(4)
    assert got.by_id(3)[0].text == "safe"
    assert svc.diagnostics()["backend_errors"] == 2
    svc.close(5.0)


def test_a_failing_on_answers_does_not_stop_the_worker(served):
    backend = ScriptedBackend().default("r0", "safety", "safe")
    calls = []

    def flaky(answers):
        calls.append(answers)
        if len(calls) == 1:
            raise RuntimeError("publisher gone")

    fleet, core = served
    svc = ComponentService(fleet, core, flaky, backends={"vla": backend})
    svc.submit(request("r0", "safety", 1))
    end = time.monotonic() + 10
    while len(calls) < 1 and time.monotonic() < end:
        time.sleep(0.01)
    svc.submit(request("r0", "safety", 2))
    while len(calls) < 2 and time.monotonic() < end:
        time.sleep(0.01)
    assert calls[1][0].query_id == 2 and svc.diagnostics()["delivery_errors"] == 1
    svc.close(5.0)


def test_close_stops_the_worker_and_answers_what_waits(served):
    backend = Recording()
    backend.default("r0", "safety", "safe").default("r0", "monitor", "ongoing")
    backend.gate.clear()  # the first batch blocks inside the backend
    svc, got = _service(served, backend)
    svc.start()
    assert svc.submit(request("r0", "safety", 1)) is None
    end = time.monotonic() + 10
    while svc.queued() and time.monotonic() < end:  # taken by the worker, blocked in answer()
        time.sleep(0.01)
    assert svc.submit(request("r0", "monitor", 2)) is None
    t0 = time.monotonic()
    assert svc.close(0.2) is False  # still inside the batch: not waited for past the timeout
    assert time.monotonic() - t0 < 2.0
    assert got.by_id(2)[0].reason == "closed"
    assert svc.submit(request("r0", "monitor", 3)).reason == "closed"
    backend.gate.set()
    (worker,) = svc._threads  # one backend: one worker thread
    worker.join(5)
    assert not worker.is_alive() and got.by_id(1)[0].text == "safe"


def test_every_backend_key_must_be_given(served):
    fleet, core = served
    with pytest.raises(ValueError, match="no backend for vla"):
        ComponentService(fleet, core, print, backends={}, start=False)


def test_a_missing_hf_directory_is_named_by_its_key_path(tmp_path):
    doc = fleet_doc()
    doc["tasks"]["inspect"]["components"]["safety"]["model"] = {"hf": "models/nope", "device": "cpu"}
    path = tmp_path / "fleet.yaml"
    import yaml
    path.write_text(yaml.safe_dump(doc))
    from physai_ros.config.fleet import load_fleet
    fleet = load_fleet(path)
    assert plan_routes(fleet)[("inspect", "safety")] == f"hf:{tmp_path / 'models/nope'}@cpu"
    with pytest.raises(FleetConfigError, match=r"tasks\.inspect\.components\.safety\.model\.hf: 'models/nope'"):
        check_component_models(fleet)
    with pytest.raises(ServerFilesError, match=r"tasks\.inspect\.components\.safety\.model\.hf"):
        check_server_files(fleet)
    with pytest.raises(FleetConfigError, match="safety.model.hf"):
        load_backends(fleet, core=None)


def test_the_tiny_vla_backbone_answers_through_the_service(served):
    """model: vla -> the served model's own backbone (own prefill here: r0 ran no System 1 round);
    a query the backbone cannot read (too many question tokens) costs the batch's other nothing."""
    fleet, core = served
    got = Collector()
    svc = ComponentService(fleet, core, got, start=False)
    try:
        assert type(svc.backends["vla"]).__name__ == "VLABackboneBackend"
        assert svc.submit(request("r0", "safety", 1, max_tokens=5)) is None
        assert svc.submit(request("r1", "monitor", 1, views=2, max_tokens=3, question="word " * 200)) is None
        svc.start()
        got.wait(2, timeout=60)
        good, bad = got.by_id(1)[0], got.by_id(1, "r1")[0]
        assert good.ok and 1 <= good.tokens <= 5 and good.backend == "vla_backbone/own", good
        assert bad.reason == "backend_error" and "question" in bad.error
        assert svc.diagnostics()["backend.vla"].startswith("vla_backbone, 1 batches")
    finally:
        assert svc.close(10.0)


def test_hf_components_load_once_per_directory_and_device_and_answer(tmp_path):
    """model: {hf: DIR} relative to fleet.yaml: one HFVisionLanguageBackend for every task naming
    the same (DIR, device), beside the vla backend; both answer through one service."""
    import yaml

    from physai_ros.pipeline.hf_tiny import write_tiny_vlm
    from physai_ros.config.fleet import load_fleet

    write_tiny_vlm("smolvlm", tmp_path / "models" / "tiny-smolvlm", seed=0)
    doc = fleet_doc()
    hf = {"hf": "models/tiny-smolvlm", "device": "cpu"}
    doc["tasks"]["inspect"]["components"]["safety"]["model"] = hf
    doc["tasks"]["plain"]["components"] = {"safety": dict(doc["tasks"]["inspect"]["components"]["safety"])}
    (tmp_path / "fleet.yaml").write_text(yaml.safe_dump(doc))
    fleet = load_fleet(tmp_path / "fleet.yaml")
    key = f"hf:{tmp_path / 'models' / 'tiny-smolvlm'}@cpu"
    assert plan_routes(fleet)[("inspect", "safety")] == plan_routes(fleet)[("plain", "safety")] == key
    core = build_core(fleet)
    for rid in ("r0", "r2"):
        assert core.register(RobotClientCore(fleet.robot(rid)).registration()).accepted
    got = Collector()
    svc = ComponentService(fleet, core, got, start=False)
    try:
        assert sorted(svc.backends) == sorted([key, "vla"])
        assert svc.submit(request("r0", "safety", 1, max_tokens=3)) is None
        assert svc.submit(request("r2", "safety", 1, task_id="plain", max_tokens=3)) is None
        assert svc.submit(request("r0", "monitor", 2, max_tokens=3)) is None
        svc.start()
        got.wait(3, timeout=60)
        hf_answers = [got.by_id(1)[0], got.by_id(1, "r2")[0]]
        assert all(a.ok and a.backend == key[:-len("@cpu")] and 1 <= a.tokens <= 3 for a in hf_answers), hf_answers
        assert got.by_id(2)[0].backend.startswith("vla_backbone/")
        assert svc.batches[key] == 1  # both robots' safety questions in one generate()
    finally:
        assert svc.close(10.0)


class Ordered(ScriptedBackend):
    name = "ordered"

    def __init__(self):
        super().__init__()
        self.batches = []

    def answer(self, queries):
        self.batches.append([(q.robot_id, q.component) for q in queries])
        return super().answer(queries)


def _answer_step_chains(order, steps: int = 40) -> None:
    """Answered history as the server sees it, robot r0's pipeline steps one after another: the
    planner (1.2 s), then safety checks (50 ms) and monitor questions (0.3 s, "ongoing" then
    "done", which ends the step). Remaining latency to the step's end: planner ~3.3 s, safety
    ~1.0-2.0 s, monitor ~0.3-1.3 s."""
    for k in range(steps):
        t, j = 10.0 * k, 0.01 * (k % 5)
        order.on_answered("r0", "inspect", "system2", t, t + 1.2 + j, "go to the red cube")
        order.on_answered("r0", "inspect", "safety", t + 1.3, t + 1.35 + j, "safe")
        order.on_answered("r0", "inspect", "monitor", t + 2.0, t + 2.3 + j, "ongoing")
        order.on_answered("r0", "inspect", "safety", t + 2.3, t + 2.35 + j, "safe")
        order.on_answered("r0", "inspect", "monitor", t + 3.0, t + 3.3 + j, "done")


@pytest.mark.parametrize("order", ["kairos", "shortest", "fifo"])
def test_agents_are_served_by_their_remaining_work_in_the_pipelines_real_chains(served, order):
    """Kairos §5.1/§5.2 on the component queue, with the agents' remaining latencies learnt from
    the pipeline steps they were part of (serving.pipeline.workflows): the monitor, whose verdict
    ends a step, goes before the safety checks, and those before the planner, whose question
    carries the whole step; within an agent the earlier application start (the query's stamp)
    goes first. Shortest-first ranks by each agent's own answer time instead (safety, monitor,
    planner); FIFO keeps arrival order."""
    backend = Ordered()
    for r in ("r0", "r1"):
        for c in ("safety", "monitor", "system2"):
            backend.default(r, c, "ok")
    svc, got = _service(served, backend, max_batch=2, order=order)
    _answer_step_chains(svc.order)
    svc.order.refresh()
    if order == "kairos":
        assert svc.order.priority.order == ("inspect/monitor", "inspect/safety", "inspect/system2")
        assert svc.diagnostics()["steps_measured"] == 40
    arrivals = [("r0", "system2", 5.0), ("r1", "system2", 4.0), ("r0", "monitor", 3.0), ("r1", "safety", 2.0),
                ("r0", "safety", 1.0)]
    for n, (r, c, stamp) in enumerate(arrivals, 1):
        req = dataclasses.replace(request(r, c, n, views=2 if r == "r1" else 1), stamp=stamp)
        assert svc.submit(req) is None
    svc.start()
    got.wait(5)
    served_order = [x for b in backend.batches for x in b]
    expected = {
        "kairos": [("r0", "monitor"), ("r0", "safety"), ("r1", "safety"), ("r1", "system2"), ("r0", "system2")],
        "shortest": [("r0", "safety"), ("r1", "safety"), ("r0", "monitor"), ("r1", "system2"), ("r0", "system2")],
        "fifo": [(r, c) for r, c, _ in arrivals]}
    assert served_order == expected[order]
    assert svc.diagnostics()["order"] == order
    svc.close(5.0)


def test_a_released_robot_is_forgotten_its_waiting_questions_closed_and_its_prefix_dropped(served):
    class Forgetting(ScriptedBackend):
        name = "forgetting"

        def __init__(self):
            super().__init__()
            self.forgotten = []

        def forget(self, robot_id):
            self.forgotten.append(robot_id)

    backend = Forgetting()
    svc, got = _service(served, backend)
    assert svc.submit(request("r0", "safety", 1)) is None
    assert svc.submit(request("r1", "monitor", 2, views=2)) is None
    svc.forget("r0")
    closed = got.by_id(1)
    assert len(closed) == 1 and closed[0].reason == "closed" and "released" in closed[0].error
    assert backend.forgotten == ["r0"] and svc.diagnostics()["queued"] == 1  # r1's question still waits
    svc.close(5.0)


class CountingThreads(ScriptedBackend):
    """Records the intra-op thread count each batch is answered with."""

    def __init__(self):
        super().__init__()
        self.threads = []

    def answer(self, queries):
        import torch

        self.threads.append(torch.get_num_threads())
        return super().answer(queries)


@pytest.mark.parametrize("torch_threads", [0, 1])
def test_component_threads_pin_to_one_only_beside_one_team_engines(served, torch_threads):
    """With server.torch_threads N the component threads run one intra-op thread (a second
    OpenMP team would slow System 1); by default torch's count, as the engines: pinning them
    there made the engines' serving threads single-threaded too (serving.compute_threads)."""
    import torch

    fleet, core = served
    fleet = dataclasses.replace(fleet, server=dataclasses.replace(fleet.server, torch_threads=torch_threads))
    before = torch.get_num_threads()
    torch.set_num_threads(2)  # the process-wide value a thread that sets none takes (conftest: OMP_NUM_THREADS=1)
    backend = CountingThreads().default("r0", "safety", "safe")
    got = Collector()
    svc = ComponentService(fleet, core, got, backends={"vla": backend})
    try:
        assert svc.submit(request("r0", "safety", 1)) is None
        got.wait(1)
    finally:
        assert svc.close(5.0)
        torch.set_num_threads(before)
    assert backend.threads == [1 if torch_threads else 2]


def test_a_vla_question_the_backbone_cannot_read_fails_at_start_up_by_key(served):
    """A component's prompt is checked with {task} filled by its task's prompt, encoded as the
    backbone encodes it: too many tokens is a start-up error naming the key, not an error on
    every query once robots run."""
    _, core = served
    ok = parse_fleet(fleet_doc())
    backends = load_backends(ok, core)  # "next step? task: {task}" with the tiny task's prompt fits
    for b in distinct(backends):
        b.close()
    doc = fleet_doc()
    doc["tasks"]["inspect"]["prompt"] = " ".join(["place the red cube then the blue cube"] * 6)
    with pytest.raises(FleetConfigError, match=r"tasks\.inspect\.components\.system2\.prompt: asked as "
                                               r"'next step\? task: place the red.*tokens, at most 64"):
        load_backends(parse_fleet(doc), core)
