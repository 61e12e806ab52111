"""Real-time chunking (RTC) guidance: Black, Galliker and Levine 2025, "Real-Time Execution of
Action Chunking Flow Policies", section 4 (inference-time inpainting with a soft mask).

While the next chunk is denoised, the robot keeps executing the previous one. The first `d`
actions of the new chunk (the inference delay, in control steps) will run before the new chunk
arrives, so they must equal what the previous chunk commits there; the actions after them should
stay close to the previous chunk's plan, less and less so towards the execution horizon `s`.
RTC treats this as inpainting: every Euler step's velocity is corrected by a pseudo-inverse
guidance term (Pi-GDM) that pulls the step's one-shot prediction of the final actions towards the
previous chunk, weighted per action by a soft mask W.

Time conventions (get this right, the paper and our code run the flow in opposite directions):
- ours (openpi, LeRobot; model.py and fast.py): x_1 = noise, x_0 = actions, t goes 1 -> 0 with
  x <- x + dt * v, dt = -1/num_steps, so v = dx/dt (about noise - actions);
- the paper: A^0 = noise, A^1 = actions, tau goes 0 -> 1 with A <- A + v_paper / n.
The mapping is tau = 1 - t, A^tau = x_t, v_paper = -v. The paper's prediction of the final
actions, A^1_hat = A^tau + (1 - tau) v_paper, is ours x0_hat = x_t - t v. Its guided velocity
v_paper + w(tau) (Y - A^1_hat)^T diag(W) dA^1_hat/dA^tau becomes, in our sign,

    v_guided = v - w(t) * J^T [W * (Y - x0_hat)],   J = d x0_hat / d x_t = I - t dv/dx_t,

a vector-Jacobian product through the velocity network (one backward pass per guided step). The
weight w = min(beta, (1 - tau) / (tau r^2)), r^2 = (1 - tau)^2 / (tau^2 + (1 - tau)^2), is in our t

    w(t) = min(beta, ((1 - t)^2 + t^2) / (t (1 - t))),

which is symmetric in t <-> 1 - t (so this part does not care about the convention) and infinite
at both ends: clipped to beta there (the first step, t = 1).

Soft mask over the chunk's actions i = 0..H-1 (paper eq. 5; LeRobot's and the Kinetix code's
schedules): 1 for i < d; for d <= i < s the ramp c_i = (s - i) / (s - d + 1), used as is
("linear") or as c_i (e^c_i - 1) / (e - 1) ("exp", the paper's); 0 for i >= s. "ones" guides
every action before s fully, "zeros" only the first d (hard inpainting of the delay). Our `s`
(`execution_horizon`) is where the mask reaches 0, as in LeRobot; in the paper's symbols it is
H - s_paper (s_paper: actions executed between the starts of two inferences).

Where LeRobot 0.6.1 differs: its RTCProcessor calls the velocity network before it marks x_t as
requiring grad, so its "VJP" ignores dv/dx_t (J = I). By default we differentiate through the
network as the paper and the Kinetix reference do (`jacobian="vjp"`). `jacobian="identity"` is
LeRobot's variant, offered because it behaves differently enough to matter: for a confident
trained model J^T shrinks the error (x0_hat hardly depends on x_t), so the VJP pulls weakly, while
J = I pulls x0_hat towards the previous chunk whatever the model thinks, and needs no backward
pass (docs/rtc.md has the measurements). Padded action dimensions (beyond the robot's own) are
not guided here: their errors would leak into the real dimensions through J^T.

Batches: a guide is per robot (None: no RTC). Only the guided rows are run through the
differentiable forward; the other rows keep the model's ordinary velocity, bit for bit.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional, Sequence, Union

import torch

from physai_ros.engine.types import EngineInputError, PrefixCache

SCHEDULES = ("exp", "linear", "ones", "zeros")
JACOBIANS = ("vjp", "identity")


@dataclass(frozen=True)
class RtcGuide:
    """One robot's RTC request for the chunk being denoised.

    leftover: float32 [chunk_size, max_action_dim], the previous chunk re-indexed to the new
      chunk's action times (row i = what the previous chunk does at the new chunk's action i), in
      the model's normalised action space, zero padded. Rows at and beyond `execution_horizon`
      are not read.
    delay: d, control steps (new-chunk actions) that execute before the new chunk arrives.
    execution_horizon: s, the first action the mask no longer guides; 0 <= d <= s <= chunk_size.
    schedule: "exp" (paper), "linear", "ones" or "zeros"; see the module docstring.
    max_guidance_weight: beta, the clip of the guidance weight (> 0).
    action_dim: the robot's own action dimensions (the first action_dim columns); None: all.
    jacobian: "vjp" (the paper: differentiate through the velocity) or "identity" (LeRobot
      0.6.1: J = I, no backward pass).
    """

    leftover: torch.Tensor
    delay: int
    execution_horizon: int
    schedule: str = "exp"
    max_guidance_weight: float = 5.0
    action_dim: Optional[int] = None
    jacobian: str = "vjp"

    def validate(self, config) -> None:
        """Raise EngineInputError ("rtc: ...") when the guide does not fit `config`."""
        c, a = config.chunk_size, config.max_action_dim
        lo = self.leftover
        if not isinstance(lo, torch.Tensor) or not lo.is_floating_point():
            raise EngineInputError(f"rtc: leftover must be a float tensor, got {type(lo).__name__}")
        if tuple(lo.shape) != (c, a):
            raise EngineInputError(f"rtc: leftover: expected shape [{c}, {a}], got {list(lo.shape)}")
        if not bool(torch.isfinite(lo).all()):
            raise EngineInputError("rtc: leftover contains NaN or Inf")
        for name in ("delay", "execution_horizon"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int):
                raise EngineInputError(f"rtc: {name}: expected an integer, got {v!r}")
        if not 0 <= self.delay <= self.execution_horizon <= c:
            raise EngineInputError(
                f"rtc: expected 0 <= delay <= execution_horizon <= chunk_size={c}, got delay={self.delay}, "
                f"execution_horizon={self.execution_horizon}")
        if self.schedule not in SCHEDULES:
            raise EngineInputError(f"rtc: schedule: expected one of {list(SCHEDULES)}, got {self.schedule!r}")
        b = self.max_guidance_weight
        if isinstance(b, bool) or not isinstance(b, (int, float)) or not math.isfinite(b) or b <= 0:
            raise EngineInputError(f"rtc: max_guidance_weight: expected a finite number > 0, got {b!r}")
        if self.action_dim is not None and (isinstance(self.action_dim, bool) or not isinstance(self.action_dim, int)
                                            or not 1 <= self.action_dim <= a):
            raise EngineInputError(f"rtc: action_dim: expected an integer in 1..{a} or None, got {self.action_dim!r}")
        if self.jacobian not in JACOBIANS:
            raise EngineInputError(f"rtc: jacobian: expected one of {list(JACOBIANS)}, got {self.jacobian!r}")

    def mask(self) -> torch.Tensor:
        return prefix_weights(self.delay, self.execution_horizon, self.leftover.shape[0], self.schedule)


def prefix_weights(delay: int, execution_horizon: int, chunk: int, schedule: str = "exp") -> torch.Tensor:
    """The soft mask W [chunk] (float32): 1 before `delay`, the schedule's ramp down to 0 across
    [delay, execution_horizon), 0 from `execution_horizon` on."""
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule: expected one of {list(SCHEDULES)}, got {schedule!r}")
    d, s = int(delay), int(execution_horizon)
    if not 0 <= d <= s <= chunk:
        raise ValueError(f"expected 0 <= delay <= execution_horizon <= chunk, got {d}, {s}, {chunk}")
    i = torch.arange(chunk, dtype=torch.float64)
    if schedule == "zeros":
        w = (i < d).double()
    elif schedule == "ones":
        w = (i < s).double()
    else:
        # Interior points of a line from 1 (at d - 1) to 0 (at s): c_d = (s-d)/(s-d+1), ..., 1/(s-d+1).
        c = ((s - i) / (s - d + 1)).clamp(0.0, 1.0)
        if schedule == "exp":
            c = c * torch.expm1(c) / (math.e - 1.0)
        w = torch.where(i < d, torch.ones_like(c), c)
        w = torch.where(i >= s, torch.zeros_like(w), w)
    return w.float()


def guidance_weight(t: float, max_weight: float) -> float:
    """min(beta, ((1-t)^2 + t^2) / (t (1-t))) for our flow time t (1 = noise); beta at t in {0, 1}."""
    t = float(t)
    if not 0.0 < t < 1.0:
        return float(max_weight)
    return float(min(max_weight, ((1.0 - t) ** 2 + t * t) / (t * (1.0 - t))))


@dataclass(frozen=True)
class RtcBatch:
    """The guided rows of one batch, stacked once per denoise call (not per step).

    rows: int64 [k], ascending batch indices; targets: float32 [k, C, A]; masks: float32 [k, C, A]
    (the soft mask over actions times the action-dimension mask); max_weights: [k] (beta per robot);
    batch: B, the whole batch's size; vjp: float32 [k, 1, 1], 1 for rows guided through the VJP,
    0 for identity-Jacobian rows.
    """

    rows: torch.Tensor
    targets: torch.Tensor
    masks: torch.Tensor
    max_weights: tuple[float, ...]
    batch: int
    vjp: torch.Tensor

    @property
    def partial(self) -> bool:
        """Whether some rows have no guide (the model must then run its ordinary step too)."""
        return int(self.rows.shape[0]) < self.batch

    @property
    def needs_grad(self) -> bool:
        """Whether some guided row differentiates through the velocity (else the model's ordinary
        step gives every velocity guidance needs: no differentiable forward, no backward)."""
        return bool(self.vjp.any())

    @property
    def needs_base(self) -> bool:
        """Whether the model must run its ordinary step over the whole batch too."""
        return self.partial or not self.needs_grad

    @staticmethod
    def build(guides: Sequence[Optional[RtcGuide]], device=None) -> Optional["RtcBatch"]:
        """None when no robot of the batch has a guide (the unguided path then runs as is)."""
        if guides is None:
            return None
        idx = [i for i, g in enumerate(guides) if g is not None]
        if not idx:
            return None
        gs = [guides[i] for i in idx]
        with torch.inference_mode(False):  # tensors autograd may read later
            targets = torch.stack([g.leftover.detach().float() for g in gs]).to(device)
            masks = torch.zeros_like(targets)
            for k, g in enumerate(gs):
                a = g.action_dim if g.action_dim is not None else targets.shape[2]
                masks[k, :, :a] = g.mask().to(device)[:, None]
            rows = torch.tensor(idx, dtype=torch.int64, device=device)
            vjp = torch.tensor([float(g.jacobian == "vjp") for g in gs], device=device)[:, None, None]
        return RtcBatch(rows, targets, masks, tuple(float(g.max_guidance_weight) for g in gs), len(guides), vjp)

    def weights(self, t: float, device=None) -> torch.Tensor:
        """[k, 1, 1] guidance weight of each guided robot at flow time t."""
        w = [guidance_weight(t, b) for b in self.max_weights]
        return torch.tensor(w, dtype=torch.float32, device=device)[:, None, None]


# velocity(x_rows, rows) -> v_rows: the model's velocity for the batch rows `rows` at x_rows,
# differentiable with respect to x_rows.
VelocityFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def guide_rows(velocity: VelocityFn, x_rows: torch.Tensor, t: float, plan: RtcBatch,
               base_rows: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The guided velocity [k, C, A] of the plan's rows (x_rows = x_t[plan.rows]).

    With a VJP row, runs the velocity forward with autograd on (also inside
    torch.inference_mode, which the serving path uses) and one backward pass. Identity-Jacobian
    rows need only the velocity: `base_rows` (the ordinary step's, [k, C, A]) when given."""
    w = plan.weights(t, x_rows.device)
    if not plan.needs_grad and base_rows is not None:
        v = base_rows.float()
        return v - w * (plan.targets - (x_rows.float() - t * v)) * plan.masks
    with torch.inference_mode(False), torch.enable_grad():
        x = x_rows.detach().clone().float().requires_grad_(plan.needs_grad)
        v = velocity(x, plan.rows).float()
        x0_hat = x - t * v
        err = (plan.targets - x0_hat.detach()) * plan.masks
        corr = err * (1.0 - plan.vjp)  # identity rows: J = I
        if plan.needs_grad:
            (g,) = torch.autograd.grad(x0_hat, x, grad_outputs=err * plan.vjp)
            corr = corr + g
        return v.detach() - w * corr


