"""Masked GQA attention kernel vs the torch reference, for pi0's two mask patterns."""
import pytest
import torch

from physai_ros.kernels import ops
from physai_ros.kernels.attention import AttentionConfig, attention_4d
from kernel_ref import DTYPES, assert_close, rand


def prefix_mask(valid_lengths, length):
    """Bidirectional over the prefix; padded positions neither attend nor are attended."""
    valid = torch.arange(length)[None, :] < torch.tensor(valid_lengths)[:, None]
    return valid[:, :, None] & valid[:, None, :]


def expert_mask(prefix_valid, prefix_len, state_tokens, action_tokens):
    """pi0 action expert: suffix queries see every valid prefix key; the state block sees
    itself; action tokens see the state block and all action tokens (block-causal)."""
    b = len(prefix_valid)
    suffix = state_tokens + action_tokens
    block = torch.tensor([0] * state_tokens + [1] * action_tokens)
    causal = block[None, :] <= block[:, None]  # [suffix, suffix]
    pre = torch.arange(prefix_len)[None, :] < torch.tensor(prefix_valid)[:, None]  # [B, P]
    mask = torch.cat([pre[:, None, :].expand(b, suffix, prefix_len),
                      causal[None].expand(b, suffix, suffix)], dim=-1)
    return mask


@pytest.mark.parametrize("dtype", DTYPES)
def test_prefix_bidirectional_with_padding(dtype):
    g = torch.Generator().manual_seed(0)
    b, length, h, kvh, d = 2, 37, 4, 1, 24
    q = rand(b, length, h, d, dtype=dtype, gen=g)
    k = rand(b, length, kvh, d, dtype=dtype, gen=g)
    v = rand(b, length, kvh, d, dtype=dtype, gen=g)
    mask = prefix_mask([37, 21], length)
    got = ops.attention(q, k, v, mask, d ** -0.5, backend="triton")
    want = ops.attention(q, k, v, mask, d ** -0.5)
    assert_close(got, want, dtype)
    assert torch.all(got[1, 21:] == 0), "fully padded query rows must be zeros"


@pytest.mark.parametrize("dtype", DTYPES)
def test_action_expert_block_causal_over_prefix_cache(dtype):
    g = torch.Generator().manual_seed(1)
    b, prefix, state, actions, h, kvh, d = 2, 45, 1, 10, 4, 2, 16
    lk = prefix + state + actions
    q = rand(b, state + actions, h, d, dtype=dtype, gen=g)
    k = rand(b, lk, kvh, d, dtype=dtype, gen=g)
    v = rand(b, lk, kvh, d, dtype=dtype, gen=g)
    mask = expert_mask([45, 30], prefix, state, actions)
    got = ops.attention(q, k, v, mask, d ** -0.5, backend="triton")
    want = ops.attention(q, k, v, mask, d ** -0.5)
    assert_close(got, want, dtype)
    # The state token must ignore the action tokens: perturbing them leaves it unchanged.
    k2, v2 = k.clone(), v.clone()
    k2[:, prefix + state:] += 1
    v2[:, prefix + state:] += 1
    again = ops.attention(q, k2, v2, mask, d ** -0.5, backend="triton")
    assert torch.equal(again[:, :state], got[:, :state])
    assert not torch.equal(again[:, state:], got[:, state:])


def test_gqa_equals_repeated_heads_and_strided_views():
    # Inputs as views into one fused qkv buffer (how qkv_rope returns them): non-contiguous.
    g = torch.Generator().manual_seed(2)
    b, length, h, kvh, d = 1, 20, 6, 2, 8
    buf = rand(b, length, h + 2 * kvh, d, gen=g)
    q, k, v = buf[:, :, :h], buf[:, :, h:h + kvh], buf[:, :, h + kvh:]
    assert not q.is_contiguous()
    mask = torch.ones(b, length, length, dtype=torch.bool)
    got = ops.attention(q, k, v, mask, 0.3, backend="triton")
    mha = ops.attention(q.contiguous(), k.repeat_interleave(3, dim=2),
                        v.repeat_interleave(3, dim=2), mask, 0.3, backend="triton")
    torch.testing.assert_close(got, mha, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got, ops.attention(q, k, v, mask, 0.3), rtol=1e-4, atol=1e-4)


def test_multi_block_online_softmax():
    # Small blocks force several key blocks per row, so the running max/sum rescaling matters;
    # large logits would overflow a naive exp. With 2 query heads per k/v head packed as 38
    # rows, 16-row blocks straddle the boundary between the two heads.
    g = torch.Generator().manual_seed(3)
    b, lq, lk, h, kvh, d = 2, 19, 70, 2, 1, 16
    q = rand(b, lq, h, d, gen=g, scale=4.0)
    k = rand(b, lk, kvh, d, gen=g, scale=4.0)
    v = rand(b, lk, kvh, d, gen=g)
    mask = torch.rand(b, lq, lk, generator=g) > 0.4
    mask[:, :, :16] = False  # the whole first key block is masked for every row
    got = attention_4d(q, k, v, mask, 1.0, config=AttentionConfig(16, 16))
    assert_close(got, ops.attention(q, k, v, mask, 1.0), torch.float32)


def test_broadcast_mask_and_residual_layouts():
    # Engines build one mask and expand it over the batch (stride 0): the kernel reads strides.
    g = torch.Generator().manual_seed(4)
    q = rand(3, 5, 2, 8, gen=g)
    k = rand(3, 7, 1, 8, gen=g)
    mask = (torch.rand(1, 5, 7, generator=g) > 0.3).expand(3, 5, 7)
    assert mask.stride(0) == 0
    got = ops.attention(q, k, k, mask, 0.3, backend="triton")
    assert_close(got, ops.attention(q, k, k, mask.contiguous(), 0.3), torch.float32)
