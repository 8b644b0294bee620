"""Copied values followed into the outputs: a tile by copies is measured, a copy that moves
each computed value once is not, and nothing the forward computes changes."""

from __future__ import annotations

import pytest
import torch

from kgen.evals.checks.copy_provenance import replicated_outputs, trace_copies

X = torch.randn(16, 8)


def _computed(rows: slice) -> torch.Tensor:
    """A computed result (a new storage the call allocated), standing in for a kernel's."""
    return torch.sin(X[rows])


def _shares(forward) -> list[float]:
    with trace_copies() as provenance:
        outputs = forward()
    outputs = outputs if isinstance(outputs, list) else [outputs]
    return [round(r.share, 4) for r in replicated_outputs(provenance, outputs)]


def _slice_broadcast():
    out = torch.empty(16, 8)
    out[:1] = _computed(slice(0, 1))
    out[1:] = out[:1]
    return out


def _loop_copy():
    row, out = _computed(slice(0, 1))[0], torch.empty(16, 8)
    for r in range(16):
        out[r].copy_(row)
    return out


def _halves():
    h = _computed(slice(0, 8))
    return torch.cat([h, h])


def _index_repeat():
    return _computed(slice(0, 1)).index_select(0, torch.zeros(16, dtype=torch.long))


@pytest.mark.parametrize("forward, share", [
    (lambda: _computed(slice(0, 1)).expand(16, 8).contiguous(), 15 / 16),
    (lambda: _computed(slice(0, 1)).repeat(16, 1), 15 / 16),
    (_slice_broadcast, 15 / 16),
    (_loop_copy, 15 / 16),
    (_halves, 0.5),
    (_index_repeat, 15 / 16),
    (lambda: torch.empty(16, 8).copy_(_computed(slice(0, 1))[0].as_strided((16, 8), (0, 1))), 15 / 16),
], ids=["expand_contiguous", "repeat", "slice_broadcast", "loop_copy", "cat_halves", "index_select", "as_strided"])
def test_a_tile_of_a_computed_result_is_measured(forward, share):
    assert _shares(forward) == [round(share, 4)]


def _scratch_copy():
    out = torch.empty(16, 8)
    out.copy_(_computed(slice(None)))
    return out


BIAS = torch.randn(8)


def _bias_rows():
    out = torch.empty(16, 8)
    out.fill_(1.0)  # a constant, not data computed in the call
    out.copy_(BIAS.expand(16, 8))  # data that existed before the call (a parameter)
    return out


@pytest.mark.parametrize("forward", [
    _scratch_copy,
    lambda: _computed(slice(None)).t().contiguous(),
    lambda: _computed(slice(None)).reshape(-1).view(16, 8),
    lambda: _computed(slice(0, 1)).expand(16, 8),  # a stride-0 view: no copy made
    lambda: X.contiguous().clone(),
    _bias_rows,
], ids=["scratch_copy", "transpose_copy", "views", "expanded_view", "input_copies", "bias_and_fill"])
def test_a_copy_that_moves_each_value_once_repeats_nothing(forward):
    assert _shares(forward) == []


def test_a_computed_write_after_a_copy_makes_the_elements_the_calls_own():
    def forward():
        out = _computed(slice(0, 1)).expand(16, 8).contiguous()
        return out.mul_(2.0)  # computed in place: every element now its own value

    assert _shares(forward) == []


def test_the_ops_that_wrote_the_tile_are_named():
    with trace_copies() as provenance:
        out = _computed(slice(0, 1)).expand(16, 8).contiguous()
    (found,) = replicated_outputs(provenance, [out])
    assert found.ops == ["aten.clone of a broadcast (stride-0) view"]
    assert "94% of its elements (120 of 128)" in found.describe()


def test_following_copies_changes_no_result():
    def forward():
        out = torch.empty(16, 8)
        out[:4] = torch.sin(X[:4])
        out[4:] = out[:4].repeat(3, 1)
        return torch.cat([out, out.flip(0)]).clone()

    with trace_copies():
        traced = forward()
    assert torch.equal(traced, forward())


def test_a_whole_copy_of_an_input_keeps_no_origin_tensor():
    """``x.contiguous()`` of a large input is common: it must not cost eight bytes an element."""
    with trace_copies() as provenance:
        copy = X.t().contiguous()
        out = torch.sin(copy)
    assert provenance._origins == {}
    assert replicated_outputs(provenance, [out, copy]) == []
