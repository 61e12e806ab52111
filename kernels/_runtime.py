"""Where Triton kernels can run in this process, decided once and cheaply.

Triton's interpreter only takes effect when TRITON_INTERPRET=1 was set before the first
`import triton`, so the environment variable alone is not proof; the type of a builtin is.
"""
from __future__ import annotations

import functools
import os

import torch


@functools.lru_cache(maxsize=1)
def triton_importable() -> bool:
    try:
        import triton  # noqa: F401
    except Exception:  # a broken or missing triton must never break the torch path
        return False
    return True


@functools.lru_cache(maxsize=1)
def interpreting() -> bool:
    """True when @triton.jit kernels run through the CPU interpreter in this process."""
    if os.environ.get("TRITON_INTERPRET") != "1" or not triton_importable():
        return False
    import triton.language as tl

    return type(tl.sum).__name__ == "InterpretedFunction"


def triton_runs_on(t: torch.Tensor) -> bool:
    """Whether a kernel launched on `t` would execute (CUDA tensor, or CPU tensor interpreted)."""
    if not triton_importable():
        return False
    if t.is_cuda:
        return True
    return t.device.type == "cpu" and interpreting()


def upcast_tiles(t: torch.Tensor) -> bool:
    """The interpreter holds bf16/fp16 as integers and computes garbage with them: widen tiles."""
    return interpreting() and not t.is_cuda


def dot_precision(dtype: torch.dtype) -> str:
    """`input_precision` of tl.dot for operands of `dtype`. Triton's default for fp32 operands is
    tf32 (10-bit mantissa), while torch's fp32 matmul is full fp32 unless the user lowers
    `torch.set_float32_matmul_precision`: on an H200 the fp32 gated FFN then missed the torch op
    by 1.6e-3. tf32x3 splits each operand into tf32 parts and keeps fp32 accuracy on the tensor
    cores. bf16 operands are unaffected (tf32 is the default, which Triton ignores for them)."""
    if dtype == torch.float32 and torch.get_float32_matmul_precision() == "highest":
        return "tf32x3"
    return "tf32"


def device_arch(t: torch.Tensor) -> str:
    """'sm_89'-style key of the tile table, or 'interpreter' for CPU tensors."""
    if not t.is_cuda:
        return "interpreter"
    major, minor = torch.cuda.get_device_capability(t.device)
    return f"sm_{major}{minor}"


def sm_count(t: torch.Tensor) -> int:
    if not t.is_cuda:
        return 1
    return torch.cuda.get_device_properties(t.device).multi_processor_count
