"""The language stream in the serving path: texts from the same prefill as the chunks,
with the real sim checkpoint's engine, the real tokenizer and the FIFO scheduler."""
import dataclasses

import numpy as np
import pytest

from physai_ros.client.robot_client import RobotClientCore
from physai_ros.config.fleet import FleetConfigError, parse_fleet
from physai_ros.config.language import LanguageServerConfig, TaskLanguageConfig
from physai_ros.engine.language.decoder import SamplingParams
from physai_ros.protocol.text import SOURCE_OPERATOR, SOURCE_TASK, TextQuery
from physai_ros.serving.startup.engine_builder import build_core

from observation_builders import make_obs

QUESTION = "what is the current subtask?"


def _fleet(fleet, server_lang=None, off=False, **task_lang):
    """The default fleet with only pick_place asking (or nobody: off)."""
    lang = None if off else TaskLanguageConfig(**{"question": QUESTION, "every_rounds": 2, "max_tokens": 6,
                                                  "tokens_per_frame": 2, **task_lang})
    tasks = {n: dataclasses.replace(t, language=lang if n == "pick_place" else None) for n, t in fleet.tasks.items()}
    robots = tuple(dataclasses.replace(r, task=tasks[r.task.name]) for r in fleet.robots)
    server = dataclasses.replace(fleet.server, max_observation_age_s=30.0, language=server_lang)
    return dataclasses.replace(fleet, tasks=tasks, robots=robots, server=server)


def _core(fleet, name, **kw):
    c = build_core(fleet, instance_id=name, **kw)
    for r in fleet.robots:
        assert c.register(RobotClientCore(r).registration()).accepted
    return c


def _frame(core, obs):
    """Submit, run every batch and its text; returns (chunks, texts)."""
    for o in obs:
        assert core.submit(o) == []
    chunks, texts = [], []
    while core.pending():
        for work in core.dispatch().work:
            chunks += core.run_batch(work)
            texts += core.run_language(work.instance_id)
    return chunks, texts


def test_texts_come_from_the_action_prefill_and_leave_the_actions_untouched(fleet):
    on_fleet = _fleet(fleet)
    on, off = _core(on_fleet, "lang_on"), _core(_fleet(fleet, off=True), "lang_off")
    assert on.language is not None and off.language is None
    robots = [r for r in on_fleet.robots if r.task.name == "pick_place"]
    texts, frames = [], []
    for rnd in range(1, 8):
        obs = [make_obs(r, rnd) for r in on_fleet.robots]
        c_on, t = _frame(on, [dataclasses.replace(o) for o in obs])
        c_off, _ = _frame(off, obs)
        frames.append((rnd, obs))
        texts += t
        for a, b in zip(sorted(c_on, key=lambda c: c.robot_id), sorted(c_off, key=lambda c: c.robot_id)):
            assert a.status == b.status == 0 and np.array_equal(a.actions, b.actions)
    # Only pick_place robots speak (the task with a question), every 2 rounds while not busy.
    assert {t.robot_id for t in texts} == {r.id for r in robots}
    assert all(t.source == SOURCE_TASK and t.question == QUESTION for t in texts)
    done = [t for t in texts if t.done]
    assert done and all(t.reason in ("eos", "budget") for t in done)
    tok = on.action_runner.tokenizer
    by_id = {}
    for t in texts:
        by_id.setdefault(t.request_id, []).append(t)
    for rid, ups in by_id.items():
        assert [u.seq for u in ups] == list(range(1, len(ups) + 1))
        assert all(len(u.tokens) <= 2 * u.seq for u in ups)  # k = tokens_per_frame = 2
        assert all(u.text == tok.decode_ids(list(u.tokens)) for u in ups)
        assert len({u.round_id for u in ups}) == 1
    # A served text equals decoding that frame's prefix alone (cross-frame batching changes nothing).
    first = done[0]
    rnd, obs = next(f for f in frames if f[0] == first.round_id)
    o = next(x for x in obs if x.robot_id == first.robot_id)
    engine = on.engines["engine_0"].engine
    inp = on.action_runner.prepare(o, on.registration(o.robot_id))
    _, cache, b = engine.infer_frame([inp])
    dec = engine.language_decoder()
    req = dec.start(cache, 0, int(b.tokens[0][b.token_mask[0]][-1]),
                    SamplingParams(max_tokens=6, eos_id=tok.eos_id), "alone", question=tok.encode_text(QUESTION))
    dec.generate([req])
    assert tuple(req.tokens) == first.tokens and req.reason == first.reason
    d = on.language.fleet_diagnostics()
    assert d["engine_0.frames_per_s"] > 0 and d["text_questions_refused"] == 0
    assert on.language.robot_diagnostics(robots[0].id)["text_done"]


