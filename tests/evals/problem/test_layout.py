"""Input copies keep strides, offsets and shared storage: a view stays a view."""

import torch

from kgen.evals.problem.layout import compact_copies, copy_inputs, describe_layout, is_plain_layout


def test_views_of_one_fused_tensor_stay_views_of_one_new_storage():
    qkv = torch.randn(2, 5, 12)
    q, k, t = qkv[..., :4], qkv[..., 4:8], torch.randn(6, 8).t()
    cq, ck, ct, n = copy_inputs([q, k, t, 7])
    assert n == 7
    for before, after in ((q, cq), (k, ck), (t, ct)):
        assert after.stride() == before.stride() and after.storage_offset() == before.storage_offset()
        assert torch.equal(after, before)
        assert after.untyped_storage().data_ptr() != before.untyped_storage().data_ptr()
    assert cq.untyped_storage().data_ptr() == ck.untyped_storage().data_ptr()  # still one storage
    cq.fill_(0)
    assert torch.equal(q, qkv[..., :4]) and q.abs().sum() > 0  # the original is untouched


def test_plain_layout_and_compact_copies():
    x = torch.randn(4, 8)
    assert is_plain_layout(x) and not is_plain_layout(x[:, :4]) and not is_plain_layout(x.t())
    (compact,) = compact_copies([x.t()])
    assert compact.is_contiguous() and torch.equal(compact, x.t())
    assert "strides (1, 8)" in describe_layout(x.t())
