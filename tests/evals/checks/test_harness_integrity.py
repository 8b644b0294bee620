"""The harness snapshot names every way a candidate can replace what kgen calls, and nothing else."""

import sys

import pytest
import torch

import kgen.evals.checks.compare as compare
from kgen.evals.checks.clock import shifted_clock
from kgen.evals.checks.harness_integrity import is_timer, take_snapshot, tampered


@pytest.fixture
def restore():
    """Undo the test's patches, whatever they were."""
    saved = []

    def patch(owner, name, value):
        saved.append((owner, name, owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)))
        setattr(owner, name, value)

    yield patch
    for owner, name, value in reversed(saved):
        setattr(owner, name, value)


def test_an_untouched_process_shows_no_change():
    snapshot = take_snapshot()
    assert len(snapshot) > 500
    assert tampered(snapshot) == []


def test_kgens_own_clock_shift_is_not_tampering():
    snapshot = take_snapshot()
    with shifted_clock():
        assert tampered(snapshot) == []


def test_a_replaced_kgen_function_is_named(restore):
    snapshot = take_snapshot()
    restore(compare, "compare_output", lambda *a, **k: None)
    changes = tampered(snapshot)
    assert any(c.startswith("kgen.evals.checks.compare.compare_output was replaced") for c in changes)
    assert not any(is_timer(c) for c in changes)


def test_a_code_swap_that_keeps_the_function_object_is_named(restore):
    snapshot = take_snapshot()
    restore(compare.check_structure, "__code__", (lambda outputs, expected: None).__code__)
    assert "kgen.evals.checks.compare.check_structure: its code or defaults were replaced" in tampered(snapshot)


def test_a_kgen_module_swapped_in_sys_modules_is_named(restore):
    snapshot = take_snapshot()
    restore_module = sys.modules["kgen.evals.checks.compare"]
    sys.modules["kgen.evals.checks.compare"] = type(sys)("fake")
    try:
        assert any("sys.modules['kgen.evals.checks.compare']" in c for c in tampered(snapshot))
    finally:
        sys.modules["kgen.evals.checks.compare"] = restore_module


def test_timers_and_synchronisation_are_named_as_timers(restore):
    snapshot = take_snapshot()
    restore(torch.cuda, "synchronize", lambda *a, **k: None)
    restore(torch.cuda.Event, "elapsed_time", lambda self, end: 1e-3)
    changes = tampered(snapshot)
    assert any(c.startswith("torch.cuda.synchronize was replaced") for c in changes)
    assert any(c.startswith("torch.cuda.Event.elapsed_time was replaced") for c in changes)
    assert all(is_timer(c) for c in changes)


def test_triton_do_bench_is_watched(restore):
    import triton.testing

    snapshot = take_snapshot()
    restore(triton.testing, "do_bench", lambda *a, **k: 0.001)
    assert any(c.startswith("triton.testing.do_bench was replaced") and is_timer(c) for c in tampered(snapshot))


def test_a_torch_method_shadowed_on_tensor_is_named(restore):
    snapshot = take_snapshot()
    torch.Tensor.clone_backup = None  # a new name alone is not judged
    del torch.Tensor.clone_backup
    assert tampered(snapshot) == []
    torch.Tensor.clone = lambda self, *a, **k: self  # shadows the C method of the base class
    try:
        assert any(c.startswith("torch.Tensor.clone was replaced") for c in tampered(snapshot))
    finally:
        del torch.Tensor.clone
    assert tampered(snapshot) == []


def test_torch_replacing_its_own_function_is_not_tampering_but_a_wrapped_fake_is(restore):
    snapshot = take_snapshot()
    restore(torch, "manual_seed", torch.no_grad()(torch.random.manual_seed))  # torch's code, torch's function
    assert tampered(snapshot) == []
    restore(torch, "manual_seed", torch.no_grad()(lambda seed: None))  # torch's wrapper round a fake
    assert any(c.startswith("torch.manual_seed was replaced") for c in tampered(snapshot))
    restore(torch.cuda, "synchronize", id)  # a builtin no-op that torch does not define
    assert any(c.startswith("torch.cuda.synchronize was replaced") for c in tampered(snapshot))
