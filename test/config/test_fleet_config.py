"""fleet.yaml loading: the embedded default is valid, and each kind of mistake names its key."""
import copy

import pytest
import torch
import yaml

from physai_ros.config.fleet import (FleetConfigError, default_fleet_path, load_fleet,
                                     parse_fleet, resolve_package_path, tokenizer_path)


@pytest.fixture(scope="module")
def doc():
    return yaml.safe_load(default_fleet_path().read_text())


def test_default_fleet_loads_with_four_robots_and_assets():
    cfg = load_fleet()
    assert len(cfg.robots) == 4
    # The demo default is the trained sim policy shipped in the package.
    assert cfg.server.scheduler == "fifo" and cfg.server.model.preset is None
    assert cfg.server.model.checkpoint == "package://physai_ros/assets/policy/sim_pi0"
    assert (resolve_package_path(cfg.server.model.checkpoint) / "model.safetensors").is_file()
    assert {r.task.prompt for r in cfg.robots} == {t.prompt for t in cfg.tasks.values()}
    assert tokenizer_path(cfg).is_file()
    assert [r.namespace for r in cfg.robots] == ["robot_0", "robot_1", "robot_2", "robot_3"]


def test_scheduler_parameters_reach_the_scheduler(doc):
    from physai_ros.serving.startup.engine_builder import build_core

    sched = {"name": "wait_ratio", "buckets": 7, "aging_interval": 3, "stale_after_s": 0.2,
             "refresh_timeout_s": 0.1, "task_ttl_s": 60, "count_first_wait": True}
    cfg = parse_fleet(_mut(doc, lambda d: d["server"].update(scheduler=sched, profile=False)))
    assert cfg.server.scheduler == "wait_ratio" and cfg.server.profile is None
    routed = build_core(cfg).scheduler
    routed.set_routes({"r0": "engine_1"}, 0.0)  # a factory plan's second queue: the same settings
    for s in (routed.shared, routed.lanes["engine_1"]):
        assert (s.name, s.buckets, s.aging_interval, s.stale_after_s, s.refresh_timeout_s, s.task_ttl_s,
                s.count_first_wait) == ("wait_ratio", 7, 3, 0.2, 0.1, 60.0, True)
    # The plain-name form still works and leaves the scheduler's own defaults.
    assert parse_fleet(_mut(doc, lambda d: d["server"].update(scheduler="autellix"))).server.scheduler_params == {}
    # The ablation knobs (docs/scheduler.md) reach it too; a bad value is named with its key path.
    knobs = {"name": "wait_ratio", "buckets": 0, "intra_bucket": "fifo", "provisional_wait": "lookahead",
             "hold_ratio_floor": True, "placement_rule": "completion"}
    s = build_core(parse_fleet(_mut(doc, lambda d: d["server"].update(scheduler=knobs, profile=False)))).scheduler.shared
    assert (s.buckets, s.intra_bucket, s.provisional_wait, s.hold_ratio_floor, s.placement_rule) == (
        0, "fifo", "lookahead", True, "completion")
    with pytest.raises(FleetConfigError, match=r"^server\.scheduler: placement_rule: expected one of"):
        parse_fleet(_mut(doc, lambda d: d["server"].update(scheduler={"name": "fifo", "placement_rule": "fast"})))


def test_profile_settings_and_default(doc):
    assert load_fleet().server.profile.reps >= 1
    p = parse_fleet(_mut(doc, lambda d: d["server"].update(profile={"reps": 1, "max_batch": 2, "tokens": 8})))
    assert (p.server.profile.reps, p.server.profile.max_batch, p.server.profile.tokens) == (1, 2, 8)


