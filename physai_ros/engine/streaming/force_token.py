"""Force/torque in the fast loop (realtime-vla section 6.2): the newest wrench sample enters the
action expert as one extra input token.

The token is `W (wrench / scale) + b` (6 -> expert width). It is its own attention block placed
after the state token: it sees the prefix, the state and itself; the action tokens see it; the
state does not (so the state token is exactly pi0's). Its RoPE position is state + 1 and the
actions follow it. A checkpoint without `force_proj.*` runs with the token absent, which is
pi0's suffix unchanged (tested against the chunked sampler).

Wrench samples arrive at their native rate through a `WrenchMailbox` (newest value wins,
version counter); on CUDA the host -> device copy runs on its own stream so it never waits for
the action-expert stream, which orders its read after the copy with an event.
"""
from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional, Tuple

import numpy as np
import torch

WRENCH_DIM = 6
FORCE_KEYS = ("force_proj.weight", "force_proj.bias")


class WrenchError(ValueError):
    """A wrench sample that cannot be used (shape, NaN/Inf)."""


def check_wrench(wrench) -> torch.Tensor:
    # numpy, not torch: this runs for every sample (480 Hz per robot) in the server's executor,
    # and torch's per-call overhead (~25 us here) was GIL time taken from the action-expert thread.
    if isinstance(wrench, torch.Tensor):
        wrench = wrench.detach().cpu().numpy()
    if any(v is None for v in (wrench if isinstance(wrench, (list, tuple)) else ())):
        raise WrenchError("wrench: not a numeric vector (None among its values)")  # numpy would make it NaN
    try:
        w = np.asarray(wrench, dtype=np.float32).reshape(-1)
    except Exception as exc:  # lists of strings, ragged input, ...
        raise WrenchError(f"wrench: not a numeric vector ({type(exc).__name__}: {exc})") from None
    if w.shape != (WRENCH_DIM,):
        raise WrenchError(f"wrench: expected {WRENCH_DIM} values (fx fy fz tx ty tz), got {w.size}")
    if not np.isfinite(w).all():
        raise WrenchError("wrench: contains NaN or Inf")
    return torch.from_numpy(w)


@dataclass
class ForceProjection:
    weight: torch.Tensor  # [E, 6]
    bias: torch.Tensor  # [E]
    scale: torch.Tensor  # [6], wrench units per unit input (N, N m)

    @staticmethod
    def random(width: int, seed: int = 0, std: float = 0.5, scale=(10.0, 10.0, 10.0, 1.0, 1.0, 1.0)) -> "ForceProjection":
        g = torch.Generator().manual_seed(seed)
        return ForceProjection(weight=torch.randn(width, WRENCH_DIM, generator=g) * std,
                               bias=torch.randn(width, generator=g) * 0.02,
                               scale=torch.tensor(scale, dtype=torch.float32))

    @staticmethod
    def pop_from(weights: Dict[str, torch.Tensor], width: int) -> Optional["ForceProjection"]:
        """Take `force_proj.*` out of a weight dict (None when the checkpoint has none)."""
        present = [k for k in FORCE_KEYS if k in weights]
        if not present:
            return None
        if len(present) != len(FORCE_KEYS):
            raise KeyError(f"force projection incomplete: has {present}, needs {list(FORCE_KEYS)}")
        w, b = weights.pop("force_proj.weight"), weights.pop("force_proj.bias")
        if tuple(w.shape) != (width, WRENCH_DIM) or tuple(b.shape) != (width,):
            raise ValueError(f"force_proj: expected weight [{width}, 6] and bias [{width}], got "
                             f"{list(w.shape)} and {list(b.shape)}")
        scale = weights.pop("force_proj.scale", torch.ones(WRENCH_DIM))
        return ForceProjection(w, b, scale.float())

    @staticmethod
    def load(path) -> "ForceProjection":
        """A safetensors file with force_proj.weight / .bias (and optional .scale)."""
        from safetensors.torch import load_file

        t = load_file(str(Path(path)))
        proj = ForceProjection.pop_from(t, t["force_proj.weight"].shape[0])
        if proj is None:
            raise KeyError(f"{path}: no force_proj tensors")
        return proj

    def to(self, device, dtype) -> "ForceProjection":
        return ForceProjection(self.weight.to(device, dtype), self.bias.to(device, dtype),
                               self.scale.to(device, torch.float32))

    def embed(self, wrench: torch.Tensor) -> torch.Tensor:
        """wrench [B, 6] (raw units) -> token [B, 1, E]."""
        x = (wrench.float() / self.scale).to(self.weight.dtype)
        return torch.nn.functional.linear(x, self.weight, self.bias)[:, None]


class WrenchMailbox:
    """Newest wrench per robot slot; writers never wait for the reader's compute."""

    def __init__(self, slots: int, device="cpu"):
        self.device = torch.device(device)
        self._lock = threading.Lock()
        self._host = torch.zeros(slots, WRENCH_DIM, device="cpu")  # host-side, whatever torch's default device
        self._version = [0] * slots
        self._stamp = [-math.inf] * slots
        self._gpu = self.device.type == "cuda" and torch.cuda.is_available()
        if self._gpu:
            self._host = self._host.pin_memory()
            self._dev = torch.zeros(slots, WRENCH_DIM, device=self.device)
            self._copy_stream = torch.cuda.Stream(self.device)
            self._event: Optional[object] = None
        self._host_np = self._host.numpy()  # the same memory: a row written without a torch op per sample

    def clear(self, slot: int) -> None:
        with self._lock:
            self._host[slot].zero_()
            self._version[slot] += 1
            self._stamp[slot] = -math.inf

    def write(self, slot: int, wrench, stamp: float) -> int:
        w = check_wrench(wrench)
        with self._lock:
            self._host_np[slot] = w.numpy()
            self._version[slot] += 1
            self._stamp[slot] = float(stamp)
            if self._gpu:
                with torch.cuda.stream(self._copy_stream):
                    self._dev[slot].copy_(self._host[slot], non_blocking=True)
                    ev = torch.cuda.Event()
                    ev.record()
                    self._event = ev
            return self._version[slot]

    def read(self, slots) -> Tuple[torch.Tensor, list, list]:
        """(wrenches [len(slots), 6] on the device, versions, stamps) for the given slots."""
        idx = torch.as_tensor(list(slots), dtype=torch.long)
        with self._lock:
            versions = [self._version[s] for s in slots]
            stamps = [self._stamp[s] for s in slots]
            if self._gpu:
                if self._event is not None:
                    torch.cuda.current_stream().wait_event(self._event)
                return self._dev.index_select(0, idx.to(self.device)), versions, stamps
            return self._host.index_select(0, idx), versions, stamps
