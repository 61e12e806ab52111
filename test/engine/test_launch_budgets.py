"""Launch and synchronisation budgets of the GPU code path at pi0's real sizes, counted on the meta
device (physai_lab.op_count.count_dispatch: an op that does work is about one kernel launch on a GPU;
an H200 profile of one eager pi0 chunk, bench/results/gpu, counted 8,873 launches where this
counts 9,648 ops). The ceilings are the counts of today's code: a change that adds launches,
host synchronisations or host<->device copies fails here, on a CPU, before a GPU pays for it.
Lower a ceiling when a change lowers its count. The aim: no host synchronisation and no host
copy inside the denoise loop, the action-expert tick and the decode step (the zeros below), and
operators per chunk near realtime-vla's structure (a few fused GEMM-like operations per layer):
today the fast path dispatches ~29 ops per prefix layer (27 vision + 18 VLM layers) and ~46 per
expert layer and denoise step, far from it."""
import dataclasses

import pytest
import torch

from physai_ros.engine import EngineInput, Pi0Config, Pi0Engine
from physai_ros.engine.batching import collate
from physai_ros.engine.checkpoint.params import param_shapes
from physai_ros.engine.language.decoder import SamplingParams
from physai_lab.op_count import count_dispatch
from physai_ros.engine.rtc import RtcGuide
from physai_ros.engine.streaming.expert import StreamingExpert
from physai_ros.engine.streaming.streams import StreamingConfig, StreamingCore

PI05 = dict(policy="pi05", time_schedule="multiply", rope_style="multiply")
PROMPT = 48  # tokens, as LeRobot pads pi0's prompt

# (policy, fast) -> ceilings per part: (ops, host syncs, copies to the device, copies to the host)
CHUNK = {
    ("pi0", True): {"prefix": (1291, 0, 0, 0), "denoise": (8357, 0, 0, 0), "infer": (9693, 0, 6, 2)},
    ("pi0", False): {"prefix": (1528, 0, 0, 0), "denoise": (10221, 0, 0, 0), "infer": (11795, 0, 6, 2)},
    ("pi05", True): {"prefix": (1291, 0, 0, 0), "denoise": (7979, 0, 0, 0), "infer": (9315, 0, 6, 2)},
    # The plain pi0.5 makes each step's flow time on the host (torch.tensor per step): 10 copies.
    ("pi05", False): {"prefix": (1532, 0, 1, 0), "denoise": (11681, 0, 10, 0), "infer": (13259, 0, 17, 2)},
}
DECODE_STEP = {"pi0": (874, 0, 0, 0), "pi05": (878, 0, 1, 0)}  # fast path, one robot
RTC_GUIDED_INFER = (21575, 40, 8, 2)  # fast pi0: the guidance weight is read on the host per step
TICK = {"fused": (415, 0, 8, 2), "plain": (827, 0, 9, 2)}  # steady state, one robot


def _config(policy):
    return Pi0Config.preset("pi0", **(PI05 if policy == "pi05" else {}))


def _weights(cfg):
    return {k: torch.empty(s, device="meta", dtype=torch.bfloat16) for k, s in param_shapes(cfg).items()}


def _input(cfg, views=2):
    gen = torch.Generator().manual_seed(0)
    s = cfg.vision.image_size
    return EngineInput(images=torch.rand(views, 3, s, s, generator=gen) * 2 - 1,
                       image_masks=torch.ones(views, dtype=torch.bool),
                       tokens=torch.randint(0, cfg.vocab_size, (PROMPT,), generator=gen),
                       token_mask=torch.ones(PROMPT, dtype=torch.bool),
                       state=torch.randn(cfg.max_state_dim, generator=gen),
                       noise=torch.randn(cfg.chunk_size, cfg.max_action_dim, generator=gen))


def _check(what, count, ceiling):
    got = (count.ops, count.host_syncs, count.to_device, count.to_host)
    names = ("ops", "host syncs", "copies to the device", "copies to the host")
    over = [f"{n} {g} > {c}" for n, g, c in zip(names, got, ceiling) if g > c]
    assert not over, f"{what}: {', '.join(over)} (today's ceilings; counted {dict(zip(names, got))})"


@pytest.mark.parametrize("policy,fast", sorted(CHUNK))
def test_a_chunk_stays_within_its_launch_budget(policy, fast):
    cfg = _config(policy)
    eng = Pi0Engine(cfg, _weights(cfg), device="meta", dtype=torch.bfloat16, fast=fast)
    inp = _input(cfg)
    b = collate([inp], cfg, "meta", torch.bfloat16)
    cache, c_prefix = count_dispatch(lambda: eng.model.prefix(b.images, b.image_masks, b.tokens, b.token_mask))
    _, c_denoise = count_dispatch(lambda: eng.model.denoise(cache, b.state, b.noise))
    _, c_infer = count_dispatch(lambda: eng.infer([inp]))
    budget = CHUNK[(policy, fast)]
    _check("prefix", c_prefix, budget["prefix"])
    _check("denoise (10 steps)", c_denoise, budget["denoise"])
    _check("infer (prefix + denoise + transfers)", c_infer, budget["infer"])
    assert c_denoise.ops > 1000  # the counter sees the loop at all


@pytest.mark.parametrize("policy", ["pi0", "pi05"])
def test_a_decode_step_stays_within_its_launch_budget(policy):
    cfg = _config(policy)
    eng = Pi0Engine(cfg, _weights(cfg), device="meta", dtype=torch.bfloat16, language=True)
    b = collate([_input(cfg)], cfg, "meta", torch.bfloat16)
    cache = eng.model.prefix(b.images, b.image_masks, b.tokens, b.token_mask)
    dec = eng.language_decoder()
    reqs, _ = count_dispatch(lambda: [dec.start(cache, 0, 5, SamplingParams(max_tokens=4), "q")])
    _, c = count_dispatch(lambda: dec.next_logits(reqs))
    _check("decode step", c, DECODE_STEP[policy])


def test_a_guided_chunk_stays_within_its_launch_budget():
    cfg = _config("pi0")
    eng = Pi0Engine(cfg, _weights(cfg), device="meta", dtype=torch.bfloat16)
    guide = RtcGuide(torch.randn(cfg.chunk_size, cfg.max_action_dim), 3, 6)
    _, c = count_dispatch(lambda: eng.infer([dataclasses.replace(_input(cfg), rtc=guide)]))
    _check("RTC-guided infer", c, RTC_GUIDED_INFER)


@pytest.mark.parametrize("tick", sorted(TICK))
def test_an_action_expert_tick_stays_within_its_launch_budget(tick):
    cfg = _config("pi0")
    (eng, expert), _ = count_dispatch(lambda: StreamingExpert.build(cfg, _weights(cfg), force="random", device="meta",
                                                                    dtype=torch.bfloat16, tick=tick))
    core = StreamingCore(eng, expert, StreamingConfig())
    count_dispatch(lambda: core.add_robot("r0", _input(cfg), seed=0))
    count_dispatch(lambda: core.vlm_pass(0.0))
    count_dispatch(lambda: core.tick(0.0))  # the first tick prepares its buffers
    _, c = count_dispatch(lambda: core.tick(1 / 480))
    _check(f"{tick} tick", c, TICK[tick])
    assert c.ops > 100
