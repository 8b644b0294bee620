"""Kernels run in kgen's own process (kgen/train_check/kernels.py): the interpreter's arithmetic
warnings are hidden where kgen runs interpreted kernels, and no other warning is."""

from __future__ import annotations

import warnings

import pytest

from kgen.train_check.kernels import interpreter_arithmetic_quiet

INTERPRETER = "triton.runtime.interpreter"


def _warn(category: type[Warning], module: str) -> None:
    warnings.warn_explicit("divide by zero encountered in log", category, filename="interpreter.py", lineno=725,
                           module=module)


def test_only_the_interpreters_runtime_warnings_are_hidden_and_only_inside():
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with interpreter_arithmetic_quiet():
            _warn(RuntimeWarning, INTERPRETER)  # a masked lane's log(0) in numpy: hidden
            _warn(RuntimeWarning, "kgen_train_check_kernel_rmsnorm")  # a kernel file's own: shown
            _warn(UserWarning, INTERPRETER)  # not arithmetic: shown
        _warn(RuntimeWarning, INTERPRETER)  # outside: shown
    assert [(w.category, w.filename) for w in seen] == [(RuntimeWarning, "interpreter.py"),
                                                       (UserWarning, "interpreter.py"),
                                                       (RuntimeWarning, "interpreter.py")]
    assert len(seen) == 3


def test_an_error_filter_outside_still_holds_for_other_modules():
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with interpreter_arithmetic_quiet():
            _warn(RuntimeWarning, INTERPRETER)
            with pytest.raises(RuntimeWarning):
                _warn(RuntimeWarning, "numpy.core")
