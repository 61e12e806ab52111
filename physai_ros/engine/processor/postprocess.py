"""Engine output -> the horizon and per-action confidence of the chunk a robot executes.

The policies themselves are physai_ros.engine.horizon (Kairos section 3.1); this adapter maps the
wire form (Observation.horizon_policy + horizon_params) onto them, caches the built policy per
(name, params), and slices off the padded action dimensions first.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from physai_ros.engine.horizon import HorizonDecision, checked_decision, make_horizon_policy


@lru_cache(maxsize=256)
def _policy(name: str, params: tuple[float, ...]):
    if name == "static":
        return make_horizon_policy("static", horizon=int(params[0]))
    if name == "confidence":
        return make_horizon_policy("confidence", t=float(params[0]), h_min=int(params[1]))
    # A user class ("package.module:Class", allowed by fleet.yaml; engine.horizon.horizon_class
    # imports it and refuses anything but a class) gets the wire parameters as `params=(...)`.
    return make_horizon_policy(name, params=params) if params else make_horizon_policy(name)


def decide_horizon(name: str, params: tuple[float, ...], updates: np.ndarray,
                   action_dim: int) -> HorizonDecision:
    """updates [steps, chunk, max_action_dim] -> HorizonDecision (horizon 1..chunk, confidence)."""
    return checked_decision(_policy(name, tuple(float(p) for p in params)), updates[:, :, :action_dim])
