"""The RegisterRobot service as plain data: what a robot asks for and what the server answers.

Shared by the robot client (which builds the request), the policy server (which admits it) and
evaluation (which registers simulated robots without ROS).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RobotRegistration:
    """RegisterRobot.srv request."""

    robot_id: str
    task_id: str
    robot_namespace: str
    prompt: str
    camera_topics: tuple[str, ...]
    num_views: int
    image_height: int
    image_width: int
    joint_names: tuple[str, ...]
    state_dim: int
    action_dim: int
    control_period: float
    streaming: bool = False
    last_round_id: int = 0
    client_session: str = ""
    # (height, width) of each view when the robot's cameras differ; empty: all image_height x image_width.
    view_sizes: tuple[tuple[int, int], ...] = ()
    # The checkpoint image feature each view feeds; empty: the checkpoint's cameras in its order.
    camera_features: tuple[str, ...] = ()

    def view_size(self, i: int) -> tuple[int, int]:
        """(height, width) registered for view i."""
        return self.view_sizes[i] if self.view_sizes else (self.image_height, self.image_width)


@dataclass(frozen=True)
class RegistrationResult:
    """RegisterRobot.srv response."""

    accepted: bool
    reason: str
    server_instance: str
    last_round_id: int = 0  # the highest round the server accepted from this robot
    # The factory schedule's word for this robot (serving.factory_runtime; 0 / empty without one):
    # its System 1 request rate cap and (component, engine instance) routes.
    max_request_rate_hz: float = 0.0
    routes: tuple[tuple[str, str], ...] = ()
