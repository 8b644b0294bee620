"""Resetting the L2's persisting state before a timed run: each step through the CUDA runtime,
and a failure of any step a note, never a crash (a fake runtime on the CPU; a real one on a GPU)."""

import ctypes

import pytest
import torch

from kgen.evals.timing import l2_state
from kgen.evals.timing.l2_state import reset_persisting_l2

CUDA = torch.cuda.is_available()


class FakeRuntime:
    """The four runtime calls, recorded; ``limit`` is what cudaDeviceGetLimit reports."""

    def __init__(self, limit=0, failing=()):
        self.limit, self.failing, self.calls = limit, set(failing), []
        for name in ("cudaDeviceGetLimit", "cudaCtxResetPersistingL2Cache", "cudaDeviceSetLimit",
                     "cudaStreamSetAttribute"):
            setattr(self, name, self._function(name))

    def _function(self, name):
        def call(*args):
            self.calls.append(name)
            if name == "cudaDeviceGetLimit":
                ctypes.cast(args[0], ctypes.POINTER(ctypes.c_size_t))[0] = self.limit
            return 700 if name in self.failing else 0
        return call


def test_every_step_runs_and_a_limit_left_set_is_reported():
    runtime = FakeRuntime(limit=32 * 2**20)
    reset = reset_persisting_l2(0, runtime)
    assert runtime.calls == ["cudaDeviceGetLimit", "cudaCtxResetPersistingL2Cache", "cudaDeviceSetLimit",
                             "cudaStreamSetAttribute"]
    assert reset.lines_reset and reset.limit_zeroed and reset.window_cleared and not reset.notes
    assert reset.persisting_limit_bytes == 32 * 2**20
    assert "the persisting L2 limit was 33554432 bytes before the reset" in reset.describe()


def test_a_failing_step_is_a_note_and_the_others_still_run():
    runtime = FakeRuntime(failing={"cudaCtxResetPersistingL2Cache"})
    reset = reset_persisting_l2(None, runtime)
    assert not reset.lines_reset and reset.limit_zeroed and not reset.window_cleared
    assert reset.notes == ["cudaCtxResetPersistingL2Cache: CUDA error 700"]
    assert "cudaStreamSetAttribute" not in runtime.calls  # no stream: no window to clear


def test_no_runtime_library_is_a_note(monkeypatch):
    monkeypatch.setattr(l2_state, "cuda_runtime", lambda: None)
    reset = reset_persisting_l2(0)
    assert not reset.lines_reset and "no CUDA runtime library" in reset.describe()


def test_a_runtime_without_the_calls_is_a_note():
    reset = reset_persisting_l2(0, object())
    assert not (reset.lines_reset or reset.limit_zeroed or reset.window_cleared)
    assert any("not in this CUDA runtime" in note for note in reset.notes)


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_on_a_gpu_the_persisting_state_is_reset():
    torch.ones(1, device="cuda").sum().item()  # a context
    reset_persisting_l2(torch.cuda.current_stream().cuda_stream)
    # the limit before a reset is the driver's default (non-zero on an H200) or what was set;
    # after one, a second reset finds it at zero
    again = reset_persisting_l2(torch.cuda.current_stream().cuda_stream)
    assert again.lines_reset and again.limit_zeroed, again.describe()
    assert again.persisting_limit_bytes == 0, again.describe()