def test_engine_arithmetic_follows_the_device_and_names_mistakes(doc):
    """server.dtype / server.cuda_graphs: float32 eager on the CPU, bf16 with CUDA graphs on a GPU
    unless told otherwise; YAML's on/off booleans are accepted; a typo or graphs without CUDA is
    refused by key."""
    from physai_ros.serving.startup.engine_builder import build_core

    cpu = parse_fleet(doc).server
    assert (cpu.torch_dtype, cpu.cuda_graphs) == ("float32", "auto")
    gpu = parse_fleet(_mut(doc, lambda d: d["server"].update(device="cuda"))).server
    assert gpu.torch_dtype == "bfloat16"
    pinned = parse_fleet(_mut(doc, lambda d: d["server"].update(device="cuda", dtype="float32", cuda_graphs=False)))
    assert (pinned.server.torch_dtype, pinned.server.cuda_graphs) == ("float32", "off")
    assert (pinned.server.engine_cuda_graphs, gpu.engine_cuda_graphs) == (False, "auto")
    bf16 = build_core(parse_fleet(_mut(doc, lambda d: d["server"].update(dtype="bfloat16", profile=False))))
    engine = bf16.engines["engine_0"].engine
    assert engine.dtype == torch.bfloat16 and engine._graphs is None  # auto: no graphs without CUDA
    with pytest.raises(FleetConfigError, match=r"^server\.dtype: expected one of \['auto', 'float32', 'bfloat16'\], got 'bf16'"):
        parse_fleet(_mut(doc, lambda d: d["server"].update(dtype="bf16")))
    with pytest.raises(FleetConfigError, match=r"^server\.cuda_graphs: on needs server\.device cuda"):
        parse_fleet(yaml.safe_load(yaml.safe_dump(doc).replace("server:\n", "server:\n  cuda_graphs: on\n", 1)))
    with pytest.raises(FleetConfigError, match=r"^server\.streaming\.tick: graphs needs server\.device cuda"):
        parse_fleet(_mut(doc, lambda d: d["server"].setdefault("streaming", {}).update(tick="graphs")))
    graphed = parse_fleet(_mut(doc, lambda d: d["server"].update(device="cuda", streaming={"tick": "graphs"})))
    assert graphed.server.streaming.tick == "graphs"
    # Unsaid, the tick is graphed on CUDA and fused elsewhere; a user's choice wins on either.
    assert parse_fleet(doc).server.streaming.tick == "fused"
    assert parse_fleet(_mut(doc, lambda d: d["server"].update(device="cuda"))).server.streaming.tick == "graphs"
    told = parse_fleet(_mut(doc, lambda d: d["server"].update(device="cuda", streaming={"tick": "fused"})))
    assert told.server.streaming.tick == "fused"


def test_streams_wait_for_chunked_batches_on_the_cpu_only_by_default(doc):
    """server.streaming.*_waits_for_chunked_s: absent, 1.0 / 0.25 s on the CPU (the cores are
    shared) and 0 on CUDA; an explicit value wins on either; a negative one is refused by key."""
    cpu = parse_fleet(doc).server.streaming
    assert (cpu.vlm_waits_for_chunked_s, cpu.tick_waits_for_chunked_s) == (1.0, 0.25)
    gpu = parse_fleet(_mut(doc, lambda d: d["server"].update(device="cuda"))).server.streaming
    assert (gpu.vlm_waits_for_chunked_s, gpu.tick_waits_for_chunked_s) == (0.0, 0.0)
    set_both = {"vlm_waits_for_chunked_s": 0.5, "tick_waits_for_chunked_s": 0}
    told = parse_fleet(_mut(doc, lambda d: d["server"].update(device="cuda", streaming=set_both))).server.streaming
    assert (told.vlm_waits_for_chunked_s, told.tick_waits_for_chunked_s) == (0.5, 0.0)
    with pytest.raises(FleetConfigError, match=r"^server\.streaming\.tick_waits_for_chunked_s: expected a finite number >= 0"):
        parse_fleet(_mut(doc, lambda d: d["server"].setdefault("streaming", {}).update(tick_waits_for_chunked_s=-1)))


def test_with_num_robots_clones_last_entry_with_fresh_ids():
    cfg = load_fleet().with_num_robots(6)
    assert [r.id for r in cfg.robots] == [f"robot_{i}" for i in range(6)]
    assert cfg.robots[5].task == cfg.robots[3].task
    assert [r.id for r in load_fleet().with_num_robots(2).robots] == ["robot_0", "robot_1"]
    with pytest.raises(FleetConfigError, match="num_robots"):
        load_fleet().with_num_robots(0)


def test_with_num_robots_keeps_the_other_sections():
    """The launchers always pass the robot count: a factory plan or a security block the
    server's copy lost would silently not apply in a launched fleet."""
    from physai_ros.install_paths import default_fleet_file

    cfg = load_fleet(default_fleet_file().parent / "fleet_factory.yaml")
    assert cfg.factory is not None
    again = cfg.with_num_robots(len(cfg.robots) + 1)
    assert again.factory == cfg.factory and again.security == cfg.security and again.source == cfg.source


