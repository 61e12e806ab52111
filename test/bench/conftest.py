"""Bench entry points are scripts, not modules of a package: tests load them by path."""
import importlib.util
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture
def bench_script():
    """bench_script("stack_aim") -> bench/stack_aim.py as a module."""
    def load(name: str):
        spec = importlib.util.spec_from_file_location(f"{name}_bench", BENCH / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    return load
