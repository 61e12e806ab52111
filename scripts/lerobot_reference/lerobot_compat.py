"""Run LeRobot 0.3.2's PI0 here: offline, in fp32, at any size. Import this before lerobot.

Runs only in the reference environment (.venv-lerobot, see setup_venv.sh). Every patch below is
listed in docs/lerobot_reference.md; none of them touches PI0's math:

1. torchvision: PyPI's Linux torchvision wheel is a CUDA build whose C++ ops cannot load beside
   CPU torch, and importing it then fails on `register_fake("torchvision::nms")`. LeRobot imports
   torchvision only for dataset transforms (never in PI0), so we declare the two op schemas that
   torchvision registers unconditionally; calling them would still fail loudly.
2. Tokenizer: `PI0Policy.__init__` downloads the PaliGemma tokenizer from the hub, which is not
   reachable. We feed token ids directly (`PI0FlowMatching.sample_actions` never tokenises), so
   `AutoTokenizer.from_pretrained` inside modeling_pi0 returns None.
3. Precision: LeRobot 0.3.2 hard-codes bf16 (weights of the PaliGemma/expert layers, and the
   activations before q/k/v and after attention). The equivalence we test is in fp32, so inside
   modeling_pi0 and paligemma_with_expert the name `torch.bfloat16` resolves to torch.float32.
   Every other attribute of `torch` is the real module.
4. Sizes: PaliGemmaWithExpertConfig always builds the full-size pi0 configs; `tiny_sizes` swaps
   in a factory that builds them and then overwrites the size fields we choose.
"""
from __future__ import annotations

import dataclasses
import types
from typing import Optional

import torch

LEROBOT_VERSION = "0.3.2"


def _declare_torchvision_ops() -> None:
    try:
        torch.ops.torchvision.nms  # noqa: B018 - already declared (or torchvision loaded)
        return
    except (AttributeError, RuntimeError):
        pass
    lib = torch.library.Library("torchvision", "DEF")
    lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    # torch.library drops definitions when the Library object is collected.
    globals()["_TORCHVISION_LIB"] = lib


_declare_torchvision_ops()

import lerobot  # noqa: E402
from lerobot.policies.pi0 import modeling_pi0, paligemma_with_expert  # noqa: E402


class _Fp32Torch(types.ModuleType):
    """`torch` with bfloat16 mapped to float32; everything else is forwarded."""

    bfloat16 = torch.float32

    def __getattr__(self, name):
        return getattr(torch, name)


_FP32_TORCH = _Fp32Torch("torch")


def force_fp32() -> None:
    modeling_pi0.torch = _FP32_TORCH
    paligemma_with_expert.torch = _FP32_TORCH


class _NoHubTokenizer:
    @staticmethod
    def from_pretrained(*_args, **_kwargs):
        return None


def disable_hub_tokenizer() -> None:
    modeling_pi0.AutoTokenizer = _NoHubTokenizer


@dataclasses.dataclass(frozen=True)
class TinySizes:
    """Sizes of a LeRobot PI0 built for tests. The expert must have the VLM's depth, head count,
    KV-head count and head dim: LeRobot 0.3.2 concatenates both streams' q/k/v per layer.

    Defaults keep pi0's conventions that a loader cannot read from tensor shapes: one KV head
    (so head_dim = rows of k_proj) and 16 SigLIP heads."""

    vlm_width: int = 64
    vlm_mlp: int = 128
    expert_width: int = 32
    expert_mlp: int = 64
    depth: int = 2
    num_heads: int = 4
    num_kv_heads: int = 1
    head_dim: int = 16
    vision_width: int = 64
    vision_mlp: int = 128
    vision_depth: int = 2
    vision_heads: int = 16
    image_size: int = 56
    patch_size: int = 14
    vocab_size: int = 1024

    @staticmethod
    def pi0(depth: Optional[int] = None, vision_depth: Optional[int] = None) -> "TinySizes":
        """The published pi0 sizes (optionally fewer layers), for timing."""
        return TinySizes(
            vlm_width=2048, vlm_mlp=16384, expert_width=1024, expert_mlp=4096,
            depth=18 if depth is None else depth, num_heads=8, num_kv_heads=1, head_dim=256,
            vision_width=1152, vision_mlp=4304, vision_depth=27 if vision_depth is None else vision_depth,
            vision_heads=16, image_size=224, patch_size=14, vocab_size=257152,
        )


_ORIGINAL_CONFIG = paligemma_with_expert.PaliGemmaWithExpertConfig


def use_sizes(s: TinySizes) -> None:
    """Make every PI0 built from now on use sizes `s` (PI0FlowMatching reads the config class
    from modeling_pi0's namespace)."""

    def factory(**kwargs):
        cfg = _ORIGINAL_CONFIG(**kwargs)
        t = cfg.paligemma_config.text_config
        t.hidden_size, t.intermediate_size, t.num_hidden_layers = s.vlm_width, s.vlm_mlp, s.depth
        t.num_attention_heads, t.num_key_value_heads, t.head_dim = s.num_heads, s.num_kv_heads, s.head_dim
        t.vocab_size = s.vocab_size
        v = cfg.paligemma_config.vision_config
        v.hidden_size, v.intermediate_size, v.num_hidden_layers = s.vision_width, s.vision_mlp, s.vision_depth
        v.num_attention_heads, v.image_size, v.patch_size = s.vision_heads, s.image_size, s.patch_size
        v.projection_dim = s.vlm_width
        v.num_image_tokens = (s.image_size // s.patch_size) ** 2
        p = cfg.paligemma_config
        p.projection_dim, p.hidden_size, p.vocab_size = s.vlm_width, s.vlm_width, s.vocab_size
        # The image placeholder id is only used by PaliGemma's own forward, which PI0 never calls.
        p.image_token_index = s.vocab_size
        e = cfg.gemma_expert_config
        e.hidden_size, e.intermediate_size, e.num_hidden_layers = s.expert_width, s.expert_mlp, s.depth
        e.num_attention_heads, e.num_key_value_heads, e.head_dim = s.num_heads, s.num_kv_heads, s.head_dim
        e.vocab_size = s.vocab_size
        return cfg

    modeling_pi0.PaliGemmaWithExpertConfig = factory


def prepare(sizes: TinySizes) -> None:
    """All patches, for a PI0 of `sizes` in fp32 without the hub."""
    force_fp32()
    disable_hub_tokenizer()
    use_sizes(sizes)


def lerobot_version() -> str:
    return getattr(lerobot, "__version__", LEROBOT_VERSION)
