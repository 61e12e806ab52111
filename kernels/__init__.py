"""Triton kernels for the pi0 engine (installed as physai_ros.kernels)."""
