"""Without a GPU and without the interpreter, backend="triton" must run the torch path cleanly.
This needs a fresh process: the interpreter is fixed at the first `import triton`."""
import json
import subprocess
import sys
import textwrap

from kernel_ref import plain_env as _plain_env


def test_triton_backend_falls_back_to_torch_without_gpu_or_interpreter():
    script = textwrap.dedent("""
        import json, torch
        from physai_ros.kernels import ops, _runtime
        assert not _runtime.interpreting() and not torch.cuda.is_available()
        torch.manual_seed(0)
        x, w, r = torch.randn(2, 5, 8), torch.randn(6, 8), torch.randn(2, 5, 6)
        s = ops.rms_row_scale(x, backend="triton")
        same = [torch.equal(ops.linear(x, w, residual=r, row_scale=s, activation="silu",
                                       backend="triton"),
                            ops.linear(x, w, residual=r, row_scale=s, activation="silu"))]
        wgu = torch.randn(12, 8)
        same.append(torch.equal(ops.gated_ffn(x, wgu, backend="triton"), ops.gated_ffn(x, wgu)))
        q = torch.randn(1, 3, 2, 4); k = torch.randn(1, 4, 1, 4); m = torch.ones(1, 3, 4).bool()
        same.append(torch.equal(ops.attention(q, k, k, m, 0.5, backend="triton"),
                                ops.attention(q, k, k, m, 0.5)))
        print(json.dumps({"same": same, "counters": ops.counters()}))
    """)
    out = subprocess.run([sys.executable, "-c", script], env=_plain_env(), capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    rep = json.loads(out.stdout.strip().splitlines()[-1])
    assert all(rep["same"])
    for op in ("rms_row_scale", "linear", "gated_ffn", "attention"):
        assert rep["counters"][f"fallback:{op}"] >= 1
    assert "no CUDA device and no Triton interpreter" in out.stderr  # logged once per op