def _mut(doc, fn):
    d = copy.deepcopy(doc)
    fn(d)
    return d


CASES = [
    (lambda d: d.pop("server"), r"^server: missing"),
    (lambda d: d["server"].update(scheduler="lottery"), r"^server\.scheduler: expected one of \['fifo'"),
    (lambda d: d["server"].update(scheduler={"buckets": 3}), r"^server\.scheduler\.name: missing"),
    (lambda d: d["server"].update(scheduler={"name": "fifo", "buckets": 3}),
     r"^server\.scheduler\.buckets: unknown key \(expected one of \['count_first_wait'"),
    (lambda d: d["server"].update(scheduler={"name": "wait_ratio", "buckets": -1}),
     r"^server\.scheduler\.buckets: expected an integer >= 0, got -1"),   # 0: infinitely many
    (lambda d: d["server"].update(scheduler={"name": "wait_ratio", "aging_interval": 0}),
     r"^server\.scheduler\.aging_interval: expected an integer >= 1, got 0"),
    (lambda d: d["server"].update(scheduler={"name": "wait_ratio", "aging_interval": 2.5}),
     r"^server\.scheduler\.aging_interval: expected an integer >= 1"),
    (lambda d: d["server"].update(scheduler={"name": "wait_ratio", "stale_after_s": 0}),
     r"^server\.scheduler\.stale_after_s: expected a finite number > 0, got 0"),
    (lambda d: d["server"].update(scheduler={"name": "autellix", "refresh_timeout_s": -1}),
     r"^server\.scheduler\.refresh_timeout_s: expected a finite number >= 0"),
    (lambda d: d["server"].update(scheduler={"name": "fifo", "task_ttl_s": "long"}),
     r"^server\.scheduler\.task_ttl_s: expected a finite number > 0"),
    (lambda d: d["server"].update(scheduler={"name": "fifo", "saturation_tolerance": 1.0}),
     r"^server\.scheduler\.saturation_tolerance: expected a number in \[0, 1\)"),
    (lambda d: d["server"].update(scheduler={"name": "fifo", "count_first_wait": "yes"}),
     r"^server\.scheduler\.count_first_wait: expected true or false"),
    (lambda d: d["server"].update(profile={"reps": 0}), r"^server\.profile\.reps: expected an integer >= 1, got 0"),
    (lambda d: d["server"].update(profile={"max_batch": 2, "warmup": 1}), r"^server\.profile\.warmup: unknown key"),
    (lambda d: d["server"].update(profile="fast"), r"^server\.profile: expected a mapping"),
    (lambda d: d["server"].update(max_batch=0), r"^server\.max_batch: expected an integer >= 1, got 0"),
    (lambda d: d["server"].update(max_batch="8"), r"^server\.max_batch: expected an integer"),
    (lambda d: d["server"].update(device="tpu"), r"^server\.device: expected one of"),
    (lambda d: d["server"].update(torch_threads=-1), r"^server\.torch_threads: expected an integer >= 0, got -1"),
    (lambda d: d["server"]["model"].update(checkpoint="/x", preset="tiny"), r"^server\.model: expected exactly one of"),
    (lambda d: d["server"]["model"].pop("checkpoint"), r"^server\.model: expected exactly one of"),
    (lambda d: d["server"]["model"].pop("tokenizer"), r"^server\.model\.tokenizer: missing"),
    (lambda d: d["server"].update(colour="red"), r"^server\.colour: unknown key"),
    (lambda d: d["server"]["streaming"].update(vlm="fork"), r"^server\.streaming\.vlm: expected one of \['thread', 'process'\]"),
    (lambda d: d["server"]["streaming"].update(ae_priority=120), r"^server\.streaming\.ae_priority: SCHED_FIFO priorities are 1\.\.99"),
    (lambda d: d["server"]["streaming"].update(tick="jit"), r"^server\.streaming\.tick: expected one of"),
    (lambda d: d["tasks"]["pick_place"].update(slo_ms=-5), r"^tasks\.pick_place\.slo_ms: expected a finite number > 0"),
    (lambda d: d["tasks"]["pick_place"].update(fallback="panic"),
     r"^tasks\.pick_place\.fallback: expected one of \['hold', 'stop_and_resend', 'use_last_plan'\]"),
    (lambda d: d["tasks"]["pick_place"].update(horizon_policy={"name": "static", "params": [0]}),
     r"^tasks\.pick_place\.horizon_policy\.params: static expects \[H\]"),
    (lambda d: d["tasks"]["pick_place"].update(horizon_policy={"name": "greedy"}),
     r"^tasks\.pick_place\.horizon_policy\.name: expected 'static', 'confidence'"),
    (lambda d: d["tasks"]["pick_place"].pop("prompt"), r"^tasks\.pick_place\.prompt: missing"),
    (lambda d: d["robots"][1].update(task="dance"), r"^robots\[1\]\.task: expected one of \['pick_place', 'reach_goal', 'reach_streaming'\], got 'dance'"),
    (lambda d: d["robots"][2].update(cameras=[]), r"^robots\[2\]\.cameras: expected 1\.\.3 entries, got 0"),
    (lambda d: d["robots"][2].update(cameras=["a", "b", "c", "d"]), r"^robots\[2\]\.cameras: expected 1\.\.3 entries"),
    (lambda d: d["robots"][2].update(cameras=[{"topic": "a", "hieght": 96}]),
     r"^robots\[2\]\.cameras\[0\]\.hieght: unknown key"),
    (lambda d: d["robots"][2].update(cameras=[{"topic": "a", "height": 0}]), r"^robots\[2\]\.cameras\[0\]\.height"),
    (lambda d: d["robots"][2].update(cameras=[{"height": 96}]), r"^robots\[2\]\.cameras\[0\]\.topic"),
    (lambda d: d["robots"][2].update(cameras=["a", {"topic": "a", "width": 64}]), r"^robots\[2\]\.cameras: .*unique"),
    (lambda d: d["robots"][0].update(joints=["a", "a"]), r"^robots\[0\]\.joints: entries must be unique"),
    (lambda d: d["robots"][0].update(joints=["a", "b"]), r"^robots\[0\]\.joints: a simulated arm with sim.num_joints=4 has joints"),
    (lambda d: d["robots"][0].update(cameras=["wrist/image_raw"]),
     r"^robots\[0\]\.cameras: a simulated robot publishes \['camera_0/image_raw'\], got \['wrist/image_raw'\]"),
    (lambda d: d["robots"][3].update(id="robot_0"), r"^robots\[3\]\.id: expected unique values, 'robot_0' repeats robots\[0\]"),
    (lambda d: d["robots"][0].update(id="bad-id"), r"^robots\[0\]\.id: expected letters, digits"),
    (lambda d: d["robots"][0].update(control_rate_hz=float("nan")), r"^robots\[0\]\.control_rate_hz: expected a finite number"),
    (lambda d: d.update(robots=[]), r"^robots: expected a non-empty list"),
    (lambda d: d.update(extra=1), r"^extra: unknown key"),
]


