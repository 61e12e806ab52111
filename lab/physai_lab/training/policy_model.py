"""Differentiable pi0 for training, over the engine's own reference math.

The engine is inference-only: PlainPi0's prefix / velocity are wrapped in torch.no_grad. Training
calls the very same functions undecorated (`__wrapped__`) on a weight dict whose tensors are
nn.Parameters, so there is exactly one definition of the architecture (physai_ros.engine.pi0.modeling)
and the weights this module learns are, by construction, the weights the serving engine runs.

Objective (LeRobot PI0.forward): t ~ Beta(1.5, 1) * 0.999 + 0.001, x_t = t noise + (1 - t) a,
the expert predicts the velocity u = noise - a; MSE over the robot's real action dims.
With text targets the same prefix pass also feeds text_loss: the VLM's LM head
answering a question about the frame, next-token cross-entropy (pi0.5-style co-training).
"""
from __future__ import annotations

from typing import Dict, Optional, Tuple

import torch
from torch import nn

from physai_ros.engine.checkpoint.params import Weights, random_weights
from physai_ros.engine.pi0.modeling import PlainPi0
from physai_ros.engine.types import Pi0Config, PrefixCache

from physai_lab.training.text_loss import text_logits, text_loss

_prefix = PlainPi0.prefix.__wrapped__
_velocity = PlainPi0.velocity.__wrapped__


def _key(name: str) -> str:
    return name.replace(".", "__")  # ParameterDict keys may not contain dots


def training_init(cfg: Pi0Config, seed: int) -> Weights:
    """Start weights: the engine's seeded random init, with norm weights zeroed (Gemma's
    (1 + w) and LayerNorm gain 1 / bias 0) so every layer starts as an unscaled residual block;
    the random norms of random_weights exist to exercise the fast path's folding, not to train."""
    w = random_weights(cfg, seed=seed)
    for name, t in w.items():
        if name.endswith(("ln_attn", "ln_mlp")) or name in ("vlm.norm", "expert.norm"):
            w[name] = torch.zeros_like(t)
        elif ".ln" in name or "post_ln" in name:
            w[name] = torch.ones_like(t) if name.endswith(".weight") else torch.zeros_like(t)
        elif name.endswith(".bias"):
            w[name] = torch.zeros_like(t)
    return w


class TrainablePi0(nn.Module):
    def __init__(self, cfg: Pi0Config, weights: Optional[Weights] = None, seed: int = 0):
        super().__init__()
        cfg.validate()
        self.cfg = cfg
        weights = training_init(cfg, seed) if weights is None else weights
        self.params = nn.ParameterDict({_key(n): nn.Parameter(t.detach().float().clone()) for n, t in weights.items()})
        self._names = {_key(n): n for n in weights}
        # PlainPi0 only reads .cfg and .w; w is rebuilt per call so it always holds the Parameters.
        self._plain = PlainPi0.__new__(PlainPi0)
        self._plain.cfg = cfg

    def weights(self) -> Dict[str, torch.Tensor]:
        """Our tensor names -> Parameters (live, differentiable)."""
        return {self._names[k]: p for k, p in self.params.items()}

    def export(self) -> Weights:
        return {n: t.detach().clone() for n, t in self.weights().items()}

    def _bind(self) -> PlainPi0:
        self._plain.w = self.weights()
        return self._plain

    def prefix(self, images, image_masks, tokens, token_mask) -> PrefixCache:
        return _prefix(self._bind(), images, image_masks, tokens, token_mask)

    def velocity(self, cache: PrefixCache, state, x_t, t) -> torch.Tensor:
        return _velocity(self._bind(), cache, state, x_t, t)

    def loss(self, images, image_masks, tokens, token_mask, state, actions, action_dim: int,
             samples_per_obs: int = 1, generator: Optional[torch.Generator] = None) -> torch.Tensor:
        """Flow-matching loss for a batch. actions [B, C, max_action_dim] (normalised, padded).
        samples_per_obs > 1 draws several (noise, t) pairs per observation against one prefix
        pass: the prefix (vision + VLM) is most of the compute, the expert is cheap."""
        return self.losses(images, image_masks, tokens, token_mask, state, actions, action_dim, samples_per_obs,
                           generator)[0]

    def losses(self, images, image_masks, tokens, token_mask, state, actions, action_dim: int,
               samples_per_obs: int = 1, generator: Optional[torch.Generator] = None,
               text_block: Optional[torch.Tensor] = None,
               text_mask: Optional[torch.Tensor] = None,
               dim_weights: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        """(flow-matching loss, text loss or None). text_block / text_mask [B, T]
        (text_data.TextTargets.batch): one question + answer block per observation, read from
        the same prefix cache the action expert reads. dim_weights [action_dim]: per action dim
        weights of the squared error (None: plain mean)."""
        cache = self.prefix(images, image_masks, tokens, token_mask)
        txt = None
        if text_block is not None and bool(text_mask.any()):
            txt = text_loss(text_logits(self.weights(), self.cfg, cache, text_block), text_block, text_mask)
        k = samples_per_obs
        if k > 1:
            cache = PrefixCache(keys=[x.repeat_interleave(k, 0) for x in cache.keys],
                                values=[x.repeat_interleave(k, 0) for x in cache.values],
                                pad=cache.pad.repeat_interleave(k, 0), next_pos=cache.next_pos.repeat_interleave(k, 0))
            state = state.repeat_interleave(k, 0)
            actions = actions.repeat_interleave(k, 0)
        noise, t = sample_noise_and_time(actions.shape, generator)
        tt = t[:, None, None]
        x_t = tt * noise + (1 - tt) * actions
        v = self.velocity(cache, state, x_t, t)
        err = (v[..., :action_dim] - (noise - actions)[..., :action_dim]) ** 2
        return (torch.mean(err) if dim_weights is None else torch.mean(err * dim_weights)), txt

    @torch.no_grad()
    def sample(self, images, image_masks, tokens, token_mask, state, noise) -> Tuple[torch.Tensor, torch.Tensor]:
        """Euler sampling exactly as the engine's reference path does it (for equivalence tests
        and the in-process closed-loop check)."""
        plain = PlainPi0(self.cfg, self.export())
        cache = plain.prefix(images, image_masks, tokens, token_mask)
        return plain.denoise(cache, state, noise)


def sample_noise_and_time(shape, generator: Optional[torch.Generator] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """noise ~ N(0, 1) of `shape` [B, C, A] and t ~ Beta(1.5, 1) * 0.999 + 0.001 per sample."""
    noise = torch.randn(shape, generator=generator)
    # Beta(a, 1) by inversion: F^-1(u) = u^(1/a); avoids torch.distributions' global RNG.
    u = torch.rand(shape[0], generator=generator)
    t = u.pow(1.0 / 1.5) * 0.999 + 0.001
    return noise, t
