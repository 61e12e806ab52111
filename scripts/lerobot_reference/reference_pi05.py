#!/usr/bin/env python3
"""LeRobot 0.6.1's PI05 and PI0 as a live reference: build random-weight ones of any size, save and
load them as users get them (checkpoint + pre/post processors), and sample with fixed noise.

Runs in .venv-lerobot06 only (scripts/lerobot_reference/setup_venv06.sh). As a library it serves
scripts/make_lerobot_pi05_fixture.py and time_lerobot_pi05.py; as a command it is what a test in
the main venv calls through subprocess:

  # model level: already-preprocessed inputs -> PI05Pytorch / PI0Pytorch.sample_actions
  .venv-lerobot06/bin/python scripts/lerobot_reference/reference_pi05.py sample \\
      --checkpoint DIR --inputs IN.safetensors --out OUT.safetensors
    IN:  images float32 [B, V, 3, S, S] in [-1, 1]; image_masks bool [B, V]; tokens int64 [B, L];
         token_mask bool [B, L]; noise float32 [B, chunk, max_action_dim];
         state float32 [B, max_state_dim] (pi0 only: normalised and zero-padded)
    OUT: actions float32 [B, chunk, max_action_dim]; updates float32 [steps, B, chunk, max_action_dim]
         (dt * v_t of every Euler step); times float32 [steps]

  # full pipeline: raw observation -> preprocessor -> predict_action_chunk -> postprocessor
  .venv-lerobot06/bin/python scripts/lerobot_reference/reference_pi05.py pipeline \\
      --checkpoint DIR --inputs IN.safetensors --tasks '["pick up the cube", ...]' --out OUT.safetensors \\
      [--tokenizer DIR]
    IN:  observation.state float32 [B, state_dim] (robot units); observation.images.<cam> float32
         [B, 3, H, W] or [B, H, W, 3] in [0, 1] (a camera left out is an empty camera);
         noise float32 [B, chunk, max_action_dim]
    OUT: actions float32 [B, chunk, action_dim] (robot units); normalized_state float32
         [B, state_dim]; tokens int64 [B, tokenizer_max_length]; token_mask bool [B, ...]
    stdout (last line, JSON): {"policy", "prompts": the strings the tokenizer got, "token_ids":
         the unpadded ids per robot}

The policy type (pi05 / pi0) comes from the checkpoint's config.json. The tower sizes do not
(config.json only names gemma_2b / gemma_300m): they are read from the tensor shapes with pi0's
conventions (1 KV head, 16 SigLIP heads), or given with --sizes JSON. The tokenizer defaults to
<checkpoint>/../tokenizer (the fixture's layout).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import lerobot06_compat as lc  # noqa: E402  (declares the torchvision ops before lerobot loads)

BOS, EOS, PAD = "<bos>", "<eos>", "<pad>"


# ---------------------------------------------------------------------------------------------
# the policy's description


@dataclass(frozen=True)
class PolicySpec:
    policy: str  # "pi05" | "pi0"
    sizes: lc.Sizes
    chunk_size: int = 10
    state_dim: int = 6
    action_dim: int = 5
    max_state_dim: int = 8
    max_action_dim: int = 8
    cameras: tuple = ("cam0", "cam1")
    num_steps: int = 10
    tokenizer_max_length: Optional[int] = None  # None: the config's default (pi05 200, pi0 48)
    # FeatureType name -> NormalizationMode name; None: the config's default
    normalization: Optional[Dict[str, str]] = field(default=None, hash=False)


def _features(spec: PolicySpec):
    from lerobot.configs.types import FeatureType, PolicyFeature

    s = spec.sizes.image_size
    inputs = {f"observation.images.{c}": PolicyFeature(type=FeatureType.VISUAL, shape=(3, s, s))
              for c in spec.cameras}
    inputs["observation.state"] = PolicyFeature(type=FeatureType.STATE, shape=(spec.state_dim,))
    outputs = {"action": PolicyFeature(type=FeatureType.ACTION, shape=(spec.action_dim,))}
    return inputs, outputs


def make_config(spec: PolicySpec):
    from lerobot.configs.types import NormalizationMode

    if spec.policy == "pi05":
        from lerobot.policies.pi05.configuration_pi05 import PI05Config as Config
    elif spec.policy == "pi0":
        from lerobot.policies.pi0.configuration_pi0 import PI0Config as Config
    else:
        raise ValueError(f"unknown policy {spec.policy!r}")
    inputs, outputs = _features(spec)
    kwargs = dict(
        dtype="float32", device="cpu", chunk_size=spec.chunk_size, n_action_steps=spec.chunk_size,
        max_state_dim=spec.max_state_dim, max_action_dim=spec.max_action_dim,
        num_inference_steps=spec.num_steps, image_resolution=(spec.sizes.image_size,) * 2,
        input_features=inputs, output_features=outputs,
    )
    if spec.tokenizer_max_length is not None:
        kwargs["tokenizer_max_length"] = spec.tokenizer_max_length
    config = Config(**kwargs)
    if spec.normalization is not None:
        config.normalization_mapping = {k: NormalizationMode[v] for k, v in spec.normalization.items()}
    return config


def policy_class(policy: str):
    if policy == "pi05":
        from lerobot.policies.pi05.modeling_pi05 import PI05Policy
        return PI05Policy
    from lerobot.policies.pi0.modeling_pi0 import PI0Policy
    return PI0Policy


def build_policy(spec: PolicySpec, seed: int, randomize: bool = True):
    """A policy of `spec`'s sizes in fp32 with seeded random weights (see randomize_weights)."""
    lc.use_sizes(spec.sizes)
    config = make_config(spec)
    torch.manual_seed(seed)
    policy = policy_class(spec.policy)(config)
    if randomize:
        randomize_weights(policy.model, seed)
    policy.eval()
    return policy


