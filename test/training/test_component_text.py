"""The pipeline components' co-training data and batches, the training hook, and the
evaluation's confusion / detection-delay arithmetic."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from physai_ros.config.fleet import default_fleet_path
from physai_ros.engine.processor.tokenizer import PromptTokenizer
from physai_lab.evaluation.components import confusion, detection_delay, planner_report
from physai_ros.sim.multi_step import subgoal_sequence
from physai_ros.sim.robot import ArmConfig
from physai_ros.sim.tasks import PlaceInOrderTask
from physai_lab.training.component_data import ComponentCell, record_component_cell
from physai_lab.training.component_questions import LABELS, QUESTIONS
from physai_lab.training.component_text import ComponentTextBatches, frame_prompts
from physai_lab.training.dataset import EncodedEpisode, load_dataset, write_dataset
from physai_lab.training.expert_data import RecordConfig, record_cell
from physai_lab.training.policy_model import TrainablePi0
from physai_lab.training.train import ModelSize, TrainConfig, train

TOKENIZER = str(default_fleet_path().parents[1] / "physai_ros" / "assets" / "tokenizer.json")
TINY = ModelSize(image_size=28, patch_size=14, vision_width=32, vision_depth=1, vlm_width=32, expert_width=32,
                 depth=1, heads=2, head_dim=16, chunk_size=4)
PROMPTS = {"reach": ["move the gripper to the goal"], "pick_and_place": ["pick up the cube and place it on the goal"]}
RED_FIRST, BLUE_FIRST = PlaceInOrderTask.prompt_variants()


@pytest.fixture(scope="module")
def frames():
    parts = [record_component_cell(ComponentCell(task=t, seed=s, episodes=e, prompt=p, image_size=TINY.image_size,
                                                 camera_size=48, intruder_rate_per_min=20.0, drop_prob=0.5,
                                                 knock_prob=0.5))
             for t, s, e, p in (("pick_and_place", 3, 3, ""), ("place_in_order", 4, 1, ""),
                                ("place_in_order", 5, 1, BLUE_FIRST))]
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def test_frames_carry_every_components_ground_truth(frames):
    n = len(frames["images"])
    assert frames["images"].shape[1:] == (2, 3, TINY.image_size, TINY.image_size)
    assert all(len(frames[k]) == n for k in ("task", "prompt", "safety", "monitor", "failure", "planner", "time"))
    assert set(frames["safety"]) <= set(LABELS["safety"]) and set(frames["monitor"]) <= set(LABELS["monitor"])
    assert "unsafe" in set(frames["safety"]) and "failed" in set(frames["monitor"])
    # failed frames name their reason, others none
    assert all((m == "failed") == bool(f) for m, f in zip(frames["monitor"], frames["failure"]))
    pio = frames["planner"][frames["task"] == "place_in_order"]
    assert set(pio) <= set(subgoal_sequence("place_in_order"))
    assert set(frames["planner"][frames["task"] == "pick_and_place"]) == {"pick up the blue cube and place it on the green pad"}
    # within a cell, sim time runs on across episodes (the intruder's schedule does)
    t = frames["time"][frames["seed"] == 3]
    assert np.all(np.diff(t) > 0)


def test_batches_are_balanced_and_co_training_learns_the_answers(frames):
    tok = PromptTokenizer(TOKENIZER, 48)
    b = ComponentTextBatches(frames, tok, PROMPTS, seed=0)
    assert frame_prompts("place_in_order", "", {})[1][1:] == list(subgoal_sequence("place_in_order")[:2])
    # answers drawn uniformly per component: "unsafe" about as often as "safe" although rarer
    counts = {a: 0 for a in LABELS["safety"]}
    qs = b.codec.encode(b.questions["safety"][0])
    g_rows = []
    for _ in range(40):  # the safety question's answers in the blocks
        _, _, _, _, block, mask = b.batch(16)
        for row, m in zip(block.tolist(), mask.tolist()):
            if row[: len(qs)] == qs:
                ans = tok.decode_ids([x for x, keep in zip(row[len(qs):], m[len(qs) - 1:]) if keep and x != tok.eos_id])
                g_rows.append(ans.strip())
    for a in g_rows:
        counts[a] += 1
    assert min(counts.values()) > 0.3 * sum(counts.values())
    # the training hook: component text loss goes down with actions trained beside it
    eps = [EncodedEpisode.encode(e) for e in record_cell(RecordConfig(task="reach", seed=5, episodes=1, image_width=48,
                                                                      image_height=32, fps=10))]
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        write_dataset(d, eps, fps=10, joint_names=ArmConfig().joint_names)
        data = load_dataset(d, image_size=TINY.image_size)
    tc = TrainConfig(size=TINY, steps=40, batch_size=8, samples_per_obs=1, lr=3e-3, warmup=0.1, ema=0.0, seed=2,
                     threads=1, log_every=10, component_weight=1.0, component_batch=16)
    model = TrainablePi0(tc.size.config(), seed=2)
    probe = ComponentTextBatches(frames, tok, PROMPTS, seed=5).batch(48)

    def loss_now():
        with torch.no_grad():
            return float(ComponentTextBatches.loss(model, probe))

    before = loss_now()
    res = train(data, tc, tok, PROMPTS, log=lambda m: None, model=model, components=b)
    assert loss_now() < 0.5 * before
    assert [s for s, _ in res.component_curve] == [10, 20, 30, 40]


def test_confusion_and_detection_delay():
    c = confusion(["safe", "safe", "unsafe", "unsafe"], ["safe", "unsafe", "unsafe", "it is"], LABELS["safety"])
    assert c["accuracy"] == 0.5 and c["matrix"]["unsafe"] == {"safe": 0, "unsafe": 1, "unparseable": 1}
    assert planner_report(["a", "a", "b"], ["a", "b", "b"])["per_answer"]["a"] == {
        "frames": 2, "exact_match": 0.5, "said_instead": {"b": 1}}
    # one cell, frames every 0.1 s; the intruder over the table from 0.3 to 1.1 s; queries at 2 Hz
    t = np.round(np.arange(20) * 0.1, 6)
    truth = np.array(["unsafe" if 0.3 <= x < 1.15 else "safe" for x in t])
    said = ["unsafe" if x >= 0.9 else "safe" for x in t]  # detects late, and says unsafe after it left
    d = detection_delay({"seed": np.zeros(20, int), "time": t, "safety": truth}, said, 2.0)
    assert d["visits"] == 1 and d["detected"] == 1 and d["delay_s"]["median"] == pytest.approx(0.7)
    assert d["false_alarms"] == 1 and d["safe_queries"] == 2  # queries at 0.0 and 1.5 s; 1.5 said unsafe
    said = ["safe"] * 20
    assert detection_delay({"seed": np.zeros(20, int), "time": t, "safety": truth}, said, 2.0)["missed"] == 1
    assert QUESTIONS["safety"][0] == "is the workcell safe? answer safe or unsafe."


def test_answer_temper_draws_answers_as_often_as_the_frames_show_them(frames):
    """answer_temper 1: the monitor's answers at the frames' frequencies (the prior a classifier
    that cannot tell ambiguous frames apart should learn); 0 stays uniform; bad values are refused."""
    tok = PromptTokenizer(TOKENIZER, 48)
    natural = ComponentTextBatches(frames, tok, PROMPTS, seed=0, answer_temper={"monitor": 1.0})
    counts = dict(natural.counts()["monitor"])
    total = sum(counts.values())
    probs = dict(zip([a for a, _ in natural.by_answer["monitor"]], natural.answer_probs["monitor"]))
    assert probs == pytest.approx({a: n / total for a, n in counts.items()})
    assert natural.answer_probs["safety"] == pytest.approx(np.full(len(LABELS["safety"]), 0.5))
    # drawn as the probabilities say: decode the monitor answers of a few hundred samples
    qs = [natural.codec.encode(q) for q in natural.questions["monitor"]]
    drawn = {a: 0 for a in counts}
    for _ in range(60):
        _, _, _, _, block, mask = natural.batch(16)
        for row, m in zip(block.tolist(), mask.tolist()):
            q = next((q for q in qs if row[: len(q)] == q), None)
            if q is not None:
                ans = tok.decode_ids([x for x, keep in zip(row[len(q):], m[len(q) - 1:]) if keep and x != tok.eos_id])
                drawn[ans.strip()] += 1
    n = sum(drawn.values())
    rare = min(counts, key=counts.get)
    assert n > 150 and abs(drawn[rare] / n - counts[rare] / total) < 0.1, (drawn, counts)
    with pytest.raises(ValueError, match="unknown components"):
        ComponentTextBatches(frames, tok, PROMPTS, answer_temper={"monitr": 1.0})
    with pytest.raises(ValueError, match="within 0..1"):
        ComponentTextBatches(frames, tok, PROMPTS, answer_temper={"monitor": 2.0})


def _decoded(tok, b: ComponentTextBatches, batches: int):
    """(question, answer, prefix prompt) of every sample in `batches` batches of 16."""
    out = []
    for _ in range(batches):
        _, _, tokens, tmask, block, mask = b.batch(16)
        for row, m, pt, pm in zip(block.tolist(), mask.tolist(), tokens.tolist(), tmask.tolist()):
            q_len = m.index(True) + 1  # the last question token predicts the answer's first
            answer = [x for x, keep in zip(row[q_len:], m[q_len - 1:]) if keep and x != tok.eos_id]
            out.append((tok.decode_ids(row[:q_len]).strip(), tok.decode_ids(answer).strip(),
                        tok.decode_ids([x for x, k in zip(pt, pm) if k]).strip()))
    return out


def test_the_planner_is_asked_with_the_frames_own_instruction(frames):
    """The planner's question carries {task}: each frame's own order (blue-first frames are asked
    about the blue-first instruction and never given the red-first one as prefix), so it can learn
    to read the order instead of guessing it from the scene."""
    assert "{task}" in QUESTIONS["planner"][0]
    subgoals = set(subgoal_sequence("place_in_order")[:2])
    asked, prefix = frame_prompts("place_in_order", BLUE_FIRST, {"place_in_order": [RED_FIRST, BLUE_FIRST]})
    assert asked == [BLUE_FIRST] and prefix[0] == BLUE_FIRST and set(prefix[1:]) == subgoals
    asked, prefix = frame_prompts("pick_and_place", "", PROMPTS)
    assert asked == prefix == ["pick up the blue cube and place it on the green pad"] + PROMPTS["pick_and_place"]
    tok = PromptTokenizer(TOKENIZER, 48)
    b = ComponentTextBatches(frames, tok, PROMPTS, seed=3)
    head = QUESTIONS["planner"][0].split("{task}")[0]
    planner = [(q[len(head):], a, p) for q, a, p in _decoded(tok, b, 30) if q.startswith(head.strip())]
    assert len(planner) > 60
    by_task = {}
    for task, answer, prefix_prompt in planner:
        by_task.setdefault(task, []).append((answer, prefix_prompt))
    assert {RED_FIRST, BLUE_FIRST} <= set(by_task)
    for order in (RED_FIRST, BLUE_FIRST):
        assert {p for _, p in by_task[order]} <= {order} | subgoals
        assert {a for a, _ in by_task[order]} <= subgoals | {"done"}
    # the recorded truth follows the order: a blue-first cell's plan starts with the blue cube
    blue_rows = np.flatnonzero(frames["prompt"] == BLUE_FIRST)
    assert frames["planner"][blue_rows[0]] == "pick up the blue cube and place it on the green pad"
    assert set(by_task) <= {RED_FIRST, BLUE_FIRST} | set(frame_prompts("pick_and_place", "", PROMPTS)[0])


def test_a_checkpoint_is_asked_the_wording_it_was_trained_on(tmp_path):
    """evaluation.components.trained_questions: the manifest's questions (a checkpoint from before
    the planner's question carried {task} keeps its own), the current ones where it has none."""
    import json

    from physai_lab.evaluation.components import trained_questions

    assert trained_questions(tmp_path) == {c: qs[0] for c, qs in QUESTIONS.items()}
    (tmp_path / "manifest.json").write_text(json.dumps({"components": {"questions": {
        "planner": ["what is the next subgoal?"], "safety": list(QUESTIONS["safety"])}}}))
    got = trained_questions(tmp_path)
    assert got["planner"] == "what is the next subgoal?" and got["monitor"] == QUESTIONS["monitor"][0]
