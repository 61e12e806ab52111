"""Fixtures for the serving tests."""
import pytest

from physai_ros.serving.config import load_fleet


@pytest.fixture(scope="session")
def fleet():
    return load_fleet()
