"""Shared helpers for the kernel tests: tolerances per dtype and random inputs."""
import os

import torch

TOL = {torch.float32: dict(rtol=1e-4, atol=1e-4), torch.bfloat16: dict(rtol=2e-2, atol=3e-2)}
DTYPES = (torch.float32, torch.bfloat16)


def rand(*shape, dtype=torch.float32, scale=1.0, gen=None):
    return (torch.randn(*shape, generator=gen) * scale).to(dtype)


def assert_close(actual, expected, dtype):
    torch.testing.assert_close(actual.float(), expected.float(), **TOL[dtype])


def plain_env():
    """Environment of a process with neither the Triton interpreter nor a visible GPU."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["CUDA_VISIBLE_DEVICES"] = ""
    return env
