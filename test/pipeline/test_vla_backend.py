"""The VLA-backbone component backend (physai_ros.pipeline.vla_backend): questions
decoded by the served model's own backbone, on its own prefill or on the prefix a System 1 round
kept through the language stream, against the engine's language API token for token."""
import dataclasses
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import physai_ros
from physai_ros.config.language import LanguageServerConfig
from physai_ros.engine import Pi0Config
from physai_ros.engine.engine import Pi0Engine
from physai_ros.engine.language.decoder import SamplingParams
from physai_ros.engine.processor.prompt import prompt_style_for
from physai_ros.engine.processor.tokenizer import PromptTokenizer
from physai_ros.pipeline.backend import ComponentQuery
from physai_ros.pipeline.vla_backend import PATH_OWN, PATH_SHARED, VLABackboneBackend, VLABackendSettings
from physai_ros.protocol.observation import ImageData, ObservationData
from physai_ros.serving.action_runner import ActionModelRunner
from physai_ros.serving.language.stream import FrameRobot, LanguageStream

TOKENIZER = Path(physai_ros.__file__).parent / "assets" / "tokenizer.json"
QUESTION = "what is the current subtask?"
PROMPTS = ("pick up the cube and place it on the goal", "move the gripper to the goal")
CONFIGS = {
    "pi0": Pi0Config.preset("tiny"),
    "pi05": Pi0Config.preset("tiny", policy="pi05", time_schedule="multiply", rope_style="multiply"),
}


@pytest.fixture(scope="module", params=["pi0", "pi05"])
def model(request):
    """(engine, runner) of a random tiny pi0 / pi0.5, as the server builds them."""
    cfg = CONFIGS[request.param]
    style = prompt_style_for(cfg.policy)
    runner = ActionModelRunner(cfg, PromptTokenizer(TOKENIZER, cfg.max_tokens, verbatim=style.verbatim),
                               prompt_style=style)
    return Pi0Engine(cfg, seed=3, language=True), runner


def _query(seed, views=2, robot="robot_0", max_tokens=6, question=QUESTION, prompt=PROMPTS[0], component="monitor",
           size=(48, 64)):
    rng = np.random.default_rng(seed)
    images = tuple(rng.integers(0, 256, (*size, 3), dtype=np.uint8) for _ in range(views))
    return ComponentQuery(robot, component, question, prompt, images, rng.uniform(-1, 1, 5).astype(np.float32),
                          max_tokens)


def _observation(q, round_id=1):
    """The query as a robot client would have sent it (built here, not by the backend)."""
    views = tuple(ImageData(im.shape[0], im.shape[1], "rgb8", im.shape[1] * 3, im.tobytes()) for im in q.images)
    return ObservationData(q.robot_id, "task", round_id, 0.0, views, q.state, np.zeros(6, np.float32), 0.0,
                           q.task_prompt, 0.0, 0, 0.1, "", ())


def _alone(engine, runner, q):
    """The reference: serving's input for the observation, the engine's own frame, and the
    engine's language API decoding the question on it (one query, nothing batched)."""
    tok = runner.tokenizer
    with torch.inference_mode():
        _, cache, b = engine.infer_frame([runner.prepare(_observation(q), None)])
    dec = engine.language_decoder()
    req = dec.start(cache, 0, int(b.tokens[0][b.token_mask[0]][-1]),
                    SamplingParams(max_tokens=q.max_tokens, eos_id=tok.eos_id), "alone",
                    question=tok.encode_text(q.question))
    dec.generate([req])
    return tuple(req.tokens)


def _queries():
    return [_query(1, views=2, robot="robot_0", max_tokens=6),
            _query(2, views=1, robot="robot_1", max_tokens=4, prompt=PROMPTS[1], size=(64, 40)),
            _query(3, views=3, robot="robot_2", max_tokens=7, question="describe the scene.", component="safety")]


def test_own_prefill_equals_the_engine_language_api_and_batched_equals_one_by_one(model):
    engine, runner = model
    backend = VLABackboneBackend(engine, runner)
    qs = _queries()
    batched = backend.answer(qs)
    assert all(a.ok and a.meta["path"] == PATH_OWN for a in batched), [a.error for a in batched]
    assert backend.stats.prefills == 1 and backend.stats.prefill_rows == 3 and backend.stats.prefills_saved == 0
    for q, a in zip(qs, batched):
        ids = a.meta["token_ids"]
        assert ids == _alone(engine, runner, q)
        assert a.text == runner.tokenizer.decode_ids(list(ids)).strip() and a.tokens == len(ids)
        assert a.latency_ms > 0 and a.latency_ms == batched[0].latency_ms  # one batch, one time
    assert any(a.tokens for a in batched)  # not a model that says nothing (random weights)
    one_by_one = [backend.answer([q])[0] for q in qs]
    assert [a.meta["token_ids"] for a in one_by_one] == [a.meta["token_ids"] for a in batched]
    assert backend.stats.prefills == 4 and backend.stats.batches == 4