def guided_velocity(velocity: VelocityFn, x_t: torch.Tensor, t: float,
                    guides: Union[RtcBatch, Sequence[Optional[RtcGuide]], None],
                    base: Optional[torch.Tensor] = None) -> torch.Tensor:
    """One Euler step's velocity [B, C, A] with RTC guidance for the robots that have a guide.

    velocity(x_rows, rows): the model's velocity for those batch rows (differentiable);
    x_t [B, C, A]; t: the step's flow time (1 = noise); guides: a prepared RtcBatch or one
    Optional[RtcGuide] per robot; base: the ordinary (unguided) velocity of the whole batch as
    the model's own step computed it. Rows without a guide get `base` unchanged, bit for bit;
    `base` may be None only when every row has a guide (or none has: then velocity runs for all)."""
    plan = guides if isinstance(guides, RtcBatch) or guides is None else RtcBatch.build(guides, x_t.device)
    if plan is None:
        if base is not None:
            return base
        with torch.no_grad():
            return velocity(x_t, torch.arange(x_t.shape[0], device=x_t.device))
    if plan.partial and base is None:
        raise ValueError("guided_velocity: some rows have no guide, so the batch's unguided velocity `base` is needed")
    guided = guide_rows(velocity, x_t[plan.rows], t, plan, None if base is None else base[plan.rows])
    out = base.clone() if base is not None else torch.empty_like(x_t)
    out[plan.rows] = guided.to(out.dtype)
    return out


def select_rows(cache: PrefixCache, rows: torch.Tensor) -> PrefixCache:
    """The prefix cache of some batch rows, as ordinary tensors autograd can save (the serving
    path computes the cache under torch.inference_mode, whose tensors it cannot)."""
    with torch.inference_mode(False):
        return PrefixCache(keys=[k[rows] for k in cache.keys], values=[v[rows] for v in cache.values],
                           pad=cache.pad[rows], next_pos=cache.next_pos[rows])
