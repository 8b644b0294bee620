"""What a run makes: a :class:`KernelSpec` (problem, backend, targets, dtypes, shapes).

Two readers turn a request sentence into one and give the same result. The catalog matcher
(``catalog_matcher.parse_request``) is deterministic over the problem catalog's names and
aliases, so kgen understands "Triton RMSNorm backward for H100" with no model and no
network; the model reader (``model_reader.parse_request_with_model``) asks a model and then
checks its answer against the catalog and the target registry. Both read a request's GPUs,
dtypes, backends and sizes the same way (``request_scan.py``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, field_validator

from kgen.backends.registry import DEFAULT_BACKEND, UnknownBackendError, backend_info
from kgen.errors import KgenUsageError

Direction = Literal["forward", "backward"]


class SpecError(KgenUsageError):
    """A request kgen cannot turn into a spec; the message is one line a user can act on."""


class KernelSpec(BaseModel):
    """What to generate: one problem, one backend, one or more hardware targets."""

    request: str
    #: catalog name, or the path of a problem file; "" when a reference problem must be written
    problem: str
    #: short human description of the operation
    operation: str
    #: a name from ``kgen.backends.registry`` (checked there, so a new backend needs no edit here)
    backend: str = DEFAULT_BACKEND
    #: canonical target names (``resolve_target(...).name``)
    targets: list[str] = Field(min_length=1)
    #: torch dtype names such as "bfloat16"; empty means the problem's own dtypes
    dtypes: list[str] = Field(default_factory=list)
    #: size-constant overrides, e.g. {"HIDDEN": 8192}
    shapes: dict[str, int] = Field(default_factory=dict)
    source: Literal["matcher", "model", "problem_file"]
    #: what was assumed or ignored, for the user to check
    notes: list[str] = Field(default_factory=list)

    @field_validator("backend")
    @classmethod
    def _known_backend(cls, value: str) -> str:
        try:
            return backend_info(value).name
        except UnknownBackendError as exc:
            raise ValueError(str(exc)) from exc

    @property
    def needs_reference_problem(self) -> bool:
        """True when the operation is not in the catalog and a problem file must be written."""
        return not self.problem