def test_max_tokens_is_respected(model):
    engine, runner = model
    backend = VLABackboneBackend(engine, runner)
    qs = [_query(5, max_tokens=n, robot=f"robot_{n}") for n in (1, 2, 5, 9)]
    for q, a in zip(qs, backend.answer(qs)):
        assert a.ok and a.tokens <= q.max_tokens and a.meta["reason"] in ("eos", "budget")
        assert (a.tokens == q.max_tokens) == (a.meta["reason"] == "budget")
    # A longer budget continues the same greedy text.
    short, long = backend.answer([_query(5, max_tokens=2), _query(5, max_tokens=9)])
    assert long.meta["token_ids"][:short.tokens] == short.meta["token_ids"]


def _round(engine, runner, stream, qs, round_id):
    """A System 1 round for the queries' robots: the engine's infer (prefix kept, as serving's
    run_batch does) and the language stream's frame, which offers the prefix to its listeners."""
    with torch.inference_mode():
        engine.infer([runner.prepare(_observation(q, round_id), None) for q in qs])
    cache, b = engine.take_prefix()
    rows = [FrameRobot(q.robot_id, "task", round_id) for q in qs]
    return stream.frame("engine_0", cache, b, rows, actions_s=0.01)


def test_shared_prefill_equals_own_prefill_and_saves_the_prefill(model):
    engine, runner = model
    now = [100.0]
    stream = LanguageStream(LanguageServerConfig(), {}, runner.tokenizer, clock=lambda: now[0])
    stream.attach("engine_0", engine)
    backend = VLABackboneBackend(engine, runner, VLABackendSettings(max_prefix_age_s=1.0))
    backend.attach(stream)

    def broken(frame):
        raise RuntimeError("a listener that fails")

    stream.add_frame_listener(broken)
    own = VLABackboneBackend(engine, runner, VLABackendSettings(use_shared=False))
    qs = _queries()
    assert _round(engine, runner, stream, qs[:2], round_id=7) == []  # robot_0 and robot_1 ran a round
    assert stream.listener_errors == 1  # the broken listener cost the frame nothing
    now[0] += 0.5
    shared = backend.answer(qs)
    assert [a.meta["path"] for a in shared] == [PATH_SHARED, PATH_SHARED, PATH_OWN]  # robot_2 ran none
    assert all(a.meta["round_id"] == 7 and a.meta["prefix_age_s"] == 0.5 for a in shared[:2])
    if engine.config.policy == "pi0":  # (pi0.5's prompt also carries the state, as text)
        assert [a.meta["prefix_prompt"] for a in shared[:2]] == [q.task_prompt for q in qs[:2]]
    st = backend.stats
    assert (st.shared, st.prefills_saved, st.own, st.prefills, st.prefill_rows) == (2, 2, 1, 1, 1)
    assert st.decodes == 1  # shared and own questions on one model decode as one batch
    reference = own.answer(qs)
    assert [a.meta["token_ids"] for a in shared] == [a.meta["token_ids"] for a in reference]
    assert [a.text for a in shared] == [a.text for a in reference]
    # A robot with no round for longer than max_prefix_age_s (held after a safety stop) is
    # answered on its own prefill again; so is one the pipeline told to forget.
    now[0] += 0.6
    assert [a.meta["path"] for a in backend.answer(qs[:2])] == [PATH_OWN, PATH_OWN]
    _round(engine, runner, stream, qs[:2], round_id=8)
    backend.forget("robot_1")
    again = backend.answer(qs[:2])
    assert [a.meta["path"] for a in again] == [PATH_SHARED, PATH_OWN] and again[0].meta["round_id"] == 8
    assert [a.meta["token_ids"] for a in again] == [a.meta["token_ids"] for a in reference[:2]]


def test_a_bad_query_costs_the_others_nothing(model):
    engine, runner = model
    backend = VLABackboneBackend(engine, runner)
    good = _queries()
    flat = dataclasses.replace(good[0], images=(np.zeros((48, 64), np.uint8),))
    rgba = dataclasses.replace(good[0], images=(np.zeros((48, 64, 4), np.uint8),))
    floats = dataclasses.replace(good[0], images=(np.zeros((48, 64, 3), np.float32),))
    bad = [
        (flat, "images[0]"), (rgba, "images[0]"), (floats, "images[0]"),
        (_query(9, views=engine.config.max_views + 1), "images:"), (_query(9, views=0), "images:"),
        (dataclasses.replace(good[0], question="  "), "question:"),
        (dataclasses.replace(good[0], question="why " * 80), "question:"),
        (dataclasses.replace(good[0], max_tokens=0), "max_tokens:"),
        (dataclasses.replace(good[0], max_tokens=10_000), "max_tokens:"),
        (dataclasses.replace(good[0], state=np.zeros(engine.config.max_state_dim + 1, np.float32)), "state:"),
        (dataclasses.replace(good[0], state=np.array([np.nan], np.float32)), "state:"),
        (dataclasses.replace(good[0], component="system1"), "component:"),
        (dataclasses.replace(good[0], task_prompt=""), "task_prompt:"),
        (None, "query:"),
    ]
    mixed = [good[0], *[b for b, _ in bad[:7]], good[1], *[b for b, _ in bad[7:]], good[2]]
    answers = backend.answer(mixed)
    assert len(answers) == len(mixed)
    errs = [a for q, a in zip(mixed, answers) if not any(q is g for g in good)]
    for (q, field), a in zip(bad, errs):
        assert not a.ok and a.error.startswith(field), (field, a.error)
    alone = [backend.answer([q])[0] for q in good]
    oks = [a for a in answers if a.ok]
    assert [a.meta["token_ids"] for a in oks] == [a.meta["token_ids"] for a in alone]
    assert backend.stats.errors == len(bad)
    # No state: pi0 reads zeros (as a robot without proprioception), pi0.5 cannot write its prompt.
    no_state = backend.answer([dataclasses.replace(good[0], state=None)])[0]
    assert no_state.ok == (engine.config.policy == "pi0") and (no_state.ok or no_state.error.startswith("state:"))
    # A batch of nothing but bad queries answers every one (no prefill, no decode).
    assert all(not a.ok for a in backend.answer([b for b, _ in bad]))


