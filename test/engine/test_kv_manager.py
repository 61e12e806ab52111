"""The unified KV cache manager (engine/language/kv_manager.py): OxyGen's STORE / RETRIEVE / UPDATE /
REMOVE / BATCH / UNBATCH, Algorithm 1's per-frame flow against decoding each request alone, and
the per-robot memory bound."""
import pytest
import torch

from physai_ros.engine import Pi0Config, Pi0Engine, random_weights
from physai_ros.engine.batching import collate
from physai_ros.engine.language.decoder import DONE_BUDGET, SamplingParams
from physai_ros.engine.language.kv_manager import DONE_MEMORY, KVBudgetError, KVCacheManager

from engine_helpers import make_input

CFG = Pi0Config.preset("tiny", policy="pi05", time_schedule="multiply", rope_style="multiply")


def _frames(n, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [collate([make_input(CFG, 2, 5 + f, gen), make_input(CFG, 1, 9, gen)], CFG, "cpu", torch.float32)
            for f in range(n)]


def _last(b, row):
    return int(b.tokens[row][b.token_mask[row]][-1])


@pytest.fixture(scope="module")
def engine():
    return Pi0Engine(CFG, random_weights(CFG, 1), language=True)


def test_algorithm_1_per_frame_flow_equals_each_request_decoded_alone(engine):
    """Each frame: prefill once, denoise actions on that cache, store a new request per robot
    from the same cache, BATCH every active request (this frame's and earlier frames'), decode k
    tokens, UNBATCH, REMOVE the finished. Texts, their K/V and the actions equal the references."""
    dec, m = engine.language_decoder(), KVCacheManager(robot_budget_bytes=1 << 30)
    params = SamplingParams(max_tokens=7)
    k, frames = 3, _frames(4)
    texts, kv_rows, alone_actions = {}, {}, []
    for f, b in enumerate(frames):
        cache = engine.model.prefix(b.images, b.image_masks, b.tokens, b.token_mask)
        actions, _ = engine.model.denoise(cache, b.state, b.noise)
        alone_actions.append((actions, b))
        for row, robot in enumerate(("robot_0", "robot_1")):
            rid = m.store(dec.start(cache, row, _last(b, row), params, f"{robot}/{f}"), robot)
            texts[rid] = (f, row)
        active = m.active()
        state = m.batch(active, k)
        dec.decode_batched(state, k)
        m.unbatch(state)
        for rid in active:
            r = m.retrieve(rid)
            kv_rows[rid] = (list(r.tokens), r.gen_keys[0].clone())
        m.remove_done()
    # Frames keep decoding after the last one until every text is done.
    while m.active():
        active = m.active()
        state = m.batch(active, k)
        dec.decode_batched(state, k)
        m.unbatch(state)
        for rid in active:
            kv_rows[rid] = (list(m.retrieve(rid).tokens), m.retrieve(rid).gen_keys[0].clone())
        m.remove_done()
    assert m.stats["stored"] == m.stats["removed"] == 8 and m.total_bytes() == 0
    for rid, (f, row) in texts.items():
        b = frames[f]
        cache = engine.model.prefix(b.images, b.image_masks, b.tokens, b.token_mask)
        ref = dec.start(cache, row, _last(b, row), params, "ref")
        dec.generate([ref])
        tokens, gen_k = kv_rows[rid]
        assert tokens == ref.tokens and ref.reason == DONE_BUDGET, rid
        torch.testing.assert_close(gen_k, ref.gen_keys[0], rtol=0, atol=1e-5)
    for actions, b in alone_actions:  # the language stream never touched the actions
        cache = engine.model.prefix(b.images, b.image_masks, b.tokens, b.token_mask)
        assert torch.equal(engine.model.denoise(cache, b.state, b.noise)[0], actions)


def test_store_retrieve_update_remove_and_the_memory_bound(engine):
    dec = engine.language_decoder()
    b = _frames(1, seed=3)[0]
    cache = engine.model.prefix(b.images, b.image_masks, b.tokens, b.token_mask)
    req = dec.start(cache, 0, _last(b, 0), SamplingParams(max_tokens=50), "a")
    one = req.kv_bytes()
    row = 2 * CFG.vlm.depth * CFG.vlm.num_kv_heads * CFG.vlm.head_dim * 4
    m = KVCacheManager(robot_budget_bytes=one + 3 * row, max_requests_per_robot=2)
    rid = m.store(req, "robot_0")
    assert m.retrieve(rid) is req and m.bytes_of("robot_0") == one and m.bytes_of("robot_1") == 0
    with pytest.raises(KVBudgetError, match="robot_0: language KV memory full"):
        m.store(dec.start(cache, 0, _last(b, 0), SamplingParams(), "b"), "robot_0")
    other = m.store(dec.start(cache, 1, _last(b, 1), SamplingParams(), "c"), "robot_1")  # its own budget
    # Decoding may add 3 rows to robot_0 within its budget (the first token adds none: its input
    # is the prompt's last token, already cached); a 4th would exceed it: the request is ended
    # with reason "memory" before anything is allocated.
    for _ in range(8):
        m.cap([rid], 1)
        if req.done:
            break
        state = m.batch([rid], 1)
        dec.decode_batched(state, 1)
        m.unbatch(state)
    assert req.reason == DONE_MEMORY and m.bytes_of("robot_0") == one + 3 * row and len(req.tokens) == 4
    assert m.stats["cut_for_memory"] == 1 and m.stats["refused"] == 1
    m.update(other, m.retrieve(other))
    m.remove(rid)
    m.remove(rid)  # removing twice is harmless
    assert m.active() == [other]
    with pytest.raises(KeyError):
        m.update(rid, req)


def test_decode_budget_lowers_k_before_actions_slip():
    from physai_ros.engine.language.frame import DecodeBudget

    b = DecodeBudget(k_max=8, f_min_hz=10.0)  # 100 ms per frame
    assert b.choose(0.05, 2) == 8  # nothing measured yet: the configured k
    b.record(2, 4, 0.020)  # 5 ms per step at batch 2
    assert b.choose(0.05, 2) == 8  # 50 ms left: 10 steps fit, capped at 8
    assert b.choose(0.08, 2) == 4  # 20 ms left: 4 steps
    assert b.choose(0.12, 2) == 0  # actions alone miss the floor: no text this frame
    assert b.choose(0.08, 5) == 4  # an unmeasured batch size borrows the slowest known step
    b.record(2, 2, 0.040)  # slower steps now: 20 ms, averaged in
    assert b.step_s[2] == pytest.approx(0.7 * 0.005 + 0.3 * 0.020)
    with pytest.raises(ValueError):
        DecodeBudget(k_max=4, f_min_hz=0.0)


def test_run_frame_holds_the_floor_and_reports_texts(engine):
    """Algorithm 1 through run_frame with a fake clock: the frame's k follows the budget, new
    requests start from the frame's own cache, finished ones are reported and removed."""
    from physai_ros.engine.language.frame import DecodeBudget, run_frame

    ticks = iter(float(i) * 0.01 for i in range(10_000))  # every clock read advances 10 ms
    dec, m = engine.language_decoder(), KVCacheManager(robot_budget_bytes=1 << 30)
    budget = DecodeBudget(k_max=3, f_min_hz=10.0)
    frames = _frames(3, seed=5)
    r0 = run_frame(engine, dec, m, budget, frames[0], ["robot_0", "robot_1"],
                   {"robot_0": SamplingParams(max_tokens=4)}, clock=lambda: next(ticks))
    assert r0.k == 3 and set(r0.new_requests) == {"robot_0"} and len(r0.emitted[r0.new_requests["robot_0"]]) == 3
    direct, _ = engine.model.denoise(engine.model.prefix(frames[0].images, frames[0].image_masks, frames[0].tokens,
                                                         frames[0].token_mask), frames[0].state, frames[0].noise)
    assert torch.equal(r0.actions, direct)
    r1 = run_frame(engine, dec, m, budget, frames[1], ["robot_0", "robot_1"],
                   {"robot_1": SamplingParams(max_tokens=2)}, clock=lambda: next(ticks))
    # The fake clock made one decode step cost 10 / 3 ms and the actions 10 ms: 3 steps fit.
    assert r1.k == 3 and r1.finished == {r0.new_requests["robot_0"]: DONE_BUDGET, r1.new_requests["robot_1"]: DONE_BUDGET}
    assert m.active() == [] and m.total_bytes() == 0
    slow = DecodeBudget(k_max=3, f_min_hz=50.0, step_s={1: 0.05})  # 20 ms frames, 50 ms steps
    r2 = run_frame(engine, dec, m, slow, frames[2], ["robot_0", "robot_1"],
                   {"robot_0": SamplingParams(max_tokens=4)}, clock=lambda: next(ticks))
    assert r2.k == 0 and r2.emitted == {} and m.active() == [r2.new_requests["robot_0"]]


def test_run_frame_on_engine_inputs_takes_the_engines_own_action_step(engine):
    """A list of EngineInput runs the engine's infer_frame (its collation, CUDA graphs where
    built): the same chunks, texts and K/V as the frame collated by hand."""
    from physai_ros.engine.language.frame import DecodeBudget, run_frame

    gen = torch.Generator().manual_seed(8)
    inputs = [make_input(CFG, 2, 5, gen), make_input(CFG, 1, 9, gen)]
    ask = {"robot_0": SamplingParams(max_tokens=3), "robot_1": SamplingParams(max_tokens=3)}
    got = {}
    for form, frame in (("inputs", inputs), ("collated", collate(inputs, CFG, "cpu", torch.float32))):
        m = KVCacheManager(robot_budget_bytes=1 << 30)
        r = run_frame(engine, engine.language_decoder(), m, DecodeBudget(k_max=3, f_min_hz=0.001), frame,
                      ["robot_0", "robot_1"], ask)
        got[form] = (r.actions, r.updates, [r.emitted[r.new_requests[k]] for k in ("robot_0", "robot_1")])
    assert torch.equal(got["inputs"][0], got["collated"][0]) and torch.equal(got["inputs"][1], got["collated"][1])
    assert got["inputs"][2] == got["collated"][2] and all(len(t) == 3 for t in got["inputs"][2])


def test_prefill_alone_equals_the_action_steps_prefix(engine):
    """Pi0Engine.prefill (a text task's own prefill in the isolated baseline): the prefix of
    infer_frame, row for row."""
    gen = torch.Generator().manual_seed(9)
    inputs = [make_input(CFG, 2, 5, gen), make_input(CFG, 1, 9, gen)]
    _, cache, _ = engine.infer_frame(inputs, keep_prefix=True)
    alone = engine.prefill(inputs)
    assert all(torch.equal(a, b) for a, b in zip(alone.keys + alone.values, cache.keys + cache.values))
    assert torch.equal(alone.pad, cache.pad) and torch.equal(alone.next_pos, cache.next_pos)
