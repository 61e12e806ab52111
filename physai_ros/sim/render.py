"""OpenCV rendering of a sim cell from up to three fixed pinhole cameras (RGB uint8 images).

Painter's algorithm: table, pad and shadows first, then the cube and the arm ordered by their
distance to the camera. Cheap enough (well under a millisecond per 224x224 view) to render at
30 Hz for several robots on one CPU.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import cv2
import numpy as np

from physai_ros.sim.events import IntruderPose
from physai_ros.sim.robot import ArmConfig, chain_points
from physai_ros.sim.tasks import PAD_TASKS
from physai_ros.sim.world import WorldSnapshot

MAX_WIDTH, MAX_HEIGHT = 640, 480

# RGB
BACKGROUND = (40, 44, 52)
TABLE = (150, 132, 110)
TABLE_EDGE = (110, 95, 80)
PAD = (60, 170, 80)
MARKER = (220, 40, 40)
CUBE = np.array([50, 90, 210], dtype=float)
LINK = (230, 230, 230)
JOINT = (250, 190, 40)
FINGER = (200, 200, 200)
SHADOW = (95, 85, 72)
RED_CUBE = np.array([205, 45, 40], dtype=float)
CUBE_COLOURS = {"blue cube": CUBE, "red cube": RED_CUBE}
SKIN = (226, 178, 146)  # the intruder's forearm
HAND = (240, 196, 164)
NEAR_PLANE = 0.05  # m: an intruder's arm reaching behind a camera is cut here


@dataclass(frozen=True)
class Camera:
    name: str
    eye: tuple[float, float, float]
    target: tuple[float, float, float]
    up: tuple[float, float, float] = (0.0, 0.0, 1.0)
    fov_deg: float = 55.0


VIEWS = (
    Camera("front", eye=(0.95, 0.0, 0.55), target=(0.25, 0.0, 0.12), fov_deg=50.0),
    Camera("top", eye=(0.3, 0.0, 0.95), target=(0.3, 0.0, 0.0), up=(1.0, 0.0, 0.0), fov_deg=55.0),
    Camera("side", eye=(0.3, -0.85, 0.35), target=(0.3, 0.0, 0.15), fov_deg=55.0),
)


class _Projector:
    def __init__(self, cam: Camera, width: int, height: int):
        eye, target, up = (np.asarray(v, dtype=float) for v in (cam.eye, cam.target, cam.up))
        fwd = target - eye
        fwd /= np.linalg.norm(fwd)
        right = np.cross(fwd, up)
        right /= np.linalg.norm(right)
        down = np.cross(fwd, right)
        self.R = np.stack([right, down, fwd])  # world -> camera (x right, y down, z forward)
        self.eye = eye
        self.f = 0.5 * width / math.tan(math.radians(cam.fov_deg) / 2)
        self.c = np.array([width / 2, height / 2])

    def depth(self, pts: np.ndarray) -> np.ndarray:
        return (np.atleast_2d(pts) - self.eye) @ self.R[2]

    def __call__(self, pts: np.ndarray) -> np.ndarray:
        cam = (np.atleast_2d(pts) - self.eye) @ self.R.T
        z = np.maximum(cam[:, 2], 1e-3)
        return np.round(cam[:, :2] / z[:, None] * self.f + self.c).astype(np.int32)


_CUBE_CORNERS = np.array([[x, y, z] for x in (-1, 1) for y in (-1, 1) for z in (-1, 1)], dtype=float)
_CUBE_FACES = ((0, 1, 3, 2), (4, 5, 7, 6), (0, 1, 5, 4), (2, 3, 7, 6), (0, 2, 6, 4), (1, 3, 7, 5))
_FACE_NORMALS = np.array([[-1, 0, 0], [1, 0, 0], [0, -1, 0], [0, 1, 0], [0, 0, -1], [0, 0, 1]], dtype=float)
_LIGHT = np.array([0.4, -0.3, 0.85]) / np.linalg.norm([0.4, -0.3, 0.85])


class Renderer:
    def __init__(self, arm: ArmConfig, *, num_views: int = 1, width: int = 224, height: int = 224,
                 object_size: float = 0.04, goal_radius: float = 0.05):
        if not 1 <= num_views <= len(VIEWS):
            raise ValueError(f"num_views must be 1..{len(VIEWS)}, got {num_views}")
        if not (16 <= width <= MAX_WIDTH and 16 <= height <= MAX_HEIGHT):
            raise ValueError(f"image size must be within 16x16..{MAX_WIDTH}x{MAX_HEIGHT}, got {width}x{height}")
        self.arm = arm
        self.width, self.height = width, height
        self.cameras = VIEWS[:num_views]
        self._proj = [_Projector(c, width, height) for c in self.cameras]
        self.object_size = object_size
        self.goal_radius = goal_radius
        self._scale = max(1, round(min(width, height) / 224))
        a = np.linspace(0, 2 * math.pi, 24, endpoint=False)
        self._circle = np.stack([np.cos(a), np.sin(a), np.zeros_like(a)], axis=1)

    def render(self, s: WorldSnapshot) -> list[np.ndarray]:
        """One RGB image per view, shape [height, width, 3], uint8."""
        return [self._view(p, s) for p in self._proj]

    def _view(self, P: _Projector, s: WorldSnapshot) -> np.ndarray:
        img = np.empty((self.height, self.width, 3), np.uint8)
        img[:] = BACKGROUND
        k = self._scale
        table = np.array([[-0.2, -0.55, 0], [0.8, -0.55, 0], [0.8, 0.55, 0], [-0.2, 0.55, 0]])
        cv2.fillConvexPoly(img, P(table), TABLE, cv2.LINE_AA)
        cv2.polylines(img, [P(table)], True, TABLE_EDGE, k, cv2.LINE_AA)
        if s.task in PAD_TASKS:
            pad = s.goal + self._circle * self.goal_radius
            cv2.fillPoly(img, [P(pad)], PAD, cv2.LINE_AA)
        multi = len(s.objects) > 1
        cubes = [(p, CUBE_COLOURS[n]) for p, n in zip(s.objects, s.object_names)] if multi else [(s.object_pos, CUBE)]
        # Shadows give the depth cue a single view lacks (none for a cube knocked off the table).
        for p, r in [(c, self.object_size * 0.6) for c, _ in cubes if c[2] >= 0] + [(s.tool, 0.02)]:
            cv2.fillPoly(img, [P(np.array([p[0], p[1], 0.001]) + self._circle * r)], SHADOW, cv2.LINE_AA)

        items = [(float(P.depth(p)[0]), functools.partial(self._draw_cube, pos=p, colour=c)) for p, c in cubes]
        items.append((float(P.depth(s.tool)[0]), self._draw_arm))
        if s.task == "reach":
            items.append((float(P.depth(s.goal)[0]), self._draw_marker))
        if s.intruder is not None:
            items.append((float(P.depth(s.intruder.hand)[0]), self._draw_intruder))
        for _, draw in sorted(items, key=lambda t: -t[0]):
            draw(img, P, s)
        return img

    def _draw_marker(self, img: np.ndarray, P: _Projector, s: WorldSnapshot) -> None:
        r = max(2, int(P.f * 0.015 / max(P.depth(s.goal)[0], 1e-3)))
        cv2.circle(img, tuple(int(v) for v in P(s.goal)[0]), r, MARKER, -1, cv2.LINE_AA)

    def _draw_intruder(self, img: np.ndarray, P: _Projector, s: WorldSnapshot) -> None:
        """A forearm (thick line, width from its depth) and a hand blob, cut at the near plane so
        an arm reaching past a camera does not project through it."""
        pose: IntruderPose = s.intruder
        a, b = pose.elbow, pose.wrist
        da, db = float(P.depth(a)[0]), float(P.depth(b)[0])
        if max(da, db) > NEAR_PLANE:
            if da < NEAR_PLANE:
                a = b + (a - b) * (db - NEAR_PLANE) / (db - da)
            elif db < NEAR_PLANE:
                b = a + (b - a) * (da - NEAR_PLANE) / (da - db)
            mid = float(P.depth((a + b) / 2)[0])
            width = max(2, int(2 * P.f * pose.arm_radius / max(mid, NEAR_PLANE)))
            uv = P(np.stack([a, b]))
            cv2.line(img, tuple(map(int, uv[0])), tuple(map(int, uv[1])), SKIN, min(width, 255), cv2.LINE_AA)
        dh = float(P.depth(pose.hand)[0])
        if dh > NEAR_PLANE:
            r = max(2, int(P.f * pose.hand_radius / dh))
            cv2.circle(img, tuple(int(v) for v in P(pose.hand)[0]), r, HAND, -1, cv2.LINE_AA)

    def _draw_cube(self, img: np.ndarray, P: _Projector, s: WorldSnapshot, pos: np.ndarray,
                   colour: np.ndarray) -> None:
        corners = pos + _CUBE_CORNERS * (self.object_size / 2)
        uv = P(corners)
        centre_depth = P.depth(pos)[0]
        faces = []
        for face, n in zip(_CUBE_FACES, _FACE_NORMALS):
            # Back-face culling: a face is visible when it points towards the camera.
            if P.depth(pos + n * self.object_size / 2)[0] < centre_depth:
                shade = 0.55 + 0.45 * max(0.0, float(n @ _LIGHT))
                faces.append((P.depth(corners[list(face)]).mean(), face, tuple(int(c) for c in colour * shade)))
        for _, face, colour in sorted(faces, key=lambda t: -t[0]):
            cv2.fillConvexPoly(img, uv[list(face)], colour, cv2.LINE_AA)

    def _draw_arm(self, img: np.ndarray, P: _Projector, s: WorldSnapshot) -> None:
        k = self._scale
        q = s.positions[:-1]
        pts = chain_points(self.arm, q)
        uv = P(pts)
        for a, b in zip(uv[:-1], uv[1:]):
            cv2.line(img, tuple(map(int, a)), tuple(map(int, b)), LINK, 4 * k, cv2.LINE_AA)
        for p in uv[1:-1]:
            cv2.circle(img, tuple(map(int, p)), 3 * k, JOINT, -1, cv2.LINE_AA)
        # Fingers open sideways, perpendicular to the arm's vertical plane.
        lateral = np.array([-math.sin(q[0]), math.cos(q[0]), 0.0])
        half = s.positions[-1] / 2
        tool = pts[-1]
        top, bottom = np.array([0, 0, 0.02]), np.array([0, 0, -0.02])
        for side in (-1, 1):
            f = P(np.stack([tool + top + side * half * lateral, tool + bottom + side * half * lateral]))
            cv2.line(img, tuple(map(int, f[0])), tuple(map(int, f[1])), FINGER, 2 * k, cv2.LINE_AA)
        bar = P(np.stack([tool + top - half * lateral, tool + top + half * lateral]))
        cv2.line(img, tuple(map(int, bar[0])), tuple(map(int, bar[1])), FINGER, 2 * k, cv2.LINE_AA)
