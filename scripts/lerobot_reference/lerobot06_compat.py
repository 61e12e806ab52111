"""Run LeRobot 0.6.1's PI05 and PI0 here: offline, at any size. Import this before lerobot.

Runs only in the 0.6.1 reference environment (.venv-lerobot06, see setup_venv06.sh), whose lerobot
was installed with --no-deps and had its PEP 695 syntax rewritten by patch_pep695.py (the only
edit of installed files). Everything below is applied at run time; none of it touches the math of
the policies (docs/lerobot_reference.md, "LeRobot 0.6.1"):

1. torchvision: the PyPI wheel is a CUDA build whose C++ ops cannot load beside CPU torch, and
   `import torchvision` then dies on `register_fake("torchvision::nms")`. lerobot imports it for
   dataset transforms only; we declare the two op schemas so the import succeeds (calling them
   would still fail loudly).
2. Tokenizer: the pi0/pi05 preprocessors load "google/paligemma-3b-pt-224" from the hub, which is
   not reachable. `use_local_tokenizer` makes that one name resolve to a local transformers
   tokenizer directory; the saved processor JSON keeps the hub name, as a user's checkpoint has.
3. Sizes: `PaliGemmaWithExpertModel` builds from `get_gemma_config(variant)` (only gemma_2b /
   gemma_300m) and hard-codes the SigLIP So400m sizes, a 2048-wide projector and a 257152-token
   vocabulary. `use_sizes` swaps the two Gemma variants for chosen sizes and fixes the vision,
   projector and vocabulary fields on the config objects just before the towers are built.
Precision needs no patch in 0.6.1: PI05Config(dtype="float32") builds everything in fp32.
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Optional

# Never wait on a hub that cannot be reached; a missing local file must fail at once.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402

LEROBOT_VERSION = "0.6.1"
PALIGEMMA_TOKENIZER = "google/paligemma-3b-pt-224"


def _declare_torchvision_ops() -> None:
    try:
        torch.ops.torchvision.nms  # noqa: B018 - already declared (or a working torchvision loaded)
        return
    except (AttributeError, RuntimeError):
        pass
    lib = torch.library.Library("torchvision", "DEF")
    lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    # torch.library drops the definitions when the Library object is collected.
    globals()["_TORCHVISION_LIB"] = lib


_declare_torchvision_ops()

import lerobot  # noqa: E402
from lerobot.policies.pi0 import modeling_pi0  # noqa: E402
from lerobot.policies.pi05 import modeling_pi05  # noqa: E402
from lerobot.processor import tokenizer_processor  # noqa: E402

_MODELING = (modeling_pi05, modeling_pi0)


def lerobot_version() -> str:
    return getattr(lerobot, "__version__", LEROBOT_VERSION)


# ---------------------------------------------------------------------------------------------
# 2. tokenizer


class _LocalTokenizers:
    """Stands in for transformers.AutoTokenizer inside lerobot's tokenizer step: the PaliGemma
    hub name (or the directory itself) loads the local directory, anything else is an error."""

    def __init__(self, directory: Path):
        self.directory = Path(directory)

    def from_pretrained(self, name, *args, **kwargs):
        from transformers import AutoTokenizer

        if str(name) not in (PALIGEMMA_TOKENIZER, str(self.directory)):
            raise OSError(f"lerobot06_compat: no local tokenizer for {name!r} (offline)")
        return AutoTokenizer.from_pretrained(str(self.directory), *args, **kwargs)


def use_local_tokenizer(directory: Path) -> None:
    tokenizer_processor.AutoTokenizer = _LocalTokenizers(directory)


# ---------------------------------------------------------------------------------------------
# 3. sizes


@dataclasses.dataclass(frozen=True)
class Sizes:
    """Tower sizes of a PI0/PI05 built here. The VLM and the expert must share depth, head
    count, KV-head count and head dim (their K/V meet in one attention).

    The defaults are the fixture's: tiny, but with pi0's conventions that a loader cannot read
    from tensor shapes: one KV head (so head_dim = rows of k_proj), 8 query heads (0.6.1's joint
    training forward hard-codes 8), 16 SigLIP heads, SigLIP LayerNorm / Gemma RMSNorm eps 1e-6."""

    vlm_width: int = 64
    vlm_mlp: int = 128
    expert_width: int = 32
    expert_mlp: int = 64
    depth: int = 2
    num_heads: int = 8
    num_kv_heads: int = 1
    head_dim: int = 16
    vision_width: int = 64
    vision_mlp: int = 128
    vision_depth: int = 2
    vision_heads: int = 16
    image_size: int = 56
    patch_size: int = 14
    vocab_size: int = 512

    @staticmethod
    def pi0(depth: Optional[int] = None, vision_depth: Optional[int] = None) -> "Sizes":
        """The published sizes (gemma_2b, gemma_300m, So400m/14 at 224, PaliGemma vocabulary),
        optionally with fewer layers per tower, for timing."""
        return Sizes(
            vlm_width=2048, vlm_mlp=16384, expert_width=1024, expert_mlp=4096,
            depth=18 if depth is None else depth, num_heads=8, num_kv_heads=1, head_dim=256,
            vision_width=1152, vision_mlp=4304, vision_depth=27 if vision_depth is None else vision_depth,
            vision_heads=16, image_size=224, patch_size=14, vocab_size=257152,
        )

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


_ORIGINAL = {m: (m.get_gemma_config, m.PaliGemmaForConditionalGenerationWithPiGemma, m.PiGemmaForCausalLM)
             for m in _MODELING}


def use_sizes(s: Sizes) -> None:
    """Every PI0/PI05 built from now on has sizes `s` (the config still names gemma_2b /
    gemma_300m: those names now stand for s's VLM and expert). image_size is the config's
    image_resolution, which must equal s.image_size."""
    for module in _MODELING:
        gemma_config, vlm_class, expert_class = _ORIGINAL[module]

        def get_gemma_config(variant, _gemma_config=gemma_config):
            base = _gemma_config(variant)  # still rejects unknown variants
            width, mlp = (s.vlm_width, s.vlm_mlp) if variant == "gemma_2b" else (s.expert_width, s.expert_mlp)
            return type(base)(width=width, depth=s.depth, mlp_dim=mlp, num_heads=s.num_heads,
                              num_kv_heads=s.num_kv_heads, head_dim=s.head_dim)

        def build_vlm(config, _cls=vlm_class):
            t, v = config.text_config, config.vision_config
            if v.image_size != s.image_size:
                raise ValueError(f"image_resolution {v.image_size} != sizes.image_size {s.image_size}")
            t.vocab_size = s.vocab_size
            # Only PaliGemma's own forward reads the placeholder id; PI0/PI05 never call it.
            config.image_token_index = s.vocab_size
            v.hidden_size, v.intermediate_size = s.vision_width, s.vision_mlp
            v.num_hidden_layers, v.num_attention_heads, v.patch_size = s.vision_depth, s.vision_heads, s.patch_size
            # The projector maps the SigLIP width to the VLM width (lerobot hard-codes 2048).
            v.projection_dim = s.vlm_width
            if hasattr(config, "_vocab_size"):
                config._vocab_size = s.vocab_size  # noqa: SLF001 - mirrors lerobot's own assignment
            return _cls(config=config)

        def build_expert(config, _cls=expert_class):
            config.vocab_size = s.vocab_size
            return _cls(config=config)

        module.get_gemma_config = get_gemma_config
        module.PaliGemmaForConditionalGenerationWithPiGemma = build_vlm
        module.PiGemmaForCausalLM = build_expert


def restore_sizes() -> None:
    for module, (gemma_config, vlm_class, expert_class) in _ORIGINAL.items():
        module.get_gemma_config = gemma_config
        module.PaliGemmaForConditionalGenerationWithPiGemma = vlm_class
        module.PiGemmaForCausalLM = expert_class
