"""The GPU code path, checked on a CPU machine. An engine built on the meta device takes the
path a CUDA engine takes (no oneDNN packing, device-resident tables) without computing anything,
so a tensor made on the CPU that meets a device tensor fails here as it would on a GPU: three such
bugs reached an H200 before these tests existed (bench/results/gpu). bf16 runs on the CPU too, as
the GPU runs it: two dtype mismatches also reached the H200 first."""
import dataclasses

import pytest
import torch

from physai_ros.engine import Pi0Config, Pi0Engine, random_weights
from physai_ros.engine.batching import collate
from physai_ros.engine.language.decoder import SamplingParams
from physai_lab.op_count import count_dispatch
from physai_ros.engine.rtc import RtcGuide
from physai_ros.engine.streaming.expert import StreamingExpert
from physai_ros.engine.streaming.streams import StreamingConfig, StreamingCore

from engine_helpers import make_input

PI05 = dict(policy="pi05", time_schedule="multiply", rope_style="multiply")
CONFIGS = {"pi0": Pi0Config.preset("tiny"), "pi05": Pi0Config.preset("tiny", **PI05)}


def _inputs(cfg, n=2, seed=1):
    gen = torch.Generator().manual_seed(seed)
    return [make_input(cfg, 2, 6, gen) for _ in range(n)]


def _on_meta(fn):
    """Run fn on meta tensors to its end: count_dispatch answers the host's reads of device values
    (a meta tensor holds none), so every op runs and any CPU tensor meeting a device one fails."""
    return count_dispatch(fn)[0]


@pytest.mark.parametrize("policy", ["pi0", "pi05"])
@pytest.mark.parametrize("mode", [dict(fast=False), dict(fast=True), dict(fast=True, backend="triton"),
                                  dict(fast=True, language=True)])
def test_every_engine_mode_keeps_its_tensors_on_the_device(policy, mode):
    cfg = CONFIGS[policy]
    eng = Pi0Engine(cfg, random_weights(cfg), device="meta", dtype=torch.bfloat16, **mode)
    batch = _inputs(cfg)
    _on_meta(lambda: eng.infer(batch))
    # RTC: the guided denoise differentiates through the velocity on the device.
    guide = RtcGuide(torch.randn(cfg.chunk_size, cfg.max_action_dim), 2, 5)
    _on_meta(lambda: eng.infer([dataclasses.replace(batch[0], rtc=guide), batch[1]]))
    # The static shapes of the CUDA-graph path, as far as it goes without CUDA.
    from physai_ros.engine.cuda_graphs import static_collate_kwargs

    b = collate(batch, cfg, "meta", torch.bfloat16, **static_collate_kwargs(cfg, batch))
    actions, _ = eng.model.denoise(eng.model.prefix(b.images, b.image_masks, b.tokens, b.token_mask), b.state, b.noise)
    assert actions.device.type == "meta"
    if mode.get("language") or not mode.get("fast"):
        dec = eng.language_decoder()
        cache = eng.model.prefix(b.images, b.image_masks, b.tokens, b.token_mask)
        reqs = _on_meta(lambda: [dec.start(cache, r, 3, SamplingParams(max_tokens=3), str(r)) for r in range(2)])
        assert _on_meta(lambda: dec.next_logits(reqs)).device.type == "meta"


@pytest.mark.parametrize("weights_on", ["cpu", "meta"])  # loaded on the host, or drawn on the device
@pytest.mark.parametrize("tick", ["fused", "plain"])
def test_streaming_engine_keeps_its_tensors_on_the_device(tick, weights_on):
    cfg = CONFIGS["pi0"]
    w = {k: v.to(weights_on) for k, v in random_weights(cfg).items()}
    eng, expert = _on_meta(lambda: StreamingExpert.build(cfg, w, force="random", device="meta",
                                                         dtype=torch.bfloat16, tick=tick))
    core = StreamingCore(eng, expert, StreamingConfig())
    core.add_robot("r0", _inputs(cfg, 1)[0], seed=0)
    core.vlm_pass(0.0)
    _on_meta(lambda: core.tick(0.0))


@pytest.mark.parametrize("policy", ["pi0", "pi05"])
@pytest.mark.parametrize("fast", [False, True])
def test_bf16_chunks_follow_the_fp32_chunks(policy, fast):
    cfg = CONFIGS[policy]
    w = random_weights(cfg, seed=2)
    batch = _inputs(cfg)
    ref = Pi0Engine(cfg, {k: v.clone() for k, v in w.items()}, fast=False).infer(batch)
    got = Pi0Engine(cfg, {k: v.clone() for k, v in w.items()}, fast=fast, dtype=torch.bfloat16).infer(batch)
    for g, r in zip(got, ref):
        rel = float((g.actions.double() - r.actions.double()).norm() / r.actions.double().norm())
        assert rel < 6e-2, rel  # bf16 operands through 10 denoise steps of a random model: ~1e-2


@pytest.mark.parametrize("tick", ["fused", "plain"])
def test_bf16_streaming_ticks_follow_the_fp32_ticks(tick):
    cfg = CONFIGS["pi0"]
    w = random_weights(cfg, seed=3)
    out = {}
    for dt in (torch.float32, torch.bfloat16):
        eng, expert = StreamingExpert.build(cfg, {k: v.clone() for k, v in w.items()}, force="random", dtype=dt,
                                            tick=tick)
        core = StreamingCore(eng, expert, StreamingConfig())
        core.add_robot("r0", _inputs(cfg, 1)[0], seed=0)
        core.vlm_pass(0.0)
        segs = [s for i in range(40) for s in core.tick(i / 480)]
        assert segs, "no segment in 40 ticks"
        out[dt] = torch.as_tensor(segs[-1].positions, dtype=torch.float64)
    ref = out[torch.float32]
    assert float((out[torch.bfloat16] - ref).norm() / ref.norm()) < 6e-2
