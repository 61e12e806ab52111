"""Pi0Engine: batched pi0 / pi0.5 inference for many robots over the plain or the prepared fast
path. The checkpoint's config (`Pi0Config.policy`) picks the model; the interface is the same."""
from __future__ import annotations

import inspect
import time
from dataclasses import dataclass, field, fields
from typing import Callable, Dict, List, Optional, Tuple

import torch

from physai_ros.engine.batching import Batch, collate
from physai_ros.engine.checkpoint.params import Weights, param_shapes, random_weights
from physai_ros.engine.pi0.fast import FastPi0
from physai_ros.engine.pi0.modeling import PlainPi0
from physai_ros.engine.pi05.fast import FastPi05
from physai_ros.engine.pi05.modeling import PlainPi05
from physai_ros.engine.types import EngineInput, EngineInputError, EngineOutput, Pi0Config, PrefixCache


@dataclass
class EngineStats:
    calls: int = 0
    robots: int = 0
    rejected: int = 0
    last_error: str = ""
    errors_by_field: Dict[str, int] = field(default_factory=dict)


def check_weight_shapes(config: Pi0Config, weights: Weights) -> None:
    """Every tensor the config needs is present with the right shape; names the first offender."""
    for name, shape in param_shapes(config).items():
        if name not in weights:
            raise KeyError(f"weights: missing tensor {name!r} (expected shape {list(shape)})")
        if tuple(weights[name].shape) != tuple(shape):
            raise ValueError(f"weights: {name!r} has shape {list(weights[name].shape)}, expected {list(shape)}")


def accepts_rtc(model) -> bool:
    """Whether a model's denoise takes real-time chunking guides (engine/rtc.py)."""
    return "rtc" in inspect.signature(model.denoise).parameters


