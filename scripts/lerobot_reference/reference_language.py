#!/usr/bin/env python3
"""Hugging Face transformers' Gemma as an independent reference for the language stream
(physai_ros/engine/language/decoder.py): greedy text from a pi0 / pi0.5 VLM backbone continuing its prefix.

Runs in .venv-lerobot06 (transformers 5.5.4, the release LeRobot 0.6.1 builds its PaliGemma on;
scripts/lerobot_reference/setup_venv06.sh). It imports nothing of physai_ros: the test in the main
venv (test/engine/test_language_transformers.py) writes the inputs to files and compares.

  .venv-lerobot06/bin/python scripts/lerobot_reference/reference_language.py \\
      --weights W.safetensors --inputs IN.safetensors --spec SPEC.json --out OUT.safetensors

  W:    our VLM weights by our names: vlm.embed [vocab, D], vlm.norm [D],
        vlm.layers.{i}.{ln_attn, ln_mlp, q, k, v, o, gate, up, down} (torch Linear layout [out, in])
  SPEC: {"width", "depth", "mlp_dim", "num_heads", "num_kv_heads", "head_dim", "vocab_size",
         "rms_eps", "rope_theta", "robots": R, "steps": N}
  IN:   per robot r: r{r}.image_embeds float32 [V*P, D] (the projected image tokens, rows of a
        missing camera included); r{r}.image_valid bool [V*P]; r{r}.tokens int64 [L] (the prompt
        as collated: padding included); r{r}.token_valid bool [L]; r{r}.question int64 [Q] (Q >= 0)
  OUT:  per robot and mode: r{r}.{mode}.logits float32 [N, vocab] (the logits each greedy step
        chose from), r{r}.{mode}.tokens int64 [N]; r{r}.prompt_embeds float32 [L, D] (transformers'
        scaled token embedding of the prompt); rope_inv_freq float32 [head_dim / 2]; lm_head_tied.

What is transformers' and what is ours. Ours: the weights (renamed one to one), and the image
token embeddings (SigLIP + projector output as our engine's embed_prefix computes it; the prompt,
question and generated tokens are embedded here by GemmaTextScaledWordEmbedding). Transformers':
GemmaForCausalLM (GemmaRMSNorm (1 + w), gelu_pytorch_tanh MLP, GQA through repeat_kv, default
RoPE from rope_theta, scaling head_dim**-0.5, lm_head tied to embed_tokens), and the prefix-LM
attention mask as PaliGemma builds it (modeling_paligemma.create_causal_mask_mapping:
token_type_ids 0 over the prefix -> one bidirectional group, 1 over the text after it -> causal).

Every step is a full forward over [prefix; question; generated so far], no KV cache; the next
token is the argmax of transformers' own logits (its greedy text, not ours fed back).

Padding (a missing camera's rows, prompt padding) in two independent ways, as two modes:
- "padded": the whole collated prefix, padding rows in place, eager attention. The padding is a
  2D attention_mask (0 = no token may attend to that row), the rows are token type 0 like the
  rest of the prefix, and position_ids are given: cumsum(valid) - 1 over the prefix, then
  n_valid + j for the j-th token after it (what our engine computes: padding never shifts a
  position). The outputs at padding rows are never read.
- "compact": only the valid rows, in order, sdpa attention, no attention_mask and no
  position_ids: transformers' own default positions 0..T-1 are then exactly "valid tokens
  counted", so this checks that the padded convention is the same sequence with the holes
  squeezed out, not merely the same arithmetic.
Without a question the first step's logits are the prefix's output at its last valid row (the
prompt's last token, bidirectional like the rest of the prefix); with one, at the question's
last token; after that at the newest generated token.
"""
from __future__ import annotations

import argparse
import json
import math

import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
# transformers' lazy imports reach torchvision, whose CUDA wheel cannot load beside CPU torch:
# lerobot06_compat declares its op schemas first (it changes no math).
import lerobot06_compat  # noqa: E402,F401

MODES = ("padded", "compact")


def build_model(spec: dict, weights: dict, attn: str):
    from transformers import GemmaConfig, GemmaForCausalLM

    cfg = GemmaConfig(
        vocab_size=spec["vocab_size"], hidden_size=spec["width"], intermediate_size=spec["mlp_dim"],
        num_hidden_layers=spec["depth"], num_attention_heads=spec["num_heads"],
        num_key_value_heads=spec["num_kv_heads"], head_dim=spec["head_dim"], hidden_act="gelu_pytorch_tanh",
        rms_norm_eps=spec["rms_eps"], rope_parameters={"rope_type": "default", "rope_theta": spec["rope_theta"]},
        max_position_embeddings=8192, tie_word_embeddings=True, attention_bias=False, pad_token_id=0,
    )
    cfg._attn_implementation = attn
    model = GemmaForCausalLM(cfg).eval().to(torch.float32)
    sd = {"model.embed_tokens.weight": weights["vlm.embed"], "model.norm.weight": weights["vlm.norm"]}
    names = {"ln_attn": "input_layernorm", "ln_mlp": "post_attention_layernorm", "q": "self_attn.q_proj",
             "k": "self_attn.k_proj", "v": "self_attn.v_proj", "o": "self_attn.o_proj", "gate": "mlp.gate_proj",
             "up": "mlp.up_proj", "down": "mlp.down_proj"}
    for i in range(spec["depth"]):
        for ours, theirs in names.items():
            sd[f"model.layers.{i}.{theirs}.weight"] = weights[f"vlm.layers.{i}.{ours}"]
    missing, unexpected = model.load_state_dict(sd, strict=False)
    # The only key not given is the LM head, which must be the tied embedding itself.
    assert set(missing) <= {"lm_head.weight"} and not unexpected, (missing, unexpected)
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr(), "lm_head not tied"
    return model


