"""The controller's default joint names (physai_ros.control.joints): the names the simulated arm
publishes, so a controller started with num_joints alone follows a simulated robot."""
import pytest

from physai_ros.control.joints import default_joint_names
from physai_ros.sim.robot import ArmConfig


@pytest.mark.parametrize("n", [2, 4, 6])
def test_default_names_are_the_simulated_arms(n):
    assert default_joint_names(n) == ArmConfig(num_joints=n).joint_names
    assert default_joint_names(n)[-1] == "gripper" and len(default_joint_names(n)) == n + 1


def test_too_few_joints_is_refused():
    with pytest.raises(ValueError, match="num_joints must be >= 2"):
        default_joint_names(1)