def test_operator_questions_are_validated_counted_and_answered(fleet):
    core = _core(_fleet(fleet, LanguageServerConfig(max_question_chars=40, max_question_tokens=24, queries_per_s=0.5,
                                                    query_burst=1, max_pending_per_robot=2), every_rounds=0), "ops")
    lang = core.language
    ok = lang.ask(TextQuery("robot_1", "describe the scene.", 3), registered=True, now=0.0)
    assert ok.accepted and ok.request_id > 0
    refusals = [
        (TextQuery("ghost", "hi"), False, "unknown_robot"),
        (TextQuery("robot_1", "   "), True, "empty"),
        (TextQuery("robot_1", "x" * 41), True, "too_long"),
        (TextQuery("robot_1", "stop\x00now"), True, "bad_characters"),
        (TextQuery("robot_1", "hi", max_tokens=10_000), True, "max_tokens"),
        (TextQuery("robot_1", "hi", max_tokens=-1), True, "max_tokens"),
        (TextQuery("robot_1", "zq xv jk wp qz vx kj pw zx qv jw"), True, "too_long"),  # 31 tokens > 24
    ]
    for q, registered, reason in refusals:
        a = lang.ask(q, registered=registered, now=0.0)
        assert not a.accepted and a.reason.startswith(reason + ":"), (q, a)
    # Refused questions spent no rate; the accepted one spent the burst of 1, refilled at 0.5/s.
    rate = lang.ask(TextQuery("robot_1", "again?"), True, now=0.5)
    assert not rate.accepted and rate.reason.startswith("rate:")
    assert lang.ask(TextQuery("robot_1", "again?"), True, now=2.1).accepted
    busy = lang.ask(TextQuery("robot_1", "third?"), True, now=10.0)
    assert not busy.accepted and busy.reason.startswith("busy:")
    diag = lang.robot_diagnostics("robot_1")
    assert diag["text_pending"] == 2 and sum(diag["text_questions_refused"].values()) == 8
    # The robot's next frame starts the first question; robots not asked say nothing.
    robot_1 = fleet.robot("robot_1")
    texts = []
    for rnd in range(1, 6):
        texts += _frame(core, [make_obs(robot_1, rnd)])[1]
    answer = [t for t in texts if t.request_id == ok.request_id]
    assert answer and answer[-1].done and answer[0].source == SOURCE_OPERATOR
    assert len(answer[-1].tokens) <= 3 and answer[0].round_id == 1
    assert {t.robot_id for t in texts} == {"robot_1"}


def test_memory_budget_and_the_action_rate_floor(fleet):
    # A budget smaller than one prefix copy: every text is refused with the reason, actions go on.
    tiny = _core(_fleet(fleet, LanguageServerConfig(kv_budget_mb=1e-4), every_rounds=1), "tiny_kv")
    robot_0 = fleet.robot("robot_0")
    chunks, texts = _frame(tiny, [make_obs(robot_0, 1)])
    assert chunks[0].status == 0
    assert len(texts) == 1 and texts[0].done and texts[0].reason == "refused" and "budget" in texts[0].detail
    # A floor no CPU can hold: once the step cost is measured, text yields (k = 0) and the
    # actions are still served every frame; the frame over the floor is counted against text.
    strict = _core(_fleet(fleet, min_action_rate_hz=1e6, every_rounds=1, max_tokens=50), "strict")
    counts = []
    for rnd in range(1, 5):
        chunks, texts = _frame(strict, [make_obs(robot_0, rnd)])
        assert chunks[0].status == 0
        counts.append(sum(len(t.tokens) for t in texts if not t.done))
    d = strict.language.fleet_diagnostics()
    assert d["engine_0.tokens_per_frame"] == 0 and d["engine_0.f_min_hz"] == 1e6
    assert d["engine_0.frames_below_floor"] >= 1


def test_a_released_robot_s_texts_end_cancelled(fleet):
    core = _core(_fleet(fleet, every_rounds=1, max_tokens=40, tokens_per_frame=1), "cancel")
    robot_0 = fleet.robot("robot_0")
    _, texts = _frame(core, [make_obs(robot_0, 1)])
    assert texts and not texts[-1].done
    assert core.language.robot_diagnostics("robot_0")["text_active"] == 1
    assert core.release("robot_0")
    ended = core.take_text_notices()
    assert [(t.robot_id, t.reason, t.done) for t in ended] == [("robot_0", "cancelled", True)]
    assert core.language.robot_diagnostics("robot_0")["text_active"] == 0
    assert core.language.robot_diagnostics("robot_0")["text_kv_bytes"] == 0