def prefix_lm_mask(model, embeds, attention_mask, position_ids, token_type_ids):
    """PaliGemma's mask for this sequence, built by transformers' own PaliGemma code (prefill)."""
    from transformers.models.paligemma.modeling_paligemma import create_causal_mask_mapping

    mask = create_causal_mask_mapping(model.config, embeds, attention_mask, None, position_ids,
                                      token_type_ids=token_type_ids, is_first_iteration=True)
    assert isinstance(mask, torch.Tensor) and mask.dim() == 4, type(mask)
    return mask


@torch.no_grad()
def decode(model, image_embeds, image_valid, tokens, token_valid, question, steps, mode):
    embed = model.get_input_embeddings()
    prompt = embed(tokens[None])[0]
    prefix = torch.cat([image_embeds, prompt.to(image_embeds.dtype)], dim=0)
    valid = torch.cat([image_valid, token_valid])
    if mode == "compact":
        prefix, valid = prefix[valid], torch.ones(int(valid.sum()), dtype=torch.bool)
    n_valid, p = int(valid.sum()), prefix.shape[0]
    last_valid = int(torch.nonzero(valid)[-1])
    stream: list = [int(t) for t in question]
    n_q = len(stream)
    logits_out, tokens_out = [], []
    for step in range(steps):
        g = len(stream)
        after = embed(torch.tensor(stream, dtype=torch.long)).to(prefix.dtype)  # [g, D]
        x = torch.cat([prefix, after], dim=0)[None]
        types = torch.cat([torch.zeros(p, dtype=torch.long), torch.ones(g, dtype=torch.long)])[None]
        if mode == "padded":
            am = torch.cat([valid, torch.ones(g, dtype=torch.bool)]).long()[None]
            pos = torch.cat([torch.cumsum(valid.long(), 0) - 1, n_valid + torch.arange(g)])[None]
            mask = prefix_lm_mask(model, x, am, pos, types)
            out = model(inputs_embeds=x, attention_mask=mask, position_ids=pos, use_cache=False)
        else:
            mask = prefix_lm_mask(model, x, None, None, types)
            out = model(inputs_embeds=x, attention_mask=mask, use_cache=False)
        row = p + g - 1 if g else last_valid
        lg = out.logits[0, row].float()
        tok = int(torch.argmax(lg))
        logits_out.append(lg)
        tokens_out.append(tok)
        stream.append(tok)
    assert len(stream) == n_q + steps
    return torch.stack(logits_out), torch.tensor(tokens_out, dtype=torch.int64), prompt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weights", required=True)
    ap.add_argument("--inputs", required=True)
    ap.add_argument("--spec", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.manual_seed(0)
    spec = json.loads(open(a.spec).read())
    weights = {k: v.float() for k, v in load_file(a.weights).items()}
    inputs = load_file(a.inputs)
    out = {}
    models = {"padded": build_model(spec, weights, "eager"), "compact": build_model(spec, weights, "sdpa")}
    for r in range(spec["robots"]):
        c = {k.split(".", 1)[1]: v for k, v in inputs.items() if k.startswith(f"r{r}.")}
        for mode in MODES:
            lg, toks, prompt = decode(models[mode], c["image_embeds"].float(), c["image_valid"].bool(), c["tokens"],
                                      c["token_valid"].bool(), c["question"].tolist(), spec["steps"], mode)
            out[f"r{r}.{mode}.logits"] = lg.contiguous()
            out[f"r{r}.{mode}.tokens"] = toks
        out[f"r{r}.prompt_embeds"] = prompt.float().contiguous()
    rot = models["padded"].model.rotary_emb
    out["rope_inv_freq"] = rot.inv_freq.float().contiguous()
    out["rope_attention_scaling"] = torch.tensor([float(rot.attention_scaling)])
    out["embed_scale"] = models["padded"].model.embed_tokens.embed_scale.float().reshape(1)
    save_file(out, a.out)
    import transformers
    print(json.dumps({"transformers": transformers.__version__, "torch": torch.__version__,
                      "sqrt_width": math.sqrt(spec["width"])}))


if __name__ == "__main__":
    main()
