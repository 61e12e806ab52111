"""Tiny random Hugging Face vision-language models, written to a local directory from configs alone.

There is no route to the Hugging Face hub here (and CI must not need one), yet the transformers
backend (hf_vlm.py) must be exercised exactly as a user runs it: `from_pretrained` on a directory
holding config.json, weights, a tokenizer and an image processor. `write_tiny_vlm` builds such a
directory for three families people run as pipeline components: SmolVLM (Idefics3), PaliGemma and
Qwen2.5-VL (ROSA's). Weights are random (seeded), sizes tiny (hidden 32, one layer, 32 px images),
so answers are gibberish but deterministic, and a model loads and answers in well under a second.

The tokenizer is this repository's small byte-level BPE (assets/tokenizer.json: any text encodes)
plus each family's special tokens; each processor gets its family's chat template where the real
model ships one (SmolVLM, Qwen2.5-VL), none for PaliGemma (it has none: the backend's plain path).
Qwen2.5-VL's processor is saved without a video processor (hf_processor.py says why).

    python -m physai_ros.pipeline.hf_tiny smolvlm /tmp/tiny-smolvlm
"""
from __future__ import annotations

import argparse
from pathlib import Path

from physai_ros.pipeline.hf_processor import image_only

FAMILIES = ("smolvlm", "paligemma", "qwen2_5_vl")
TOKENIZER_JSON = Path(__file__).resolve().parents[1] / "assets" / "tokenizer.json"

# Shared tiny sizes: hidden 32, 2 heads of 16, one layer; 32 px images in patches of 8 (16 patches).
HIDDEN, HEADS, HEAD_DIM, MLP, LAYERS = 32, 2, 16, 64, 1
IMAGE, PATCH = 32, 8
# Weights drawn wider than the usual 0.02: at 0.02 a one-layer model's greedy answer is one token
# repeated whatever it sees, and tests comparing batched with one-by-one answers would prove nothing.
INIT = 0.5

# The chat templates the real checkpoints ship (SmolVLM-256M-Instruct's; Qwen2.5-VL's without its
# system prompt, video and tool branches): the backend renders prompts through them as it would
# for the real model.
SMOLVLM_TEMPLATE = (
    "<|im_start|>{% for message in messages %}{{message['role'] | capitalize}}"
    "{% if message['content'][0]['type'] == 'image' %}{{':'}}{% else %}{{': '}}{% endif %}"
    "{% for line in message['content'] %}{% if line['type'] == 'text' %}{{line['text']}}"
    "{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}<end_of_utterance>\n"
    "{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)
QWEN_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for content in message['content'] %}{% if content['type'] == 'image' %}"
    "<|vision_start|><|image_pad|><|vision_end|>{% elif content['type'] == 'text' %}{{ content['text'] }}"
    "{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _tokenizer(bos: str, eos: str, pad: str, specials: list[str], **extra):
    """The repository's BPE with the family's special tokens, as a transformers fast tokenizer."""
    from tokenizers import AddedToken, Tokenizer
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer.from_file(str(TOKENIZER_JSON))
    tok.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in specials])
    # Left padding: batched generation appends new tokens on the right of every row.
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=bos, eos_token=eos, pad_token=pad,
                                   unk_token=None, padding_side="left", **extra)


def _text(vocab: int, bos: int, eos: int, pad: int) -> dict:
    return dict(vocab_size=vocab, hidden_size=HIDDEN, intermediate_size=MLP, num_hidden_layers=LAYERS,
                num_attention_heads=HEADS, num_key_value_heads=1, head_dim=HEAD_DIM,
                max_position_embeddings=512, bos_token_id=bos, eos_token_id=eos, pad_token_id=pad,
                tie_word_embeddings=False, initializer_range=INIT)


def _vision() -> dict:
    return dict(hidden_size=HIDDEN, intermediate_size=MLP, num_hidden_layers=LAYERS,
                num_attention_heads=HEADS, image_size=IMAGE, patch_size=PATCH, initializer_range=INIT)


def _smolvlm():
    from transformers import Idefics3Config, Idefics3ForConditionalGeneration, Idefics3Processor
    from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil

    specials = ["<|im_start|>", "<end_of_utterance>", "<fake_token_around_image>", "<image>", "<global-img>"]
    specials += [f"<row_{i + 1}_col_{j + 1}>" for i in range(6) for j in range(6)]
    tok = _tokenizer("<|im_start|>", "<end_of_utterance>", "<pad>", specials)
    # No splitting into sub-images: one 32 px global image per view, (32/8)^2 / 2^2 = 4 tokens.
    images = Idefics3ImageProcessorPil(size={"longest_edge": IMAGE}, max_image_size={"longest_edge": IMAGE},
                                       do_image_splitting=False)
    proc = Idefics3Processor(image_processor=images, tokenizer=tok, image_seq_len=4,
                             chat_template=SMOLVLM_TEMPLATE)
    t = proc.tokenizer
    ids = dict(bos=t.bos_token_id, eos=t.eos_token_id, pad=t.pad_token_id)
    config = Idefics3Config(vision_config=_vision(), text_config=dict(_text(len(t), **ids), model_type="llama"),
                            scale_factor=2, image_token_id=t.convert_tokens_to_ids("<image>"),
                            pad_token_id=ids["pad"], initializer_range=INIT)
    return proc, Idefics3ForConditionalGeneration, config, ids


