"""Kernel tests compare the Triton path against torch; if the interpreter were not active, the
"triton" backend would silently fall back to torch and every comparison would pass trivially.
This fixture makes that impossible."""
import pytest
import torch

from physai_ros.kernels import _runtime, ops


@pytest.fixture(autouse=True)
def triton_really_runs():
    assert _runtime.triton_runs_on(torch.empty(1)), (
        "TRITON_INTERPRET=1 must be set before triton is imported (test/conftest.py does it)")
    before = {k: v for k, v in ops.counters().items() if k.startswith("fallback:")}
    yield
    after = {k: v for k, v in ops.counters().items() if k.startswith("fallback:")}
    assert after == before, f"a triton call fell back to torch: {after}"
