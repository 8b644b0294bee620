"""What an exported package says about its kernels: ``manifest.json``, as typed models.

The package's runtime (``kgen/export/op_runtime.py``, copied in as ``_runtime.py``) reads the
same file as plain JSON, since it may not import kgen; these models are the one place its
fields are named and documented, and ``kgen export`` writes them from here only.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

#: the file beside the runtime that lists the kernels
MANIFEST_FILE = "manifest.json"
#: an entry's ``registration`` (the runtime, which imports no kgen, spells the same two words)
TRITON_OP, CUSTOM_OP = "triton_op", "custom_op"


class InputSpec(BaseModel):
    """One argument of the problem's ``forward``, as the verifier gave it."""

    name: str
    kind: Literal["tensor", "scalar"]
    #: torch's spelling of a tensor's dtype ("torch.bfloat16"); a scalar's schema type otherwise
    dtype: str = ""
    ndim: int = 0
    #: "contiguous": the verifier gave only plain layouts, so the op makes the input contiguous;
    #: "as_given": the problem's inputs are views and the kernel was verified on their strides
    layout: Literal["contiguous", "as_given"] = "contiguous"
    #: a floating-point tensor: a gradient flows to it where the package registers autograd
    differentiable: bool = False
    #: a scalar's schema type ("float", "int", "bool")
    type: str = ""


class InitSpec(BaseModel):
    """One argument of the problem's ``Model.__init__``: an op argument with the problem's value
    as its default."""

    name: str
    type: Literal["float", "int", "bool"]
    default: float | int | bool


class KernelEntry(BaseModel):
    """One exported kernel: what it computes, where its verdict came from, how the op calls it."""

    #: the op's name (``torch.ops.<namespace>.<name>``): the catalog problem's name
    name: str
    problem: str
    description: str = ""
    kind: str = "forward"
    backend: str
    target: str = ""
    verdict: str
    #: where the verdict was read: a run's ``eval.json``, a seed's ``evidence.json``, or a
    #: verification at export time
    evidence: str
    #: measured speed as the source recorded it, or why there is none
    speed: str = ""
    #: kgen's code hash (``knowledge_base/code_hash.py``: comments do not count) of the kernel
    code_hash: str
    kernel_file: str
    #: sha256 of the kernel file's bytes, checked at import
    kernel_sha256: str
    reference_file: str
    reference_sha256: str
    inputs: list[InputSpec]
    init: list[InitSpec] = Field(default_factory=list)
    outputs: int = 1
    #: per output: the largest normalised error the verifier allows for its dtype
    tolerances: list[float]
    #: per differentiable input, where a backward is paired: the backward's output tolerances
    grad_tolerances: list[float] = Field(default_factory=list)
    #: every size constant of the reference at the problem's CPU sizes (the package's test sizes)
    small_sizes: dict[str, int]
    #: the name of the paired backward kernel (``evals/problem/catalog.py`` paired_backward)
    backward: str | None = None
    #: "triton_op": torch.compile traces the kernel's launches into its graph (Inductor sees the
    #: Triton kernels); "custom_op": an opaque op (a backend torch cannot trace, or a kernel whose
    #: Python wrapper did not trace when `kgen export` tried: ``registration_note`` says why)
    registration: Literal["triton_op", "custom_op"] = "custom_op"
    registration_note: str = ""


class Manifest(BaseModel):
    package: str
    namespace: str
    kgen_version: str
    exported_at: str
    kernels: list[KernelEntry]
