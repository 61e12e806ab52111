"""Fixtures of the worker tests (helpers live in worker_inputs.py / worker_harness.py, whose
unique names keep them from clashing with other test folders' modules)."""
import pytest

from physai_ros.engine.types import Pi0Config


@pytest.fixture(scope="session")
def tiny():
    return Pi0Config.preset("tiny")
