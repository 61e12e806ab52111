"""The language stream on the device (bench/language_stream.py, OxyGen's three modes side by
side) at full pi0.5 size in bf16: isolated vs shared prefill vs continuous batching, one and four
robots, 16-token texts, every action step and isolated's text prefill through CUDA graphs (the
server's engine; runs 3 and 4 measured them eager: ~250 ms a frame, so continuous batching under
the paper's 5 frames/s floor decoded nothing); then, tiny, the language stream on
an engine with CUDA graphs against the same eager (the replay hands the text a copy of its prefix
rows: engine.infer_frame)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from common import ROOT, config, guarded, inputs, parse_args, rel_err, write

sys.path.insert(0, str(ROOT / "bench"))


def graphs_with_language(args) -> dict:
    """The language stream on an engine with CUDA graphs: the replay hands back a copy of the
    robots' prefix rows; three greedy decode steps from it against the same from an eager engine
    with the same weights (tiny, bf16), and the chunks of both."""
    from physai_ros.engine import Pi0Engine, random_weights
    from physai_ros.engine.language.decoder import SamplingParams

    if torch.device(args.device).type != "cuda":
        return {"skipped": "CUDA graphs need a CUDA device"}
    cfg = config("tiny")
    w = random_weights(cfg, seed=12)
    batch = inputs(cfg, 2, 2, seed=13)
    logits, chunks = {}, {}
    for graphs in (False, True):
        eng = Pi0Engine(cfg, {k: v.clone() for k, v in w.items()}, device=args.device, dtype=torch.bfloat16,
                        cuda_graphs=graphs, language=True)
        outs, cache, b = eng.infer_frame(batch, keep_prefix=True)
        dec = eng.language_decoder()
        reqs = [dec.start(cache, r, int(b.tokens[r][b.token_mask[r]][-1]), SamplingParams(max_tokens=3), str(r))
                for r in range(2)]
        steps = []
        for _ in range(3):
            lg = dec.next_logits(reqs)
            steps.append(lg.float().cpu())
            for r, row in zip(reqs, lg):
                r.tokens.append(int(torch.argmax(row)))
        logits[graphs], chunks[graphs] = torch.stack(steps), torch.stack([o.actions for o in outs])
    err_l, err_c = rel_err(logits[True], logits[False]), rel_err(chunks[True], chunks[False])
    return {"logits_rel_err": err_l, "chunks_rel_err": err_c, "tol": 6e-2, "ok": bool(err_l <= 6e-2 and err_c <= 6e-2)}


def main(argv=None) -> int:
    args = parse_args("gpu_check step 4: the language stream", argv)
    import language_stream

    res: dict = {"device": args.device, "size": args.size}
    out = Path(args.json_out).with_suffix(".bench.json")
    preset = "pi0" if args.size == "full" else "tiny"
    dtype = "bfloat16" if torch.device(args.device).type == "cuda" else "float32"
    # Full size: pi0.5 at the paper's floor (OxyGen: 50 Hz actions, 10-action chunks: 5 frames/s),
    # the isolated baseline batching each frame's texts as a serving stack would.
    argv_bench = ["--device", args.device, "--preset", preset, "--dtype", dtype, "--robots", "1,4",
                  "--budgets", "16" if args.size == "full" else "4", "--frames", "3",
                  "--cell-seconds", "1" if args.size == "full" else "0", "--max-frames", "10",
                  "--f-min", "5" if args.size == "full" else "0.001", "--no-prediction", "--json", str(out)]
    if args.size == "full":
        argv_bench += ["--policy", "pi05"]
    if torch.device(args.device).type == "cuda":
        argv_bench += ["--cuda-graphs"]
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
