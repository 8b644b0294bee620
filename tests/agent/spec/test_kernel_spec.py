"""The spec a run makes: one problem, one backend, one or more hardware targets."""

from __future__ import annotations

import pytest

from kgen.agent.spec.kernel_spec import KernelSpec


def test_kernel_spec_needs_a_target():
    with pytest.raises(ValueError):
        KernelSpec(request="r", problem="softmax", operation="o", targets=[], source="matcher")