class Pi0Engine:
    """Batched pi0 sampler.

    weights=None draws seeded random weights (tests, benchmarks). fast=True prepares the folded
    fast path and frees the plain weights as it goes (the engine then holds one copy); fast=False
    keeps the literal reference path. On CUDA (only when torch.cuda.is_available()), the fast
    path can be captured in CUDA graphs per batch size (`cuda_graphs=True`, see cuda_graphs.py).
    """

    def __init__(
        self,
        config: Pi0Config,
        weights: Optional[Weights] = None,
        device="cpu",
        dtype: torch.dtype = torch.float32,
        fast: bool = True,
        backend: str = "torch",
        seed: int = 0,
        cuda_graphs=False,  # True, False or "auto" (where built: the fast path on CUDA)
        language: bool = False,
        model=None,
    ):
        """model: another engine's prepared fast model to run over, instead of `weights` (the
        weights are then not held twice: the streaming service beside the chunked engine). The
        fast models keep no state between calls, so engines on different threads can share one."""
        config.validate()
        self.config = config
        self.device = torch.device(device)
        self.dtype = dtype
        self.fast = fast
        self.backend = backend
        self.stats = EngineStats()
        self.checkpoint_format = None  # set by from_lerobot_checkpoint (checkpoint_format.CheckpointFormat)
        # keep_prefix: infer() keeps its last frame's prefix cache for take_prefix() (the language
        # stream starts texts from it: one prefill for actions and text).
        self.keep_prefix = False
        self._kept: Optional[Tuple[PrefixCache, Batch]] = None
        self._noise_seed = seed
        self._gen = torch.Generator().manual_seed(seed)
        self._graphs = None
        if model is not None:
            if weights is not None or not fast or cuda_graphs is True:
                raise ValueError("model=: a shared fast model, without weights or CUDA graphs of its own")
            if (model.cfg, model.device.type, model.dtype, model.backend) != (config, self.device.type, dtype, backend):
                raise ValueError(f"model=: built for {model.device}/{model.dtype}/{model.backend}, "
                                 f"not {self.device}/{dtype}/{backend} with this config")
            self.model = model
            return
        if weights is None:
            weights = random_weights(config, seed=seed)
        check_weight_shapes(config, weights)
        # Move tensor by tensor (pop + reinsert) so a full model is never on two devices at once.
        for name in list(weights):
            weights[name] = weights.pop(name).to(self.device, dtype)
        pi05 = config.policy == "pi05"
        if fast:
            fast_cls = FastPi05 if pi05 else FastPi0
            self.model = fast_cls(config, weights, backend=backend, consume=True, dtype=dtype, language=language)
        else:
            self.model = (PlainPi05 if pi05 else PlainPi0)(config, weights)
        if cuda_graphs == "auto":  # where they are built: the fast path (pi0 or pi0.5) on a CUDA device
            # pi0.5's too since H200 runs matched them with the CPU reference (bench/results/gpu).
            cuda_graphs = fast and self.device.type == "cuda" and torch.cuda.is_available()
        if cuda_graphs:
            if not (fast and self.device.type == "cuda" and torch.cuda.is_available()):
                raise ValueError("cuda_graphs needs fast=True and a CUDA device")
            from physai_ros.engine.cuda_graphs import GraphCache

            self._graphs = GraphCache(self.model, config, self.device, dtype)

    @classmethod
    def from_lerobot_checkpoint(cls, path, device="cpu", dtype=torch.float32, fast: bool = True,
                                backend: str = "torch", progress: Optional[Callable[[str], None]] = None,
                                head_dim: Optional[int] = None, vision_heads: int = 16,
                                cuda_graphs=False, language: bool = False,
                                **config_overrides) -> "Pi0Engine":
        """Load a LeRobot PI0 checkpoint directory (see weights.load_lerobot_checkpoint for
        head_dim / vision_heads and the config overrides such as time_schedule)."""
        from physai_ros.engine.checkpoint.format import detect_format
        from physai_ros.engine.checkpoint.loader import load_lerobot_checkpoint

        fmt = detect_format(path)  # decided once: the loader's variant, then logs and /diagnostics
        config, weights = load_lerobot_checkpoint(path, dtype=dtype, head_dim=head_dim, vision_heads=vision_heads,
                                                  progress=progress, fmt=fmt, **config_overrides)
        engine = cls(config, weights, device=device, dtype=dtype, fast=fast, backend=backend, cuda_graphs=cuda_graphs,
                     language=language)
        engine.checkpoint_format = fmt
        return engine

    @classmethod
    def from_preset_or_checkpoint(cls, preset: Optional[str], checkpoint: Optional[str], device="cpu", seed: int = 0,
                                  language: bool = False, checkpoint_args: Optional[dict] = None,
                                  **engine_args) -> "Pi0Engine":
        """What a server or an engine worker serves: a LeRobot checkpoint directory when one is
        named (its family's float32 variant; checkpoint_args: from_lerobot_checkpoint's config
        overrides), else the preset's random weights from `seed`. engine_args (dtype,
        cuda_graphs, ...) apply to both."""
        if checkpoint:
            return cls.from_lerobot_checkpoint(checkpoint, device=device, language=language, **engine_args,
                                               **(checkpoint_args or {}))
        return cls(Pi0Config.preset(preset), device=device, seed=seed, language=language, **engine_args)

    def restart_noise(self) -> None:
        """Draw the starting noise from the start of its seeded stream again, as just after
        construction. A benchmark comparing settings on the same seeds calls it before each one,
        so a setting's draws do not depend on how many the settings run before it made."""
        self._gen.manual_seed(self._noise_seed)

    def language_decoder(self):
        """Text decoding on this engine's prefix caches (language.py): the plain path always; the
        fast path when built with language=True."""
        from physai_ros.engine.language.decoder import FastLanguage, PlainLanguage

        return FastLanguage(self.model) if self.fast else PlainLanguage(self.config, self.model.w)

    # ------------------------------------------------------------------ input checking
    def check(self, inp: EngineInput) -> Optional[str]:
        """None when the input can run, else the reason (also counted in .stats)."""
        try:
            if not isinstance(inp, EngineInput):
                raise EngineInputError(f"expected EngineInput, got {type(inp).__name__}")
            inp.validate(self.config)
            if inp.rtc is not None and not accepts_rtc(self.model):
                raise EngineInputError(f"rtc: {type(self.model).__name__} has no real-time chunking (docs/rtc.md)")
            return None
        except EngineInputError as e:
            self.stats.rejected += 1
            self.stats.last_error = str(e)
            key = str(e).split(":", 1)[0]
            self.stats.errors_by_field[key] = self.stats.errors_by_field.get(key, 0) + 1
            return str(e)

    def _collate(self, batch: List[EngineInput], for_graphs: bool = False) -> Batch:
        if not isinstance(batch, (list, tuple)) or not batch:
            raise EngineInputError("empty batch: expected a non-empty list of EngineInput")
        for i, inp in enumerate(batch):
            err = self.check(inp)
            if err is not None:
                raise EngineInputError(f"robot {i}: {err}")
        if for_graphs:
            from physai_ros.engine.cuda_graphs import static_collate_kwargs

            # Stays on the CPU: GraphCache stages it through pinned buffers.
            return collate(batch, self.config, "cpu", self.dtype, generator=self._gen,
                           **static_collate_kwargs(self.config, batch))
        return collate(batch, self.config, self.device, self.dtype, generator=self._gen)

    # ------------------------------------------------------------------ inference
    def prefix(self, batch: List[EngineInput]) -> PrefixCache:
        """Vision + VLM for a batch of observations into a KV cache (streaming: 30 Hz side)."""
        b = self._collate(batch)
        return self.model.prefix(b.images, b.image_masks, b.tokens, b.token_mask)

    def denoise(self, cache: PrefixCache, state: torch.Tensor, noise: torch.Tensor,
                rtc: Optional[List] = None) -> Tuple[torch.Tensor, torch.Tensor]:
        """Action expert against a cache: state [B, max_state_dim], noise [B, chunk, max_action_dim]
        -> (actions [B, chunk, A], updates [num_steps, B, chunk, A]). rtc: one Optional[RtcGuide]
        per robot (real-time chunking, docs/rtc.md)."""
        cfg = self.config
        bsz = cache.batch_size
        if tuple(state.shape) != (bsz, cfg.max_state_dim):
            raise EngineInputError(f"state: expected [{bsz}, {cfg.max_state_dim}], got {list(state.shape)}")
        if tuple(noise.shape) != (bsz, cfg.chunk_size, cfg.max_action_dim):
            raise EngineInputError(f"noise: expected [{bsz}, {cfg.chunk_size}, {cfg.max_action_dim}], got {list(noise.shape)}")
        if rtc is not None and any(g is not None for g in rtc):
            if not accepts_rtc(self.model):
                raise EngineInputError(f"rtc: {type(self.model).__name__} has no real-time chunking (docs/rtc.md)")
            if len(rtc) != bsz:
                raise EngineInputError(f"rtc: expected {bsz} guides (None for robots without), got {len(rtc)}")
            for i, g in enumerate(rtc):
                if g is not None:
                    try:
                        g.validate(cfg)
                    except EngineInputError as e:
                        raise EngineInputError(f"robot {i}: {e}") from e
            return self.model.denoise(cache, state.to(self.device), noise.to(self.device, torch.float32), rtc=list(rtc))
        return self.model.denoise(cache, state.to(self.device), noise.to(self.device, torch.float32))

    def infer(self, batch: List[EngineInput]) -> List[EngineOutput]:
        """Sample one chunk per robot. Raises EngineInputError naming the robot and field when an
        input is malformed (nothing runs then; the rejection is counted in .stats). With
        keep_prefix set, the frame's prefix cache and collated batch wait for take_prefix()."""
        self._kept = None
        outputs, cache, b = self.infer_frame(batch, keep_prefix=self.keep_prefix)
        if self.keep_prefix:
            self._kept = (cache, b)
        return outputs

    def take_prefix(self) -> Optional[Tuple[PrefixCache, Batch]]:
        """The last infer()'s (prefix cache, collated batch) when keep_prefix is set, once."""
        kept, self._kept = self._kept, None
        return kept

    def prefill(self, batch: List[EngineInput]) -> PrefixCache:
        """The VLM prefix alone for these robots (their rows of the KV cache, on the device),
        through the captured prefix graph where graphs are built: what a text task pays to
        prefill an observation of its own when it does not share the action step's (OxyGen's
        isolated baseline, bench/language_stream.py)."""
        if self._graphs is not None:
            return self._graphs.prefix_rows(self._collate(batch, for_graphs=True))
        b = self._collate(batch)
        return self.model.prefix(b.images, b.image_masks, b.tokens, b.token_mask)

    def infer_frame(self, batch: List[EngineInput], keep_prefix: bool = True
                    ) -> Tuple[List[EngineOutput], Optional[PrefixCache], Optional[Batch]]:
        """infer(), also handing back the frame's prefix KV cache and collated batch, for the
        language stream to start its texts from (OxyGen: one prefill for actions and text).
        The cache is read-only for the caller: decoding copies the rows it needs."""
        # Real-time chunking guides (docs/rtc.md): a guided batch runs eagerly (autograd does not
        # run inside a captured CUDA graph); without any, the path below is the unguided one.
        guides = [getattr(inp, "rtc", None) for inp in batch] if isinstance(batch, (list, tuple)) else []
        guided = any(g is not None for g in guides)
        graphs = self._graphs is not None and not guided
        b = self._collate(batch, for_graphs=graphs)
        t0 = time.perf_counter()
        cache = None
        if graphs:
            actions, updates, t_prefix, cache = self._graphs.run(b, keep_prefix=keep_prefix)
            if keep_prefix:  # the language stream reads the robots' rows beside the copied cache
                b = Batch(*(getattr(b, f.name)[:len(batch)].to(self.device) for f in fields(Batch)))
        else:
            cache = self.model.prefix(b.images, b.image_masks, b.tokens, b.token_mask)
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            t_prefix = (time.perf_counter() - t0) * 1e3
            if guided:
                actions, updates = self.model.denoise(cache, b.state, b.noise, rtc=guides)
            else:
                actions, updates = self.model.denoise(cache, b.state, b.noise)
        actions, updates = actions.float().cpu(), updates.float().cpu()
        total = (time.perf_counter() - t0) * 1e3
        self.stats.calls += 1
        self.stats.robots += b.size
        timings = {"prefix_ms": t_prefix, "denoise_ms": total - t_prefix, "total_ms": total, "batch": b.size}
        if guided:
            timings["rtc_guided"] = sum(g is not None for g in guides)
        outputs = [EngineOutput(actions=actions[i], updates=updates[:, i], timings_ms=dict(timings))
                   for i in range(b.size)]
        return (outputs, cache, b) if keep_prefix else (outputs, None, None)
