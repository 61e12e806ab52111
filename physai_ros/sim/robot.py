"""Kinematic arm: base yaw joint, a chain of pitch joints in the vertical plane, and a gripper.

The arm is position controlled and kinematic (no dynamics): each joint tracks its commanded
position under velocity and acceleration limits, which is what a stiff industrial position loop
looks like from outside. The gripper is one prismatic "joint" (finger opening in metres).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np

from physai_ros.control.joints import default_joint_names


@dataclass(frozen=True)
class ArmConfig:
    num_joints: int = 4
    # Pitch-link lengths (num_joints - 1 of them); empty -> a short wrist link of `wrist_length`
    # (with three or more pitch joints) and the rest of `reach` split evenly.
    link_lengths: tuple[float, ...] = ()
    reach: float = 0.70
    wrist_length: float = 0.10
    base_height: float = 0.10
    max_velocity: float = 2.0  # rad/s
    max_acceleration: float = 8.0  # rad/s^2
    gripper_max_width: float = 0.08  # m
    gripper_speed: float = 0.25  # m/s
    joint_limit: float = math.pi - 0.05

    def __post_init__(self) -> None:
        if self.num_joints < 2:
            raise ValueError(f"num_joints must be >= 2 (base yaw + at least one pitch), got {self.num_joints}")
        if self.link_lengths and len(self.link_lengths) != self.num_joints - 1:
            raise ValueError(
                f"link_lengths needs num_joints-1={self.num_joints - 1} entries, got {len(self.link_lengths)}")

    @property
    def lengths(self) -> np.ndarray:
        if self.link_lengths:
            return np.asarray(self.link_lengths, dtype=float)
        n = self.num_joints - 1
        if n < 3:
            return np.full(n, self.reach / n)
        return np.array([(self.reach - self.wrist_length) / (n - 1)] * (n - 1) + [self.wrist_length])

    @property
    def joint_names(self) -> tuple[str, ...]:
        return default_joint_names(self.num_joints)

    @functools.cached_property
    def limits_cached(self) -> tuple[np.ndarray, np.ndarray]:
        return self.limits()

    def limits(self) -> tuple[np.ndarray, np.ndarray]:
        """Joint position limits. Inner pitch joints (elbows) bend one way only, keeping the arm
        away from the straight-elbow singularity where it could not pull back in."""
        lo = np.full(self.num_joints, -self.joint_limit)
        hi = np.full(self.num_joints, self.joint_limit)
        if self.num_joints >= 3:
            hi[2:max(3, self.num_joints - 1)] = -0.05
        return lo, hi

    def home(self) -> np.ndarray:
        """Upright shoulder, forearm forward, the remaining links pointing down."""
        q = np.zeros(self.num_joints)
        if self.num_joints >= 2:
            q[1] = math.pi / 2
        if self.num_joints >= 3:
            q[2] = -math.pi / 2
        if self.num_joints >= 4:
            q[3] = -math.pi / 2
        return q


def chain_points(cfg: ArmConfig, q: np.ndarray) -> np.ndarray:
    """World positions of the base, every joint and the tool point: [num_joints + 1, 3]."""
    lengths = cfg.lengths
    yaw = q[0]
    c, s = math.cos(yaw), math.sin(yaw)
    pts = np.empty((len(lengths) + 2, 3))
    pts[0] = (0.0, 0.0, 0.0)
    r, z, phi = 0.0, cfg.base_height, 0.0
    pts[1] = (0.0, 0.0, z)
    for i, ln in enumerate(lengths):
        phi += q[i + 1]
        r += ln * math.cos(phi)
        z += ln * math.sin(phi)
        pts[i + 2] = (r * c, r * s, z)
    return pts


def tool_point(cfg: ArmConfig, q: np.ndarray) -> np.ndarray:
    return chain_points(cfg, q)[-1]


def _planar(cfg: ArmConfig, pitches: np.ndarray) -> tuple[float, float, float]:
    r, z, phi = 0.0, cfg.base_height, 0.0
    for ln, qi in zip(cfg.lengths, pitches):
        phi += qi
        r += ln * math.cos(phi)
        z += ln * math.sin(phi)
    return r, z, phi


def inverse_kinematics(cfg: ArmConfig, target: np.ndarray, q_seed: np.ndarray, tool_pitch: float = -math.pi / 2,
                       iterations: int = 40) -> np.ndarray:
    """Joint positions placing the tool point at `target` with the last link at `tool_pitch`.

    Damped least squares in the arm's vertical plane, seeded from `q_seed` so consecutive
    solutions stay on the same branch (no elbow flips inside a motion). The orientation row is
    weighted down so position wins when both cannot be met (short chains).
    """
    q = np.array(q_seed, dtype=float)
    x, y, tz = float(target[0]), float(target[1]), float(target[2])
    r_goal = math.hypot(x, y)
    if r_goal > 1e-6:
        q[0] = math.atan2(y, x)
    lengths = cfg.lengths
    n = len(lengths)
    w_orient = 0.3 if n >= 3 else 0.0
    lo, hi = (b[1:] for b in cfg.limits_cached)
    pitches = np.clip(q[1:], lo, hi)
    lam = 1e-3
    for _ in range(iterations):
        r, z, phi = _planar(cfg, pitches)
        err = np.array([r_goal - r, tz - z, w_orient * (tool_pitch - phi)])
        if abs(err[0]) < 1e-5 and abs(err[1]) < 1e-5 and abs(err[2]) < 1e-4:
            break
        # Jacobian of (r, z, phi) w.r.t. the pitch joints: joint k moves every link after it.
        cum = np.cumsum(pitches)
        J = np.zeros((3, n))
        for k in range(n):
            J[0, k] = -np.sum(lengths[k:] * np.sin(cum[k:]))
            J[1, k] = np.sum(lengths[k:] * np.cos(cum[k:]))
            J[2, k] = w_orient
        step = J.T @ np.linalg.solve(J @ J.T + lam * np.eye(3), err)
        pitches = np.clip(pitches + np.clip(step, -0.5, 0.5), lo, hi)
    q[1:] = pitches
    return q


def _track(pos: np.ndarray, vel: np.ndarray, target: np.ndarray, vmax: float, amax: float, dt: float) -> None:
    """One step of a rate-limited position loop, in place.

    The desired speed is the largest one that can still stop at the target under `amax`
    (v = sqrt(2 a |e|)), so joints arrive without overshoot; the actual speed moves towards it
    by at most amax*dt. Snaps onto the target when it can be reached within this step.
    """
    err = target - pos
    v_des = np.sign(err) * np.minimum(np.minimum(np.sqrt(2.0 * amax * np.abs(err)), vmax), np.abs(err) / dt)
    vel += np.clip(v_des - vel, -amax * dt, amax * dt)
    step = vel * dt
    reach = (step * err >= 0) & (np.abs(step) >= np.abs(err))
    pos += step
    pos[reach] = target[reach]
    # Arriving sets the velocity actually achieved, not zero: a target that keeps moving (a
    # streamed trajectory) is followed smoothly instead of stopping and re-accelerating each step.
    vel[reach] = err[reach] / dt


@dataclass
class ArmState:
    q: np.ndarray
    qd: np.ndarray
    gripper: float
    gripper_vel: float = 0.0
    command: np.ndarray = field(default_factory=lambda: np.zeros(0))


class Arm:
    """The arm's joint state and its tracking of position commands."""

    def __init__(self, cfg: ArmConfig):
        self.cfg = cfg
        q0 = cfg.home()
        self.state = ArmState(q=q0.copy(), qd=np.zeros_like(q0), gripper=cfg.gripper_max_width,
                              command=np.concatenate([q0, [cfg.gripper_max_width]]))

    def reset(self, q: np.ndarray | None = None, gripper: float | None = None) -> None:
        q0 = self.cfg.home() if q is None else np.asarray(q, dtype=float).copy()
        g = self.cfg.gripper_max_width if gripper is None else float(gripper)
        self.state = ArmState(q=q0, qd=np.zeros_like(q0), gripper=g, command=np.concatenate([q0, [g]]))

    @property
    def dim(self) -> int:
        return self.cfg.num_joints + 1

    def set_command(self, command: np.ndarray) -> None:
        command = np.asarray(command, dtype=float)
        if command.shape != (self.dim,):
            raise ValueError(f"command must have shape ({self.dim},), got {command.shape}")
        if not np.all(np.isfinite(command)):
            raise ValueError("command contains NaN or inf")
        lo, hi = self.cfg.limits_cached
        cmd = command.copy()
        cmd[:-1] = np.clip(cmd[:-1], lo, hi)
        cmd[-1] = min(max(cmd[-1], 0.0), self.cfg.gripper_max_width)
        self.state.command = cmd

    def step(self, dt: float, gripper_block: float | None = None) -> None:
        """Advance by dt seconds. `gripper_block`: the fingers cannot close below this width
        (they are squeezing an object)."""
        s, cfg = self.state, self.cfg
        _track(s.q, s.qd, s.command[:-1], cfg.max_velocity, cfg.max_acceleration, dt)
        g_target = s.command[-1]
        if gripper_block is not None:
            g_target = max(g_target, gripper_block)
        delta = g_target - s.gripper
        max_move = cfg.gripper_speed * dt
        move = max(-max_move, min(max_move, delta))
        s.gripper += move
        s.gripper_vel = move / dt if dt > 0 else 0.0
        if gripper_block is not None and s.gripper < gripper_block:
            s.gripper = gripper_block

    def positions(self) -> np.ndarray:
        """Joint positions followed by the gripper opening (the JointState order)."""
        return np.concatenate([self.state.q, [self.state.gripper]])

    def velocities(self) -> np.ndarray:
        return np.concatenate([self.state.qd, [self.state.gripper_vel]])

    def tool(self) -> np.ndarray:
        return tool_point(self.cfg, self.state.q)
