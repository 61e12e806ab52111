import math

import numpy as np
import pytest

from physai_ros.sim.robot import Arm, ArmConfig, chain_points, inverse_kinematics, tool_point


def test_tracking_respects_velocity_and_acceleration_limits_and_arrives():
    cfg = ArmConfig(num_joints=4, max_velocity=1.5, max_acceleration=6.0)
    arm = Arm(cfg)
    target = cfg.home() + np.array([0.8, -0.4, -0.3, 0.5])
    arm.set_command(np.concatenate([target, [0.02]]))
    dt = 1 / 480
    prev_v = np.zeros(4)
    for _ in range(int(3.0 / dt)):
        arm.step(dt)
        v = arm.state.qd.copy()
        assert np.all(np.abs(v) <= cfg.max_velocity + 1e-9)
        # A joint arriving on its target takes the velocity it achieved; elsewhere acceleration is bounded.
        arrived = arm.state.q == target
        assert np.all((np.abs(v - prev_v) <= cfg.max_acceleration * dt + 1e-9) | arrived)
        prev_v = v
    np.testing.assert_allclose(arm.state.q, target, atol=1e-6)
    assert arm.state.gripper == pytest.approx(0.02)


def test_command_is_validated_and_clipped_to_limits():
    arm = Arm(ArmConfig(num_joints=3))
    with pytest.raises(ValueError, match="shape"):
        arm.set_command(np.zeros(3))
    with pytest.raises(ValueError, match="NaN"):
        arm.set_command(np.array([0.0, np.nan, 0.0, 0.0]))
    arm.set_command(np.array([10.0, 1.0, 5.0, 1.0]))
    lo, hi = arm.cfg.limits()
    assert np.all(arm.state.command[:-1] <= hi) and arm.state.command[-1] == arm.cfg.gripper_max_width


@pytest.mark.parametrize("num_joints", [3, 4, 6])
def test_inverse_kinematics_reaches_workspace_points(num_joints):
    cfg = ArmConfig(num_joints=num_joints)
    rng = np.random.default_rng(num_joints)
    q = cfg.home()
    for _ in range(10):
        r, a, z = rng.uniform(0.28, 0.48), rng.uniform(-0.9, 0.9), rng.uniform(0.02, 0.25)
        target = np.array([r * math.cos(a), r * math.sin(a), z])
        q = inverse_kinematics(cfg, target, q, iterations=200)
        assert np.linalg.norm(tool_point(cfg, q) - target) < 2e-3


def test_forward_kinematics_chain_geometry():
    cfg = ArmConfig(num_joints=3, link_lengths=(0.3, 0.2))
    pts = chain_points(cfg, np.array([math.pi / 2, 0.0, -0.5]))
    np.testing.assert_allclose(pts[1], [0, 0, cfg.base_height])
    np.testing.assert_allclose(pts[2], [0, 0.3, cfg.base_height], atol=1e-12)
    assert np.linalg.norm(pts[3] - pts[2]) == pytest.approx(0.2)


def test_bad_config_is_rejected():
    with pytest.raises(ValueError):
        ArmConfig(num_joints=1)
    with pytest.raises(ValueError):
        ArmConfig(num_joints=4, link_lengths=(0.1, 0.2))
