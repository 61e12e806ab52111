"""The steps of bench/gpu_check.py, one module each, each run in its own process so that a hang or
a crash in one (a CUDA error poisons its process) costs that step alone:

common.py        arguments, inputs, timers, error measures shared by the steps
correctness.py   CUDA paths against the CPU fp32 reference at tiny size (engine modes, kernels,
                 language decoding, RTC)
engine_timing.py full-size pi0 / pi0.5, random weights: per mode, views and batch, p50/p99
streaming.py     the two-stream streaming engine at full widths: rates and missed ticks
language.py      the language stream (bench/language_stream.py) at full size
serving.py       ServingCore in one process, raw frames in, chunks out, one and four robots
"""
