"""gpu_check's short Markdown table from its JSON: what passed, what failed and why, the timings
beside the roofline. Every figure in it is also in the JSON."""
from __future__ import annotations

from typing import Iterable, List


def _fmt(v, nd=3) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{nd}g}" if abs(v) < 1e-2 else f"{v:.{nd}f}".rstrip("0").rstrip(".")
    return str(v)


def _table(head: List[str], rows: Iterable[List[str]]) -> List[str]:
    rows = list(rows)
    if not rows:
        return []
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in rows]


def _errors(step: str, result: dict, prefix: str = "") -> List[str]:
    out = []
    for k, v in result.items():
        if isinstance(v, dict):
            if "error" in v:
                out.append(f"- {step} `{prefix}{k}`: {v['error'][:240]}")
            else:
                out.extend(_errors(step, v, f"{prefix}{k}/"))
    return out


def _correctness(r: dict) -> List[str]:
    rows = []
    for group, cases in r.items():
        if not isinstance(cases, dict):
            continue
        for case, v in cases.items():
            if isinstance(v, dict) and "ok" in v:
                err = v.get("rel_err", v.get("logits_rel_err", v.get("rel_err_vs_cpu")))
                rows.append([group, case, _fmt(err), _fmt(v.get("tol")), "yes" if v["ok"] else "**NO**"])
    return _table(["group", "case", "rel. error", "tolerance", "ok"], rows)


def _timing(r: dict) -> List[str]:
    cases = ["b1v1", "b1v2", "b1v3", "b4v2", "b16v2"]
    modes = sorted({k.rsplit("/", 1)[0] for k in r if k.count("/") == 2 and k.rsplit("/", 1)[1] in cases})
    rows = []
    for m in modes:
        cells = []
        for c in cases:
            v = r.get(f"{m}/{c}")
            cells.append("-" if not isinstance(v, dict) else ("error" if "error" in v else
                                                             f"{_fmt(v['p50_ms'])} / {_fmt(v['p99_ms'])}"))
        rows.append([m] + cells)
    roof = r.get("roofline", {})
    for key, label in (("h200_roofline_ms", "roofline, H200"), ("h100_sxm_roofline_ms", "roofline, H100 SXM"),
                       ("rtx4090_roofline_ms", "roofline, RTX 4090"), ("realtime_vla_rtx4090_ms", "realtime-vla, RTX 4090")):
        if isinstance(roof, dict) and key in roof:
            rows.append([label] + [_fmt(roof[key].get(str(v))) for v in (1, 2, 3)] + ["", ""])
    return _table(["policy/mode", "b1 1 view", "b1 2 views", "b1 3 views", "b4 2 views", "b16 2 views"], rows)


def _streaming(r: dict) -> List[str]:
    rows = []
    for k, v in r.items():
        if k.startswith("robots_") and isinstance(v, dict) and "error" not in v:
            rows.append([str(v["robots"]), v.get("tick", "fused"), _fmt(v.get("vlm_hz")), _fmt(v.get("ae_hz")),
                         _fmt(v.get("missed_tick_fraction")),
                         f"{_fmt(v.get('tick_compute_ms_p50'))} / {_fmt(v.get('tick_compute_ms_p99'))}",
                         _fmt(v.get("alone_tick_ms_p50")), _fmt(v.get("alone_vlm_ms_p50"))])
    return _table(["robots", "tick", "VLM Hz", "AE Hz", "missed ticks", "tick ms p50/p99", "tick alone ms", "VLM pass alone ms"], rows)


def _language(r: dict) -> List[str]:
    bench = r.get("language_stream", {})
    rows = []
    for cell in bench.get("cells", []) if isinstance(bench, dict) else []:
        for mode, v in cell["modes"].items():
            rows.append([str(cell["robots"]), str(cell["budget"]), mode, _fmt(v.get("frames_per_s")),
                         _fmt(v.get("tokens_per_s")), _fmt(v.get("p50_ms")), _fmt(v.get("p99_ms"))])
    return _table(["robots", "tokens", "mode", "frames/s", "tokens/s", "p50 ms", "p99 ms"], rows)


def _serving(r: dict) -> List[str]:
    rows = [[str(v["robots"]), _fmt(v.get("submit_to_chunk_ms_p50")), _fmt(v.get("submit_to_chunk_ms_p99")),
             str(v.get("error_count"))]
            for k, v in r.items() if k.startswith("robots_") and isinstance(v, dict) and "error" not in v]
    return _table(["robots", "submit->chunk p50 ms", "p99 ms", "errors"], rows)


SECTIONS = {"correctness": _correctness, "engine_timing": _timing, "streaming": _streaming,
            "language": _language, "serving": _serving}


def markdown(report: dict) -> str:
    s = report["stamp"]
    lines = [f"# gpu_check {s['date_utc']} UTC ({s['mode']})", "",
             f"commit {s['commit']}; GPU {s['gpu']} ({s['gpu_memory_gb']} GB), driver {s['driver']}, CUDA "
             f"{s['cuda_runtime']}, torch {s['torch']}, triton {s['triton']}, Python {s['python']}, "
             f"{s['cpu_count']} CPUs, load {s['load_avg_start']} -> {s.get('load_avg_end')}", ""]
    lines += _table(["step", "status", "seconds"],
                    [[k, v["status"], _fmt(v["seconds"])] for k, v in report["steps"].items()])
    errors = [e for k, v in report["steps"].items() for e in _errors(k, v.get("result", {}))]
    if errors:
        lines += ["", "## Errors", ""] + errors
    for step, fn in SECTIONS.items():
        if step in report["steps"]:
            body = fn(report["steps"][step].get("result", {}))
            if body:
                lines += ["", f"## {step}", ""] + body
    lines += ["", "Timings: wall ms p50 / p99 (engine_timing: Pi0Engine.infer, host inputs to host chunk)."]
    return "\n".join(lines) + "\n"