def test_fleet_yaml_language_errors_name_the_key(fleet):
    import yaml

    from physai_ros.config.fleet import default_fleet_path

    doc = yaml.safe_load(default_fleet_path().read_text())

    def parse(mut):
        d = yaml.safe_load(yaml.safe_dump(doc))
        mut(d)
        return parse_fleet(d)

    cases = [
        (lambda d: d["tasks"]["pick_place"].update(language={"qestion": "x"}), "tasks.pick_place.language.qestion"),
        (lambda d: d["tasks"]["pick_place"].update(language={"top_p": 2}), "tasks.pick_place.language.top_p"),
        (lambda d: d["tasks"]["pick_place"].update(language={"tokens_per_frame": 0}),
         "tasks.pick_place.language.tokens_per_frame"),
        (lambda d: d["server"].update(language={"kv_budget_mb": -1}), "server.language.kv_budget_mb"),
    ]
    for mut, key in cases:
        with pytest.raises(FleetConfigError, match=key.replace(".", r"\.")):
            parse(mut)
    ok = parse(lambda d: d["tasks"]["pick_place"].update(language={"question": QUESTION, "every_rounds": 3}))
    assert ok.tasks["pick_place"].language.every_rounds == 3
    streaming = parse(lambda d: d["tasks"]["reach_streaming"].update(language={"question": QUESTION}))
    with pytest.raises(FleetConfigError, match="tasks.reach_streaming.language"):
        build_core(streaming, instance_id="s")
    long_q = parse(lambda d: d["tasks"]["pick_place"].update(language={"question": "word " * 40}))
    with pytest.raises(FleetConfigError, match="max_question_tokens"):
        build_core(long_q, instance_id="q")


def test_a_frame_without_text_work_frees_the_instance_with_its_chunks(fleet):
    """Only pick_place asks (every 3 rounds); reach robots never speak. A batch of reach robots
    alone leaves its instance free as soon as run_batch returns (no empty language frame), and
    skipped frames still count towards pick_place's every_rounds."""
    f = _fleet(fleet, every_rounds=3, max_tokens=1, tokens_per_frame=1)
    core = _core(f, "skip")
    slot = core.engines["engine_0"]
    reach = [r for r in f.robots if r.task.name != "pick_place" and r.task.mode != "streaming"]
    pick = next(r for r in f.robots if r.task.name == "pick_place")
    assert reach, "the default fleet has a robot without language"
    assert core.submit(make_obs(reach[0], 1)) == []
    (work,) = core.dispatch().work
    assert core.run_batch(work)[0].status == 0
    assert not slot.running  # free at once: nothing was held for run_language
    # The next batch may be dispatched before this instance's thread gets to run_language: that
    # call must leave the new batch's instance busy (else the scheduler stacks batches on it).
    assert core.submit(make_obs(reach[0], 2)) == []
    (work2,) = core.dispatch().work
    assert slot.running
    assert core.run_language("engine_0") == []
    assert slot.running and core.dispatchable() is False
    core.run_batch(work2)
    asked = []
    for rnd in range(1, 8):
        assert core.submit(make_obs(pick, rnd)) == []
        (work,) = core.dispatch().work
        core.run_batch(work)
        held = slot.running
        texts = core.run_language("engine_0")
        asked += [(rnd, held)] if any(t.seq == 1 for t in texts) else []
    # A question starts on the robot's first frame, then every 3 rounds (each a 1-token text):
    # the frames between are skipped, their rounds still counted.
    assert [r for r, _ in asked] == [1, 4, 7] and all(h for _, h in asked)


def test_one_operator_s_flood_leaves_another_s_questions_alone(fleet):
    """Rates and waiting places are per requester (the operator who signed the question)."""
    core = _core(_fleet(fleet, LanguageServerConfig(queries_per_s=0.1, query_burst=1, max_pending_per_robot=1),
                        every_rounds=0), "ops")
    lang = core.language
    flood = [lang.ask(TextQuery("robot_1", f"q{i}?", requester="mallory"), True, now=0.0) for i in range(20)]
    assert flood[0].accepted and all(not a.accepted for a in flood[1:])
    assert lang.ask(TextQuery("robot_1", "status?", requester="alice"), True, now=0.0).accepted
    # Questions for robots this server does not serve are counted under one key, whatever their names.
    for i in range(50):
        lang.ask(TextQuery(f"ghost_{i}", "hi", requester="mallory"), False, now=0.0)
    assert lang.gate.refused["(not served here)"]["unknown_robot"] == 50
    assert not any(k.startswith("ghost") for k in lang.gate.refused)