def randomize_weights(model: torch.nn.Module, seed: int) -> None:
    """LeRobot's init (zero adaRMS dense weights, zero RMSNorm weights, tiny std) leaves a tiny
    model near the identity, which would hide a wrong norm, gate or bias. Every parameter is
    redrawn at a scale that keeps activations O(1): linears N(0, 1/fan_in) (adaRMS dense N(0,
    0.25/fan_in), so 1 + scale and the gate stay O(1)), 1-D weights and biases N(0, 0.1^2)
    (SigLIP LayerNorm scales 1 + that), token embedding N(0, 1/width), positions N(0, 0.25)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1:
                is_layer_norm_scale = "vision_tower" in name and "norm" in name and name.endswith(".weight")
                p.copy_((1.0 if is_layer_norm_scale else 0.0) + 0.1 * torch.randn(p.shape, generator=gen))
            elif "embed_tokens" in name or name.endswith("lm_head.weight"):
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[1]))
            elif "position_embedding" in name:
                p.copy_(0.5 * torch.randn(p.shape, generator=gen))
            else:
                fan_in = math.prod(p.shape[1:])
                scale = 0.5 if "layernorm.dense" in name or "norm.dense" in name else 1.0
                p.copy_(scale * torch.randn(p.shape, generator=gen) / math.sqrt(fan_in))
        # 0.6.1's PaliGemma wrapper replaces the inner model after transformers tied lm_head to
        # the old embedding, so the two are separate tensors and both are saved. from_pretrained
        # copies lm_head into embed_tokens before loading the file's own embed_tokens; equal
        # values make the loaded model the built one whatever the order.
        vlm = model.paligemma_with_expert.paligemma
        vlm.lm_head.weight.copy_(vlm.model.language_model.embed_tokens.weight)


# ---------------------------------------------------------------------------------------------
# tokenizer, processors, checkpoint directory


def write_tokenizer_dir(tokenizer_json: Path, out: Path) -> Path:
    """Our byte-level BPE (physai_ros/assets/tokenizer.json) as a transformers tokenizer directory
    that behaves like PaliGemma's where it matters: <bos> prepended to every prompt, <pad> (id 0)
    for right padding, no <eos>. The BOS comes from a TemplateProcessing post-processor inside
    tokenizer.json, so it does not depend on how a transformers version reads add_bos_token."""
    spec = json.loads(Path(tokenizer_json).read_text())
    vocab = spec["model"]["vocab"]
    bos_id = vocab[BOS]
    spec["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": BOS, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": BOS, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                 {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {BOS: {"id": BOS, "ids": [bos_id], "tokens": [BOS]}},
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "tokenizer.json").write_text(json.dumps(spec, ensure_ascii=False) + "\n")
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": BOS, "eos_token": EOS,
              "pad_token": PAD, "add_bos_token": True, "add_eos_token": False, "padding_side": "right",
              "model_max_length": 1000000}
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    return out


def make_processors(config, stats, tokenizer_dir: Path):
    """LeRobot's own pre/post processor pair for the policy, tokenizer loaded from tokenizer_dir."""
    lc.use_local_tokenizer(tokenizer_dir)
    if config.type == "pi05":
        from lerobot.policies.pi05.processor_pi05 import make_pi05_pre_post_processors as make
    else:
        from lerobot.policies.pi0.processor_pi0 import make_pi0_pre_post_processors as make
    return make(config, dataset_stats=stats)


