"""Bad input: a clear ValueError naming the problem, counted in ops.counters()."""
import pytest
import torch

from physai_ros.kernels import ops


def _rejected(op):
    return ops.counters().get(f"rejected:{op}", 0)


@pytest.mark.parametrize("backend", ops.BACKENDS)
@pytest.mark.parametrize("call,op,match", [
    (lambda be: ops.linear(torch.ones(2, 3), torch.ones(4, 5), backend=be), "linear", "K=3"),
    (lambda be: ops.linear(torch.ones(2, 3), torch.ones(4, 3), torch.ones(5), backend=be),
     "linear", "bias shape"),
    (lambda be: ops.linear(torch.ones(2, 3), torch.ones(4, 3, dtype=torch.bfloat16), backend=be),
     "linear", "dtype"),
    (lambda be: ops.linear(torch.ones(2, 3), torch.ones(4, 3), activation="relu", backend=be),
     "linear", "activation"),
    (lambda be: ops.linear(torch.ones(2, 3), torch.ones(4, 3), row_scale=torch.ones(3),
                           backend=be), "linear", "row_scale"),
    (lambda be: ops.gated_ffn(torch.ones(2, 3), torch.ones(5, 3), backend=be), "gated_ffn", "2F"),
    (lambda be: ops.qkv_rope(torch.ones(1, 2, 3), torch.ones(12, 3), torch.ones(1, 2, 4),
                             torch.ones(1, 2, 4), 1, 1, 3, backend=be), "qkv_rope", "even"),
    (lambda be: ops.attention(torch.ones(1, 2, 3, 4), torch.ones(1, 5, 2, 4),
                              torch.ones(1, 5, 2, 4), torch.ones(1, 2, 5, dtype=torch.bool), 1.0,
                              backend=be), "attention", "multiple"),
    (lambda be: ops.attention(torch.ones(1, 2, 2, 4), torch.ones(1, 5, 2, 4),
                              torch.ones(1, 5, 2, 4), torch.ones(1, 2, 5), 1.0, backend=be),
     "attention", "bool"),
    (lambda be: ops.rms_row_scale(torch.ones(3, dtype=torch.int64), backend=be),
     "rms_row_scale", "floating"),
])
def test_invalid_inputs_raise_and_count(backend, call, op, match):
    before = _rejected(op)
    with pytest.raises(ValueError, match=match):
        call(backend)
    assert _rejected(op) == before + 1


def test_unknown_backend():
    with pytest.raises(ValueError, match="backend"):
        ops.linear(torch.ones(2, 3), torch.ones(4, 3), backend="cuda")
