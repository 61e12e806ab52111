"""The unified KV cache manager (engine/kv_manager.py): OxyGen's STORE / RETRIEVE / UPDATE /
REMOVE / BATCH / UNBATCH, Algorithm 1's per-frame flow against decoding each request alone, and
the per-robot memory bound."""
import pytest
import torch

from physai_ros.engine import Pi0Config, Pi0Engine, random_weights
from physai_ros.engine.batching import collate
from physai_ros.engine.kv_manager import DONE_MEMORY, KVBudgetError, KVCacheManager
from physai_ros.engine.language import DONE_BUDGET, SamplingParams

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