@pytest.mark.parametrize("mutate,pattern", CASES)
def test_validation_error_names_key_and_expectation(doc, mutate, pattern):
    with pytest.raises(FleetConfigError, match=pattern):
        parse_fleet(_mut(doc, mutate))


def test_unreadable_and_invalid_yaml_files(tmp_path):
    with pytest.raises(FleetConfigError, match="cannot read fleet file"):
        load_fleet(tmp_path / "missing.yaml")
    p = tmp_path / "bad.yaml"
    p.write_text("server: [unclosed\n")
    with pytest.raises(FleetConfigError, match="not valid YAML"):
        load_fleet(p)


def test_server_components_block_sets_the_component_queue_and_names_mistakes(doc):
    cfg = parse_fleet(_mut(doc, lambda d: d["server"].update(components={"order": "fifo", "max_batch": 2})))
    c = cfg.server.components
    assert (c.order, c.max_batch, c.max_queue, c.max_question_chars, c.max_answer_tokens) == ("fifo", 2, 32, 1000, 256)
    assert parse_fleet(doc).server.components.order == "kairos"  # the default
    for bad, msg in (({"order": "lifo"}, r"server\.components\.order"), ({"batch": 2}, r"server\.components\.batch"),
                     ({"max_queue": 0}, r"server\.components\.max_queue")):
        with pytest.raises(FleetConfigError, match=msg):
            parse_fleet(_mut(doc, lambda d: d["server"].update(components=bad)))
