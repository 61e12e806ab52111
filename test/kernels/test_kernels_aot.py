"""Every kind of kernel compiles for a real GPU target (sm_90) without a GPU: Triton's whole
pipeline down to a ptxas cubin runs on the CPU. The interpreter tests prove the math; this
proves the kernels are valid GPU programs that fit in shared memory (the interpreter accepts
things the compiler rejects, e.g. differently shaped tiles under one name in two branches)."""
import json
import subprocess
import sys

from kernel_ref import plain_env


def test_each_kernel_kind_compiles_for_sm90(tmp_path):
    env = plain_env()
    env["TRITON_CACHE_DIR"] = str(tmp_path)  # really compile, never reuse a cached cubin
    out = subprocess.run(
        [sys.executable, "-m", "physai_ros.kernels.aot", "--arch", "sm_90", "--quick", "--json"],
        env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    results = json.loads(out.stdout)
    kinds = {r["kernel"] for r in results}
    assert kinds == {"linear", "split_reduce", "gated_ffn", "qkv_rope", "attention", "row_scale"}
    for r in results:
        assert r["error"] == "" and r["fits"] and r["cc"] == 90, r
    shared = {r["kernel"]: r["shared_bytes"] for r in results}
    # Pipelined tiles: the first sm_90 linear config is 64x128x32 with 4 stages of bf16 tiles.
    assert shared["linear"] == 4 * (64 * 32 + 32 * 128) * 2


def test_fp32_attention_fits_a_hopper_block_at_both_head_widths(tmp_path):
    """Attention has no fallback config: in fp32 (with the tf32x3 dots that keep it accurate) its
    default launch must fit sm_90's 232,448 bytes for the vision tower's 72-wide heads and the
    language model's 256-wide ones. The bf16 three-stage config asked 237,568 there on an H200."""
    env = plain_env()
    env["TRITON_CACHE_DIR"] = str(tmp_path)
    out = subprocess.run(
        [sys.executable, "-m", "physai_ros.kernels.aot", "--arch", "sm_90", "--dtype", "fp32",
         "--kernel", "attention", "--json"],
        env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    results = json.loads(out.stdout)
    assert len(results) == 2 and all(r["kernel"] == "attention" for r in results)
    for r in results:
        assert r["error"] == "" and r["fits"] and r["config"].endswith("fp32"), r
        assert 0 < r["shared_bytes"] <= 232448, r


def test_fp32_gemms_compile_with_tf32x3_dots(tmp_path):
    """The dots of fp32 tiles ask for tf32x3 (_runtime.dot_precision): a valid sm_90 program."""
    env = plain_env()
    env["TRITON_CACHE_DIR"] = str(tmp_path)
    out = subprocess.run(
        [sys.executable, "-m", "physai_ros.kernels.aot", "--arch", "sm_90", "--dtype", "fp32",
         "--quick", "--kernel", "gated_ffn", "--kernel", "qkv_rope", "--kernel", "linear", "--json"],
        env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    results = json.loads(out.stdout)
    assert {r["kernel"] for r in results} == {"linear", "gated_ffn", "qkv_rope"}
    assert all(r["error"] == "" and r["fits"] for r in results), results
