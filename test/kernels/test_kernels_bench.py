"""bench/kernels.py: refuses politely without CUDA, and the calls it times are valid."""
import json
import subprocess
import sys
from pathlib import Path

from kernel_ref import plain_env as _plain_env

ROOT = Path(__file__).resolve().parents[2]


def test_bench_kernels_refuses_without_cuda():
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "kernels.py"), "--json"],
                         env=_plain_env(), capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    rep = json.loads(out.stdout)
    assert rep["status"] == "no_cuda" and "GPU" in rep["message"]


def test_bench_cases_are_correct_under_the_interpreter():
    # bench/kernels.py cannot time anything here, but the calls it builds for every Table 2
    # row kind (and both attention shapes) must be valid: shrunken to interpreter sizes, each
    # case's triton result matches its torch result through the bench's own check.
    import importlib.util

    import torch

    spec = importlib.util.spec_from_file_location("bench_kernels", ROOT / "bench" / "kernels.py")
    bench = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_kernels", bench)  # dataclasses look their module up by name
    spec.loader.exec_module(bench)
    kinds = {}
    for row in bench.roofline.pi0_rows(1):
        if not row.attention_heads:
            kinds.setdefault(row.ops, row)
    head_dim = 16
    for ops_, row in kinds.items():
        m = 10 * head_dim if "rope" in ops_ else 48
        small = bench.roofline.Row(row.part, 1, 9, 40, m, row.ops)
        case = bench.gemm_case(small, "cpu", torch.bfloat16, head_dim=head_dim)
        bench.check_case(case)
    cases = bench.attention_cases(1, "cpu", torch.float32, tokens_per_view=12, expert_tokens=5,
                                  head_dim=head_dim, heads=4)
    for case in cases:
        bench.check_case(case)
    assert {c.op for c in cases} == {"attention"} and len(kinds) >= 6
