"""Execution-horizon policies (Kairos section 3.1): how many actions of a sampled chunk to run
before asking for the next one, decided from the sampler's per-step updates at no model cost.

`updates` is U [num_steps, chunk, action_dim]: each Euler step's dt * v for every action
(EngineOutput.updates; slice off the padded action dims first). The magnitude of action a at
step s is m[s, a] = ||U[s, a, :]||_2.

Per-action confidence (our definition, in [0, 1]):
    c_a = min(1, mean_{s < K} m[s, a] / m[K, a])          (K = last step; c_a = 1 if m[K, a] = 0)
i.e. 1 while the final update is no larger than the earlier mean, falling as the final update
outgrows it. The paper's rule "final update exceeds (1 + t) x earlier mean" is exactly
c_a < 1 / (1 + t), so ConfidenceHorizon is a threshold on this confidence.
"""
from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from typing import Protocol, Union, runtime_checkable

import numpy as np
import torch

ArrayLike = Union[np.ndarray, torch.Tensor]


@dataclass(frozen=True)
class HorizonDecision:
    horizon: int  # actions to execute, 1 <= horizon <= chunk
    confidence: np.ndarray  # [chunk] in [0, 1]
    reason: str


@runtime_checkable
class HorizonPolicy(Protocol):
    def decide(self, updates: ArrayLike) -> HorizonDecision: ...


def _magnitudes(updates: ArrayLike) -> np.ndarray:
    u = updates.detach().float().cpu().numpy() if isinstance(updates, torch.Tensor) else np.asarray(updates, np.float64)
    if u.ndim != 3 or u.shape[0] < 2 or u.shape[1] < 1:
        raise ValueError(f"updates: expected [num_steps >= 2, chunk >= 1, action_dim], got shape {list(u.shape)}")
    if not np.isfinite(u).all():
        raise ValueError("updates: contains NaN or Inf")
    return np.linalg.norm(u.astype(np.float64), axis=2)  # [steps, chunk]


def action_confidence(updates: ArrayLike) -> np.ndarray:
    """c_a in [0, 1] per action (see the module docstring)."""
    m = _magnitudes(updates)
    final, earlier = m[-1], m[:-1].mean(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        c = np.where(final > 0, earlier / np.where(final > 0, final, 1.0), 1.0)
    return np.clip(c, 0.0, 1.0)


class StaticHorizon:
    """Always H actions (clipped to the chunk). Ignores the updates except for confidence."""

    def __init__(self, horizon: int):
        if int(horizon) < 1:
            raise ValueError(f"StaticHorizon: horizon must be >= 1, got {horizon}")
        self.h = int(horizon)

    def decide(self, updates: ArrayLike) -> HorizonDecision:
        conf = action_confidence(updates)
        return HorizonDecision(min(self.h, conf.shape[0]), conf, f"static {self.h}")


class ConfidenceHorizon:
    """Walk from the first action; stop at the first whose final update exceeds (1 + t) x the
    mean of its earlier updates. H_thresh = number of actions before it (the whole chunk if none),
    H = max(H_thresh, h_min), clipped to the chunk."""

    def __init__(self, t: float, h_min: int = 1):
        if not float(t) >= 0:
            raise ValueError(f"ConfidenceHorizon: threshold t must be >= 0, got {t}")
        if int(h_min) < 1:
            raise ValueError(f"ConfidenceHorizon: h_min must be >= 1, got {h_min}")
        self.t, self.h_min = float(t), int(h_min)

    def decide(self, updates: ArrayLike) -> HorizonDecision:
        m = _magnitudes(updates)
        final, earlier = m[-1], m[:-1].mean(axis=0)
        chunk = m.shape[1]
        over = np.nonzero(final > (1.0 + self.t) * earlier)[0]
        h_thresh = int(over[0]) if over.size else chunk
        h = min(max(h_thresh, self.h_min), chunk)
        why = f"action {h_thresh + 1} final update over (1+{self.t}) x mean" if over.size else "all actions converged"
        return HorizonDecision(h, action_confidence(updates), f"{why}; H_thresh={h_thresh}, h_min={self.h_min}")


def horizon_class(spec: str) -> type:
    """The user policy class a "pkg.module:Class" name imports: the one place such a name is
    resolved. It must be a class: fleet.yaml may name one, and a name like "os:abort" must be
    refused, never called."""
    mod_name, sep, cls_name = spec.partition(":")
    if not sep or not mod_name or not cls_name:
        raise ValueError(f"horizon policy {spec!r}: expected 'static', 'confidence' or 'pkg.module:Class'")
    try:
        obj = getattr(importlib.import_module(mod_name), cls_name)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"horizon policy {spec!r} cannot be imported: {e}") from e
    if not inspect.isclass(obj):
        raise ValueError(f"horizon policy {spec!r} is not a class")
    return obj


def make_horizon_policy(spec: str, **kwargs) -> HorizonPolicy:
    """"static" / "confidence" or a user class by import path "pkg.module:Class", built with kwargs.
    The class must have decide(updates) -> HorizonDecision."""
    if spec == "static":
        return StaticHorizon(**kwargs)
    if spec == "confidence":
        return ConfidenceHorizon(**kwargs)
    policy = horizon_class(spec)(**kwargs)
    if not isinstance(policy, HorizonPolicy):
        raise ValueError(f"horizon policy {spec!r} has no decide(updates) method")
    return policy


def checked_decision(policy: HorizonPolicy, updates: ArrayLike) -> HorizonDecision:
    """Run a (possibly user-supplied) policy and reject answers outside 1..chunk."""
    chunk = _magnitudes(updates).shape[1]
    d = policy.decide(updates)
    if not isinstance(d, HorizonDecision):
        raise ValueError(f"horizon policy {type(policy).__name__} returned {type(d).__name__}, not HorizonDecision")
    if not isinstance(d.horizon, (int, np.integer)) or not 1 <= int(d.horizon) <= chunk:
        raise ValueError(f"horizon policy {type(policy).__name__} returned horizon {d.horizon!r}; expected 1..{chunk}")
    return d
