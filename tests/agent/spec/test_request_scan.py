"""A request's words: which backends a request for several asks for, in its order."""

from __future__ import annotations

import pytest

from kgen.agent.spec.request_scan import requested_backends


@pytest.mark.parametrize(("text", "backends"), [
    ("RMSNorm backward for H100, both backends", ["triton", "cute"]),
    ("softmax on all the backends for b200", ["triton", "cute"]),
    ("layernorm forward with every kernel backend", ["triton", "cute"]),
    ("each backend: swiglu", ["triton", "cute"]),
    ("triton or cute softmax", ["triton", "cute"]),
    ("CuTe DSL and Triton rmsnorm forward", ["cute", "triton"]),
    ("CuTe RMSNorm backward for H100", []),
    ("rmsnorm backward", []),
    ("the backend of a model: rmsnorm", []),  # "backend" alone asks for nothing
])
def test_a_request_for_several_backends_names_them_in_order(text, backends):
    assert requested_backends(text) == backends
