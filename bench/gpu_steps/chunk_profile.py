"""Where a chunk's time goes on the device: torch.profiler over the fast path (eager, bf16,
batch 1, 2 views, full pi0) after warm-up. Reports the wall time, the summed GPU kernel time
(what a perfect launch path would leave: the CUDA-graph floor), the kernel and launch counts, the
host synchronisations, and the kernels that take the most GPU time. Wall far above kernel time
means the host (Python dispatch, launches, syncs) is the limit; kernel time far above the
roofline means the kernels are."""
from __future__ import annotations

import time

import torch

from common import config, guarded, inputs, parse_args, sync, write

SYNC_EVENTS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpyAsync",
               "cudaMemcpy")


def profile_chunk(args, policy: str) -> dict:
    from torch.profiler import ProfilerActivity, profile

    from physai_ros.engine import Pi0Engine, random_weights

    cfg = config(args.size, policy)
    cuda = torch.device(args.device).type == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32
    eng = Pi0Engine(cfg, random_weights(cfg, seed=0, dtype=dtype, device=args.device), device=args.device, dtype=dtype)
    batch = inputs(cfg, 1, 2, seed=1)
    for _ in range(3):
        eng.infer(batch)
    sync(args.device)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=acts) as prof:
        t0 = time.perf_counter()
        eng.infer(batch)
        sync(args.device)
        wall = (time.perf_counter() - t0) * 1e3
    events = prof.key_averages()
    dev_attr = "self_device_time_total" if hasattr(events[0], "self_device_time_total") else "self_cuda_time_total"
    # Kernel rows only: the table also lists each kernel's time under the op that launched it
    # (an H200 run summed both: 64.5 ms for a chunk whose graph replay took 43 ms).
    kernels = [e for e in events if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA
               and getattr(e, dev_attr, 0) > 0]
    kernel_ms = sum(getattr(e, dev_attr) for e in kernels) / 1e3
    top = sorted(kernels, key=lambda e: -getattr(e, dev_attr))[:15]
    by_name = {e.key: e.count for e in events}
    return {
        "wall_ms": round(wall, 3), "gpu_kernel_ms": round(kernel_ms, 3),
        "kernel_launches": int(sum(e.count for e in kernels)),
        "launch_calls": int(sum(c for k, c in by_name.items() if k in ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC"))),
        "host_sync_calls": {k: by_name[k] for k in SYNC_EVENTS if k in by_name},
        "aten_ops": int(sum(e.count for e in events if e.key.startswith("aten::"))),
        "top_kernels": [{"name": e.key[:90], "calls": e.count, "gpu_ms": round(getattr(e, dev_attr) / 1e3, 3)}
                        for e in top],
    }


def main(argv=None) -> int:
    args = parse_args("gpu_check: profile one chunk", argv)
    res = {"device": args.device, "size": args.size, "case": "fast path, eager, batch 1, 2 views, prompt 48"}
    for policy in ("pi0", "pi05"):
        guarded(res, policy, lambda: profile_chunk(args, policy))
        write(args.json_out, res)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
