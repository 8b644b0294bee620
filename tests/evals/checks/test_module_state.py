"""Weights re-drawn and transferred by name or by shape; state changes found, bit for bit."""

import torch
import torch.nn as nn

from kgen.evals.checks.module_state import (
    changed_state,
    rerandomise,
    state_fingerprint,
    transfer_weights,
)


class Reference(nn.Module):
    def __init__(self):
        super().__init__()
        self.gemm = nn.Linear(8, 4)
        self.norm = nn.LayerNorm(4)


class SameNames(Reference):
    pass


class OtherNames(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(4, 8))
        self.bias = nn.Parameter(torch.zeros(4))
        self.gamma = nn.Parameter(torch.zeros(4))
        self.beta = nn.Parameter(torch.zeros(4))


def test_rerandomise_changes_every_tensor_and_gives_constants_a_spread():
    ref = Reference()
    before = {k: v.clone() for k, v in ref.state_dict().items()}
    rerandomise(ref, torch.Generator().manual_seed(0))
    for key, value in ref.state_dict().items():
        assert not torch.equal(value, before[key]), key
    assert ref.norm.weight.std() > 0.05  # ones no longer hide an ignored weight
    assert (ref.norm.weight >= 0).all()  # a never-negative tensor stays non-negative


def test_transfer_by_name_then_by_shape_and_order_then_none():
    ref = Reference()
    rerandomise(ref, torch.Generator().manual_seed(1))
    same, other = SameNames(), OtherNames()
    assert transfer_weights(ref, same).how == "by name"
    assert torch.equal(same.gemm.weight, ref.gemm.weight)
    moved = transfer_weights(ref, other)
    assert moved.how == "by shape and order" and moved.tensors == 4
    assert torch.equal(other.weight, ref.gemm.weight) and torch.equal(other.beta, ref.norm.bias)
    assert not transfer_weights(ref, nn.Linear(3, 3)).transferred
    assert not transfer_weights(ref, object()).transferred


def test_changed_state_sees_buffers_attributes_and_module_globals():
    import types

    module = SameNames()
    module.register_buffer("flag", torch.zeros(1))
    module.cache = [torch.zeros(3)]
    globals_of = types.ModuleType("candidate")
    globals_of.SCRATCH = torch.zeros(5)
    before = state_fingerprint(module, globals_of)
    assert changed_state(before, module, globals_of) == []
    module.flag.fill_(1)
    module.cache[0][1] = 2.0
    globals_of.SCRATCH[0] = 3.0
    assert set(changed_state(before, module, globals_of)) == {"flag", "cache[0]", "module global SCRATCH"}


def test_class_attributes_default_arguments_and_closures_are_state_too():
    import types

    globals_of = types.ModuleType("candidate")
    scratch = torch.zeros(3)

    def make():
        def run(x, _cache=torch.zeros(2)):  # noqa: B008 - the state under test
            return scratch

        return run

    class Counter(nn.Module):
        calls = torch.zeros(1)

    Counter.__module__ = "candidate"
    globals_of.Counter, globals_of.run = Counter, make()
    before = state_fingerprint(None, globals_of)
    Counter.calls += 1
    globals_of.run.__defaults__[0][0] = 1.0
    scratch[2] = 5.0
    changed = changed_state(before, None, globals_of)
    assert any("class attribute Counter.calls" in c for c in changed)
    assert any("default argument 0 of run" in c for c in changed)
    assert any("closure cell 0 of run" in c for c in changed)
