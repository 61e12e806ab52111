"""The language stream on the device (bench/language_stream.py, OxyGen's three modes side by
side) at full pi0 size in bf16: isolated vs shared prefill vs continuous batching, one and four
robots, 16-token texts. The actions run eagerly here: Pi0Engine refuses CUDA graphs while
the language stream keeps the frame's prefix cache (engine.infer_frame), which this step records."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from common import ROOT, config, guarded, parse_args, write

sys.path.insert(0, str(ROOT / "bench"))


def graphs_with_language(args) -> dict:
    from physai_ros.engine import Pi0Engine
    from common import inputs

    if torch.device(args.device).type != "cuda":
        return {"skipped": "CUDA graphs need a CUDA device"}
    cfg = config("tiny")
    eng = Pi0Engine(cfg, device=args.device, cuda_graphs=True, language=True)
    eng.keep_prefix = True
    try:
        eng.infer(inputs(cfg, 1, 2))
    except ValueError as exc:
        return {"supported": False, "why": str(exc)}
    return {"supported": True, "prefix_kept": eng.take_prefix() is not None}


def main(argv=None) -> int:
    args = parse_args("gpu_check step 4: the language stream", argv)
    import language_stream

    res: dict = {"device": args.device, "size": args.size}
    out = Path(args.json_out).with_suffix(".bench.json")
    preset = "pi0" if args.size == "full" else "tiny"
    dtype = "bfloat16" if torch.device(args.device).type == "cuda" else "float32"
    argv_bench = ["--device", args.device, "--preset", preset, "--dtype", dtype, "--robots", "1,4",
                  "--budgets", "16" if args.size == "full" else "4", "--frames", "3",
                  "--cell-seconds", "1" if args.size == "full" else "0", "--max-frames", "10",
                  "--f-min", "0.001", "--no-prediction", "--json", "--out", str(out)]
    res["command"] = "bench/language_stream.py " + " ".join(argv_bench)

    def bench():
        rc = language_stream.main(argv_bench)
        return {"rc": rc, **json.loads(out.read_text())} if out.exists() else {"rc": rc}

    guarded(res, "language_stream", bench)
    torch.set_default_device("cpu")  # language_stream points it at the GPU for its decoder
    guarded(res, "cuda_graphs_with_language", lambda: graphs_with_language(args))
    write(args.json_out, res)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
