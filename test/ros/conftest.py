"""Fixtures for tests that start real ROS 2 processes and talk to them over DDS.

Each test gets its own rclpy context and node (no global rclpy state shared with other tests)
and a ProcessGroup whose children are always stopped in teardown. Every wait is bounded.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from physai_ros.fleet.processes import ProcessGroup  # noqa: E402
from ros_test_helpers import RosHarness  # noqa: E402


@pytest.fixture
def ros(request):
    h = RosHarness("test_" + request.node.name.split("[")[0][:40])
    yield h
    h.close()


@pytest.fixture
def procs(tmp_path):
    group = ProcessGroup(tmp_path / "logs")
    yield group
    group.stop(grace_s=5.0)
