"""Penalty-based contact model giving the 6-axis wrench a wrist force/torque sensor would read.

Everything is quasi-static: each contact is a spring on its penetration depth (plus Coulomb
friction against sliding on surfaces), the held object adds its weight. Forces are in the world
frame, torques about the sensor point (the wrist, above the tool point). Positive Fz pushes the
hand up.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

GRAVITY = 9.81


@dataclass(frozen=True)
class ContactParams:
    stiffness: float = 4000.0  # N/m, surfaces and object faces
    friction: float = 0.4
    finger_length: float = 0.02  # the fingertips reach this far below the tool point
    finger_radius: float = 0.008
    sensor_offset: float = 0.05  # the wrist sensor sits this far above the tool point
    max_force: float = 200.0  # saturation of the (virtual) sensor
    noise_std: float = 0.02  # N; torque noise is this times 0.1 m


@dataclass
class Wrench:
    force: np.ndarray = field(default_factory=lambda: np.zeros(3))
    torque: np.ndarray = field(default_factory=lambda: np.zeros(3))
    contacts: tuple[str, ...] = ()

    def as_array(self) -> np.ndarray:
        return np.concatenate([self.force, self.torque])


def _box_penetration(point: np.ndarray, radius: float, centre: np.ndarray, half: float) -> tuple[float, np.ndarray]:
    """Penetration depth of a sphere into an axis-aligned cube and the outward normal."""
    d = point - centre
    if np.any(np.abs(d) > half + radius):
        return 0.0, np.zeros(3)
    depth_per_axis = half + radius - np.abs(d)
    axis = int(np.argmin(depth_per_axis))
    normal = np.zeros(3)
    normal[axis] = 1.0 if d[axis] >= 0 else -1.0
    return float(depth_per_axis[axis]), normal


def hand_points(params: ContactParams, tool: np.ndarray, gripper_width: float, object_size: float) -> list[np.ndarray]:
    """Points of the hand that can touch the cube (as spheres of finger_radius).

    The palm sits just above the grasp point, so a hand centred on the cube touches its top only
    when pushed lower than a grasp. Open fingers straddle the cube; closed ones (narrower than the
    cube) collide with it at the tool point and the fingertips.
    """
    pts = [tool + np.array([0.0, 0.0, object_size / 2 + params.finger_radius + 0.002])]
    if gripper_width < object_size:
        pts += [tool, tool - np.array([0.0, 0.0, params.finger_length])]
    return pts


def compute_wrench(params: ContactParams, tool: np.ndarray, tool_vel: np.ndarray, *, gripper_width: float,
                   object_pos: np.ndarray,
                   object_size: float, object_mass: float, grasped: bool, goal_xy: np.ndarray,
                   goal_radius: float, goal_height: float, rng: np.random.Generator | None = None) -> Wrench:
    """Wrench at the wrist sensor for one instant of the scene."""
    sensor = tool + np.array([0.0, 0.0, params.sensor_offset])
    force = np.zeros(3)
    torque = np.zeros(3)
    contacts: list[str] = []

    def add(f: np.ndarray, at: np.ndarray, name: str) -> None:
        nonlocal force, torque
        force = force + f
        torque = torque + np.cross(at - sensor, f)
        if name not in contacts:
            contacts.append(name)

    def surface_height(xy: np.ndarray) -> tuple[float, str]:
        if np.hypot(*(xy - goal_xy)) <= goal_radius:
            return goal_height, "goal"
        return 0.0, "table"

    def surface_contact(point: np.ndarray, vel: np.ndarray) -> None:
        h, name = surface_height(point[:2])
        pen = h - point[2]
        if pen <= 0:
            return
        fn = params.stiffness * pen
        f = np.array([0.0, 0.0, fn])
        v_xy = np.array([vel[0], vel[1], 0.0])
        speed = float(np.linalg.norm(v_xy))
        if speed > 1e-4:
            f = f - params.friction * fn * v_xy / speed
        add(f, point, name)

    tips = tool - np.array([0.0, 0.0, params.finger_length])
    surface_contact(tips, tool_vel)

    half = object_size / 2
    if grasped:
        add(np.array([0.0, 0.0, -object_mass * GRAVITY]), object_pos, "object")
        bottom = object_pos - np.array([0.0, 0.0, half])
        surface_contact(bottom, tool_vel)
    else:
        for p in hand_points(params, tool, gripper_width, object_size):
            depth, normal = _box_penetration(p, params.finger_radius, object_pos, half)
            if depth > 0:
                add(params.stiffness * depth * normal, p - normal * params.finger_radius, "object")
                break

    if rng is not None and params.noise_std > 0:
        force = force + rng.normal(0.0, params.noise_std, 3)
        torque = torque + rng.normal(0.0, params.noise_std * 0.1, 3)
    force = np.clip(force, -params.max_force, params.max_force)
    return Wrench(force=force, torque=torque, contacts=tuple(contacts))