def save_checkpoint(policy, preprocessor, postprocessor, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    policy.save_pretrained(out)
    preprocessor.save_pretrained(out)
    postprocessor.save_pretrained(out)


def checkpoint_policy_type(ckpt: Path) -> str:
    return json.loads((Path(ckpt) / "config.json").read_text())["type"]


def infer_sizes(ckpt: Path, vision_heads: int = 16) -> lc.Sizes:
    """Tower sizes from model.safetensors' shapes, assuming pi0's one KV head (head_dim = rows of
    k_proj) and `vision_heads` SigLIP heads, the two things shapes cannot tell."""
    from safetensors import safe_open

    with safe_open(str(Path(ckpt) / "model.safetensors"), "pt") as f:
        shape = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
    pre = "model.paligemma_with_expert."
    vlm = pre + "paligemma.model.language_model.layers."
    exp = pre + "gemma_expert.model.layers."
    vis = pre + "paligemma.model.vision_tower.vision_model."
    depth = len({k[len(vlm):].split(".")[0] for k in shape if k.startswith(vlm)})
    vision_depth = len({k[len(vis + "encoder.layers."):].split(".")[0] for k in shape
                        if k.startswith(vis + "encoder.layers.")})
    head_dim = shape[vlm + "0.self_attn.k_proj.weight"][0]
    emb = shape.get(pre + "paligemma.lm_head.weight") or shape[pre + "paligemma.model.language_model.embed_tokens.weight"]
    patch = shape[vis + "embeddings.patch_embedding.weight"]
    positions = shape[vis + "embeddings.position_embedding.weight"][0]
    return lc.Sizes(
        vlm_width=emb[1], vlm_mlp=shape[vlm + "0.mlp.gate_proj.weight"][0],
        expert_width=shape[exp + "0.mlp.gate_proj.weight"][1], expert_mlp=shape[exp + "0.mlp.gate_proj.weight"][0],
        depth=depth, num_heads=shape[vlm + "0.self_attn.q_proj.weight"][0] // head_dim, num_kv_heads=1,
        head_dim=head_dim, vision_width=patch[0], vision_mlp=shape[vis + "encoder.layers.0.mlp.fc1.weight"][0],
        vision_depth=vision_depth, vision_heads=vision_heads, image_size=int(round(math.sqrt(positions))) * patch[-1],
        patch_size=patch[-1], vocab_size=emb[0],
    )


def load_checkpoint(ckpt: Path, sizes: Optional[lc.Sizes] = None, tokenizer_dir: Optional[Path] = None,
                    with_processors: bool = True):
    """(policy, preprocessor, postprocessor) loaded the way a user loads a downloaded checkpoint:
    <Policy>.from_pretrained and lerobot.policies.factory.make_pre_post_processors. LeRobot's from_pretrained
    prints and carries on when weights do not load, so every tensor is checked against the file."""
    from safetensors.torch import load_file

    ckpt = Path(ckpt)
    lc.use_sizes(sizes or infer_sizes(ckpt))
    if with_processors:
        lc.use_local_tokenizer(tokenizer_dir or ckpt.parent / "tokenizer")
    policy = policy_class(checkpoint_policy_type(ckpt)).from_pretrained(str(ckpt), local_files_only=True)
    policy.eval()
    state = policy.state_dict()
    for k, v in load_file(str(ckpt / "model.safetensors")).items():
        if k not in state or not torch.equal(state[k], v):
            raise RuntimeError(f"{ckpt}: {k} did not load into the policy (sizes wrong?)")
    if not with_processors:
        return policy, None, None
    from lerobot.policies.factory import make_pre_post_processors

    # lerobot's own loader for a pretrained path (it also wires the post pipeline's converters).
    pre, post = make_pre_post_processors(policy.config, pretrained_path=str(ckpt))
    return policy, pre, post


# ---------------------------------------------------------------------------------------------
# sampling


@dataclass
class Sample:
    actions: torch.Tensor  # [B, chunk, max_action_dim] (model level: normalised space)
    times: List[float]  # the float32 flow time of each Euler step as LeRobot built it
    updates: torch.Tensor  # [steps, B, chunk, max_action_dim]: dt * v_t


class _ObserveSteps:
    """Records each denoise_step's time and velocity without changing the computation
    (sample_actions looks self.denoise_step up at every step)."""

    def __init__(self, model):
        self.model, self.times, self.velocities = model, [], []

    def __enter__(self):
        original = type(self.model).denoise_step.__get__(self.model)

        def observed(*args, **kwargs):
            v = original(*args, **kwargs)
            self.times.append(float(kwargs["timestep"][0]))
            self.velocities.append(v.clone())
            return v

        self.model.denoise_step = observed
        return self

    def __exit__(self, *exc):
        del self.model.denoise_step

    def updates(self, num_steps: int) -> torch.Tensor:
        return torch.stack(self.velocities) * (-1.0 / num_steps)


@torch.no_grad()
def sample_model(policy, images: torch.Tensor, image_masks: torch.Tensor, tokens: torch.Tensor,
                 token_mask: torch.Tensor, noise: torch.Tensor, state: Optional[torch.Tensor] = None) -> Sample:
    """<Policy>.model.sample_actions on prepared inputs: images [B, V, 3, S, S] in [-1, 1] ->
    LeRobot's per-view lists; state only for pi0."""
    model = policy.model
    # Fresh (allocator-aligned) copies: the same values at another alignment (e.g. tensors read
    # from a different safetensors file) can change fp32 kernels' summation by ~5e-7, and the
    # fixture and the command line should agree bit for bit.
    images, image_masks, tokens, token_mask, noise = (
        t.clone() for t in (images, image_masks, tokens, token_mask, noise))
    state = None if state is None else state.clone()
    views = images.shape[1]
    args = ([images[:, v].contiguous() for v in range(views)], [image_masks[:, v] for v in range(views)], tokens, token_mask)
    if policy.config.type == "pi0":
        if state is None:
            raise ValueError("pi0 needs the (normalised, padded) state")
        args = args + (state,)
    with _ObserveSteps(model) as obs:
        actions = model.sample_actions(*args, noise=noise.clone())
    return Sample(actions=actions, times=obs.times, updates=obs.updates(policy.config.num_inference_steps))


@dataclass
class PipelineRun:
    actions: torch.Tensor  # [B, chunk, action_dim], robot units
    model_actions: torch.Tensor  # [B, chunk, action_dim]: predict_action_chunk's output (normalised)
    normalized_state: torch.Tensor  # [B, state_dim]
    tokens: torch.Tensor  # [B, tokenizer_max_length]
    token_mask: torch.Tensor
    prompts: List[str]  # exactly what the tokenizer step received
    token_ids: List[List[int]]  # unpadded


@torch.no_grad()
def run_pipeline(policy, preprocessor, postprocessor, observation: Dict[str, torch.Tensor], tasks: List[str],
                 noise: torch.Tensor) -> PipelineRun:
    """What a user's control loop does with a batch of raw observations, with fixed noise:
    preprocessor -> predict_action_chunk -> postprocessor."""
    from lerobot.processor.tokenizer_processor import TokenizerProcessorStep
    from lerobot.lerobot_types import TransitionKey

    data = {k: v.clone() for k, v in observation.items()}  # aligned copies, as in sample_model
    data["task"] = list(tasks)
    prompts: List[str] = []
    # The prompt the tokenizer sees is an intermediate of the pipeline; read it from step_through.
    for step, transition in zip([None, *preprocessor.steps], preprocessor.step_through(dict(data))):
        if isinstance(step, TokenizerProcessorStep):
            break
        prompts = list(transition[TransitionKey.COMPLEMENTARY_DATA]["task"])
    batch = preprocessor(dict(data))
    model_actions = policy.predict_action_chunk(batch, noise=noise.clone())
    actions = postprocessor(model_actions)
    tokens, mask = batch["observation.language.tokens"], batch["observation.language.attention_mask"]
    return PipelineRun(
        actions=actions, model_actions=model_actions, normalized_state=batch["observation.state"],
        tokens=tokens, token_mask=mask, prompts=prompts,
        token_ids=[t[m].tolist() for t, m in zip(tokens, mask)],
    )


# ---------------------------------------------------------------------------------------------
# command line (the live reference for tests in the main venv)


def _sizes_arg(text: Optional[str]) -> Optional[lc.Sizes]:
    if not text:
        return None
    raw = json.loads(Path(text).read_text()) if Path(text).is_file() else json.loads(text)
    return lc.Sizes(**raw)


def main(argv=None) -> int:
    from safetensors.torch import load_file, save_file

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=["sample", "pipeline"])
    ap.add_argument("--checkpoint", type=Path, required=True)
    ap.add_argument("--inputs", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--tasks", default=None, help="pipeline: JSON list of task strings, one per robot")
    ap.add_argument("--tokenizer", type=Path, default=None, help="default <checkpoint>/../tokenizer")
    ap.add_argument("--sizes", default=None, help="JSON (or a file) of lerobot06_compat.Sizes fields")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    inputs = load_file(str(args.inputs))
    policy, pre, post = load_checkpoint(args.checkpoint, _sizes_arg(args.sizes), args.tokenizer,
                                        with_processors=args.mode == "pipeline")
    if args.mode == "sample":
        s = sample_model(policy, inputs["images"], inputs["image_masks"].bool(), inputs["tokens"],
                         inputs["token_mask"].bool(), inputs["noise"], inputs.get("state"))
        save_file({"actions": s.actions.contiguous(), "updates": s.updates.contiguous(),
                   "times": torch.tensor(s.times, dtype=torch.float32)}, str(args.out))
        print(json.dumps({"policy": policy.config.type, "times": s.times}))
        return 0
    if args.tasks is None:
        ap.error("pipeline needs --tasks")
    noise = inputs.pop("noise")
    r = run_pipeline(policy, pre, post, inputs, json.loads(args.tasks), noise)
    save_file({"actions": r.actions.contiguous(), "model_actions": r.model_actions.contiguous(),
               "normalized_state": r.normalized_state.contiguous(), "tokens": r.tokens.contiguous(),
               "token_mask": r.token_mask.contiguous()}, str(args.out))
    print(json.dumps({"policy": policy.config.type, "prompts": r.prompts, "token_ids": r.token_ids}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