def _paligemma():
    from transformers import PaliGemmaConfig, PaliGemmaForConditionalGeneration, PaliGemmaProcessor
    from transformers.models.siglip.image_processing_pil_siglip import SiglipImageProcessorPil

    tok = _tokenizer("<bos>", "<eos>", "<pad>", ["<image>"])
    images = SiglipImageProcessorPil(size={"height": IMAGE, "width": IMAGE})
    images.image_seq_length = (IMAGE // PATCH) ** 2  # what PaliGemma's own processor config carries
    proc = PaliGemmaProcessor(image_processor=images, tokenizer=tok)  # adds its <locNNNN>/<segNNN> tokens
    t = proc.tokenizer
    ids = dict(bos=t.bos_token_id, eos=t.eos_token_id, pad=t.pad_token_id)
    config = PaliGemmaConfig(vision_config=dict(_vision(), projection_dim=HIDDEN),
                             text_config=dict(_text(len(t), **ids), model_type="gemma"),
                             projection_dim=HIDDEN, image_token_id=t.convert_tokens_to_ids("<image>"))
    return proc, PaliGemmaForConditionalGeneration, config, ids


def _qwen2_5_vl():
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration, Qwen2_5_VLProcessor
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    specials = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|vision_start|>", "<|vision_end|>",
                "<|image_pad|>", "<|video_pad|>"]
    tok = _tokenizer(None, "<|im_end|>", "<|endoftext|>", specials)
    # Patches of 4 px merged 2x2: a 32x32 view is 8x8 patches, 16 image tokens (min = max pixels,
    # so every view is resized to exactly 32x32 whatever its size).
    patch = 4
    images = Qwen2VLImageProcessorPil(patch_size=patch, merge_size=2, temporal_patch_size=2,
                                      min_pixels=IMAGE * IMAGE, max_pixels=IMAGE * IMAGE)
    # No video processor: every video processor class needs torchvision (hf_processor.py says why).
    proc = image_only(Qwen2_5_VLProcessor)(image_processor=images, tokenizer=tok, video_processor=None,
                                           chat_template=QWEN_TEMPLATE)
    t = proc.tokenizer
    ids = dict(bos=t.convert_tokens_to_ids("<|im_start|>"), eos=t.eos_token_id, pad=t.pad_token_id)
    text = _text(len(t), **ids)
    # Multimodal RoPE: temporal/height/width sections cover head_dim / 2 = 8 frequencies.
    text["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]}
    vision = dict(depth=LAYERS, hidden_size=HIDDEN, intermediate_size=MLP, num_heads=HEADS,
                  out_hidden_size=HIDDEN, patch_size=patch, spatial_merge_size=2, temporal_patch_size=2,
                  window_size=IMAGE, fullatt_block_indexes=[0], initializer_range=INIT)
    config = Qwen2_5_VLConfig(text_config=text, vision_config=vision,
                              image_token_id=t.convert_tokens_to_ids("<|image_pad|>"),
                              video_token_id=t.convert_tokens_to_ids("<|video_pad|>"),
                              vision_start_token_id=t.convert_tokens_to_ids("<|vision_start|>"),
                              vision_end_token_id=t.convert_tokens_to_ids("<|vision_end|>"))
    return proc, Qwen2_5_VLForConditionalGeneration, config, ids


_BUILDERS = {"smolvlm": _smolvlm, "paligemma": _paligemma, "qwen2_5_vl": _qwen2_5_vl}


def write_tiny_vlm(family: str, directory: str | Path, seed: int = 0) -> Path:
    """Write a tiny random `family` model (config, safetensors weights, tokenizer, image processor,
    chat template) to `directory`, loadable with `from_pretrained(directory, local_files_only=True)`
    like a downloaded checkpoint. Same family and seed, same weights."""
    if family not in _BUILDERS:
        raise ValueError(f"unknown tiny VLM family {family!r}; one of {', '.join(FAMILIES)}")
    import torch

    proc, model_cls, config, ids = _BUILDERS[family]()
    with torch.random.fork_rng(devices=[]):  # seeded init without moving the caller's RNG
        torch.manual_seed(seed)
        model = model_cls(config).eval()
    # Greedy and short by default, and the right stop/pad ids for generate().
    model.generation_config.update(do_sample=False, max_new_tokens=16, bos_token_id=ids["bos"],
                                   eos_token_id=ids["eos"], pad_token_id=ids["pad"])
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    proc.save_pretrained(out)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Write a tiny random vision-language model to a directory "
                                             "(for trying and testing the transformers pipeline backend).")
    ap.add_argument("family", choices=FAMILIES)
    ap.add_argument("directory")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    print(write_tiny_vlm(args.family, args.directory, args.seed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