def test_a_model_without_its_lm_head_is_refused():
    cfg = CONFIGS["pi0"]
    runner = ActionModelRunner(cfg, PromptTokenizer(TOKENIZER, cfg.max_tokens))
    with pytest.raises(ValueError, match="language=True"):
        VLABackboneBackend(Pi0Engine(cfg, seed=3), runner)  # fast path prepared for actions only


def _sim_frames(steps=(0, 120), seed=0):
    """Rendered pick-and-place frames (both views, as the sim robot publishes them and as the text
    co-training data was recorded) with the ground-truth subtask, the scripted expert driving."""
    from physai_ros.sim.expert import ScriptedExpert
    from physai_ros.sim.narration import SubtaskTracker
    from physai_ros.sim.render import Renderer
    from physai_ros.sim.robot import ArmConfig
    from physai_ros.sim.world import SimWorld

    world = SimWorld(ArmConfig(num_joints=4), task="pick_and_place", seed=seed)
    renderer = Renderer(world.arm.cfg, num_views=2, width=224, height=224, object_size=world.scene.object_size,
                        goal_radius=world.scene.goal_radius)
    expert, tracker = ScriptedExpert(world), SubtaskTracker(world.scene)
    frames = []
    for step in range(max(steps) + 1):
        snap = world.snapshot()
        truth = tracker.observe(snap)
        if step in steps:
            frames.append((tuple(renderer.render(snap)), snap.positions.astype(np.float32), truth))
        world.set_command(expert.act(snap, 1 / 60))
        for _ in range(8):
            world.step(1 / 480)
    return frames


def test_the_trained_sim_policy_names_the_subtask_through_the_backend(fleet_with_sim_pi0):
    """The shipped sim_pi0 (co-trained on the subtask question) answers through the backend,
    from its own prefill and from the real serving core's System 1 round, alike."""
    from physai_ros.client.robot_client import RobotClientCore
    from physai_ros.sim.narration import SUBTASK_QUESTION, SUBTASKS

    fleet, core = fleet_with_sim_pi0
    robot = fleet.robot("robot_0")
    assert core.register(RobotClientCore(robot).registration()).accepted
    backend = VLABackboneBackend.from_core(core)
    for round_id, (images, state, truth) in enumerate(_sim_frames(), start=1):
        q = ComponentQuery(robot.id, "monitor", SUBTASK_QUESTION, robot.task.prompt, images, state, 12)
        # The sim ran 2 s ahead in no wall time: in real time the last round's prefix would have
        # expired (max_prefix_age_s), so this frame's question takes the own path.
        backend.forget(robot.id)
        own = backend.answer([q])[0]
        assert own.ok and own.meta["path"] == PATH_OWN
        assert own.text in SUBTASKS["pick_and_place"] and own.text == truth
        # System 1's round for the same frame through the serving core: its prefix answers next.
        obs = dataclasses.replace(_observation(q, round_id), task_id=robot.task.name, stamp=time.time(),
                                  control_period=robot.task.action_period_s)
        assert core.submit(obs) == []
        for work in core.dispatch().work:
            assert all(c.status == 0 for c in core.run_batch(work))
            core.run_language(work.instance_id)
        shared = backend.answer([q])[0]
        assert shared.meta["path"] == PATH_SHARED and shared.meta["round_id"] == round_id
        assert shared.meta["token_ids"] == own.meta["token_ids"]
    assert backend.stats.prefills_saved == 2


@pytest.fixture(scope="module")
def fleet_with_sim_pi0():
    """The default fleet (server.model: the shipped sim_pi0, its language stream on)."""
    from physai_ros.config.fleet import load_fleet
    from physai_ros.serving.startup.engine_builder import build_core

    fleet = load_fleet()
    fleet = dataclasses.replace(fleet, server=dataclasses.replace(fleet.server, max_observation_age_s=30.0))
    return fleet, build_core(fleet)
