"""The language stream (engine/language/decoder.py, plain and fast paths) against an independent
implementation: Hugging Face transformers' GemmaForCausalLM (tied LM head) with PaliGemma's
prefix-LM mask, as installed in the LeRobot 0.6.1 reference venv (transformers 5.5.4), run by
scripts/lerobot_reference/reference_language.py (every model path matches an
independent implementation).

The tiny pi0 and pi0.5 presets of test_language.py with random weights; four robots in one
batch: views padded to three, a missing camera in the middle of the image rows, prompts of 7, 4,
11 and 9 tokens padded to 11, one prompt with a hole inside it (a masked token between valid
ones), and questions of 4, 0, 1 and 2 tokens. Our side embeds the images (SigLIP + projector,
embed_prefix) and saves them with the prompt ids and masks; transformers embeds the text itself.
transformers decodes greedily with a full forward per step (no cache), twice: padding kept with a
2D mask and explicit positions cumsum(valid) - 1 (eager attention), and padding squeezed out with
its default positions (sdpa). Ours decodes the same robots batched on the prefix KV cache.

fp32 on CPU. Two weight sets per preset: random_weights as is, and "peaked" (sharper attention,
stronger layers: see _weights) so the greedy text is not one token repeated. Budget: step logits
within 1e-4 absolute (the budget test_language.py holds the engine's own full recompute to;
logits here are O(4)); measured max errors (pi0 / pi0.5): random plain 1.9e-6 / 2.9e-6, fast
1.8e-6 / 2.4e-6; peaked plain 1.4e-5 / 1.0e-5, fast 1.9e-5 / 1.4e-5; transformers' two modes
are 1.9e-6 (random) and 6e-6 (peaked) apart themselves. Greedy tokens identical at every step.

RoPE: transformers' default rotary computes angles as pos * inv_freq with inv_freq =
1 / theta**(arange(0, d, 2) / d) in float32: our rope_style "multiply" (the pi0.5 preset, every
LeRobot >= 0.4 checkpoint), bit for bit. The pi0 preset keeps "divide" (openpi / LeRobot 0.3:
pos / theta**(2i/d)): compared as is, it differs from transformers in the last float32 bits of
the angles only (checked below), well inside the logits budget.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from physai_ros.engine import Pi0Config, Pi0Engine, random_weights
from physai_ros.engine.batching import collate
from physai_ros.engine.language.decoder import SamplingParams
from physai_ros.engine.pi0.modeling import embed_prefix, rope_angles

from engine_helpers import make_input

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts" / "lerobot_reference"))
from reference_venvs import venv_python  # noqa: E402  (stdlib only)

CONFIGS = {
    "pi0": Pi0Config.preset("tiny"),
    "pi05": Pi0Config.preset("tiny", policy="pi05", time_schedule="multiply", rope_style="multiply"),
}
QUESTIONS = [[5, 9, 17, 3], [], [42], [7, 8]]
STEPS = 6
TOL = 1e-4
MODES = ("padded", "compact")


def max_err(a, b) -> float:
    return float((a.float() - b.float()).abs().max())


def _weights(policy, kind):
    """random_weights ("random"), or those with the VLM's q and k scaled 4x and its layers' output
    projections (o, down) 16x ("peaked"). At the default scale the residual stream stays the
    input token's own embedding and, the LM head being tied, greedy text repeats its input token
    forever: the tokens check would be vacuous (an off-by-one position or a causal prefix gives
    the same text). Peaked, every robot's text has several different tokens and no step's top-2
    logits are within the budget of each other (both checked), so equal greedy text is a real
    check; the sharper attention also amplifies fp32 rounding ~10x (transformers' own two modes
    move apart as much), which is what the budget has to cover."""
    w = random_weights(CONFIGS[policy], {"pi0": 31, "pi05": 32}[policy])
    if kind == "peaked":
        for k in w:
            if k.startswith("vlm.layers."):
                w[k] = w[k] * {"q": 4, "k": 4, "o": 16, "down": 16}.get(k.rsplit(".", 1)[1], 1)
    return w


def _batch(cfg):
    gen = torch.Generator().manual_seed(21)
    inputs = [make_input(cfg, 2, 7, gen), make_input(cfg, 3, 4, gen, masked_views=[1]), make_input(cfg, 1, 11, gen),
              make_input(cfg, 2, 9, gen)]
    inputs[3].token_mask[3] = False  # a hole inside the prompt: positions must skip it
    return collate(inputs, cfg, "cpu", torch.float32)


def _last_prompt_token(b, row):
    return int(b.tokens[row][b.token_mask[row]][-1])


def run_reference(tmp_path: Path, cfg: Pi0Config, w, b) -> dict:
    py = venv_python("0.6.1")
    assert py.exists(), (f"LeRobot 0.6.1 reference environment missing ({py}): `make test` builds it with "
                         "scripts/lerobot_reference/setup_venv06.sh (docs/lerobot_reference.md)")
    x0, pad = embed_prefix(w, cfg, b.images, b.image_masks, b.tokens, b.token_mask)
    n_img = x0.shape[1] - b.tokens.shape[1]
    inputs = {}
    for r in range(len(QUESTIONS)):
        inputs[f"r{r}.image_embeds"] = x0[r, :n_img].contiguous()
        inputs[f"r{r}.image_valid"] = pad[r, :n_img].contiguous()
        inputs[f"r{r}.tokens"] = b.tokens[r].contiguous()
        inputs[f"r{r}.token_valid"] = b.token_mask[r].contiguous()
        inputs[f"r{r}.question"] = torch.tensor(QUESTIONS[r], dtype=torch.int64)
    spec = cfg.vlm
    save_file({k: v.contiguous() for k, v in w.items() if k.startswith("vlm.")}, str(tmp_path / "w.safetensors"))
    save_file(inputs, str(tmp_path / "in.safetensors"))
    (tmp_path / "spec.json").write_text(json.dumps({
        "width": spec.width, "depth": spec.depth, "mlp_dim": spec.mlp_dim, "num_heads": spec.num_heads,
        "num_kv_heads": spec.num_kv_heads, "head_dim": spec.head_dim, "vocab_size": cfg.vocab_size,
        "rms_eps": cfg.rms_eps, "rope_theta": cfg.rope_theta, "robots": len(QUESTIONS), "steps": STEPS}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env["OMP_NUM_THREADS"] = "1"
    proc = subprocess.run([str(py), str(ROOT / "scripts" / "lerobot_reference" / "reference_language.py"),
                           "--weights", str(tmp_path / "w.safetensors"), "--inputs", str(tmp_path / "in.safetensors"),
                           "--spec", str(tmp_path / "spec.json"), "--out", str(tmp_path / "out.safetensors")],
                          capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return load_file(str(tmp_path / "out.safetensors"))


@pytest.fixture(scope="module", params=[(p, k) for p in sorted(CONFIGS) for k in ("random", "peaked")],
                ids=lambda p: f"{p[0]}-{p[1]}")
def case(request, tmp_path_factory):
    policy, kind = request.param
    cfg = CONFIGS[policy]
    w = _weights(policy, kind)
    b = _batch(cfg)
    ref = run_reference(tmp_path_factory.mktemp(f"lang_{policy}_{kind}"), cfg, w, b)
    return f"{policy}-{kind}", cfg, w, b, ref


def _decode(decoder, cache, b):
    """Our greedy decode of every robot, batched on the prefix cache: per robot the step logits
    [STEPS, vocab] and tokens."""
    reqs = [decoder.start(cache, r, _last_prompt_token(b, r), SamplingParams(max_tokens=STEPS), f"r{r}", question=q)
            for r, q in enumerate(QUESTIONS)]
    logits = [[] for _ in reqs]
    while not all(r.done for r in reqs):
        step = decoder.next_logits(reqs)
        for r, (req, lg) in enumerate(zip(reqs, step)):
            if req.done:
                continue
            logits[r].append(lg)
            req.tokens.append(int(torch.argmax(lg)))
            req.done = len(req.tokens) == STEPS
    return [torch.stack(lg) for lg in logits], [r.tokens for r in reqs]


def test_the_inputs_and_the_rope_convention_agree(case):
    """transformers' scaled token embedding gives our prompt rows; its rotary frequencies are our
    "multiply" angles bit for bit, and "divide" only to float32 rounding."""
    policy, cfg, w, b, ref = case
    x0, pad = embed_prefix(w, cfg, b.images, b.image_masks, b.tokens, b.token_mask)
    n_img = x0.shape[1] - b.tokens.shape[1]
    for r in range(len(QUESTIONS)):
        assert torch.equal(ref[f"r{r}.prompt_embeds"], x0[r, n_img:])
    assert float(ref["rope_attention_scaling"]) == 1.0
    pos = torch.arange(cfg.max_prefix_len + 64)
    theirs = pos.float()[:, None] * ref["rope_inv_freq"][None]  # GemmaRotaryEmbedding.forward's product
    assert torch.equal(rope_angles(pos, cfg.vlm.head_dim, cfg.rope_theta, "multiply"), theirs)
    divide = rope_angles(pos, cfg.vlm.head_dim, cfg.rope_theta, "divide")
    assert 0 < max_err(divide, theirs) <= 1e-5  # not identical: measured 3.8e-6 rad (ulps of angles up to 175 rad)
    assert cfg.rope_style == ("multiply" if policy.startswith("pi05") else "divide")


def test_the_two_transformers_paddings_agree(case):
    """Padding kept (2D mask, positions cumsum(valid) - 1) and padding dropped (default positions)
    are the same text in transformers itself."""
    *_, ref = case
    for r in range(len(QUESTIONS)):
        assert torch.equal(ref[f"r{r}.padded.tokens"], ref[f"r{r}.compact.tokens"])
        assert max_err(ref[f"r{r}.padded.logits"], ref[f"r{r}.compact.logits"]) <= TOL


@pytest.mark.parametrize("path", ["plain", "fast"])
def test_step_logits_and_greedy_text_match_transformers(case, path):
    policy, cfg, w, b, ref = case
    eng = Pi0Engine(cfg, {k: v.clone() for k, v in w.items()}, fast=path == "fast", language=path == "fast")
    cache = eng.model.prefix(b.images, b.image_masks, b.tokens, b.token_mask)
    logits, tokens = _decode(eng.language_decoder(), cache, b)
    worst = 0.0
    for r in range(len(QUESTIONS)):
        if policy.endswith("peaked"):
            assert len(set(tokens[r])) >= 4, tokens[r]  # real text, not one token repeated
        top2 = logits[r].topk(2, dim=-1).values
        assert float((top2[:, 0] - top2[:, 1]).min()) > 2 * TOL  # no near-tie: the budget decides no argmax
        for mode in MODES:
            theirs = ref[f"r{r}.{mode}.logits"]
            assert theirs.abs().max() > 0.5  # not a degenerate model
            for s in range(STEPS):  # step by step, so a failure names the first step that drifts
                err = max_err(logits[r][s], theirs[s])
                assert err <= TOL, f"{policy} {path} robot {r} ({mode}) step {s}: max |dlogit| {err:.3g}"
                worst = max(worst, err)
            assert tokens[r] == ref[f"r{r}.{mode}.tokens"].tolist(), (policy, path, r, mode)
    print(f"{policy} {path}: max |dlogit| vs transformers {worst:.3g}")
