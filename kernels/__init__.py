"""Triton kernels for the pi0 engine (installed as physai_ros.kernels).

ops.py        the five ops the engine calls, each with backend="torch" | "triton"
gemm.py       GEMM with fused epilogues, (partial) split-K, fused gated FFN, RMS row scale
qkv_rope.py   QKV projection with rotate-half RoPE in the epilogue
attention.py  masked grouped-query flash attention (prefix and action-expert masks)
tiles.py      tile configurations per GPU architecture for pi0's shapes
tuning.py     per-shape config choice: table, or timed candidates on a GPU
_runtime.py   where kernels can run (CUDA, or Triton's CPU interpreter)
"""
