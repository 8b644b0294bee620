"""A model reads the request; its answer is checked before it is believed.

The model is asked (through a callable the caller injects) for a :class:`SpecDraft` naming a
catalog problem, the backend, targets, dtypes and sizes. A model can name a problem that does
not exist or a GPU kgen has never heard of, so nothing it says is used unchecked: its problem
must be in the catalog and agree with the request's direction (else the catalog matcher
reads the request instead, noted), its targets and backend must be known, and its sizes go
onto the problem's size constants like the matcher's. An operation the model says is not in
the catalog comes back with ``problem=""``: the caller writes a reference problem for it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, Field

from kgen.agent.llm.templates import render_template
from kgen.agent.spec.catalog_matcher import apply_shapes, catalog_entry, parse_request
from kgen.agent.spec.kernel_spec import KernelSpec, SpecError
from kgen.agent.spec.request_scan import (
    DTYPE_WORDS,
    TOKEN,
    ShapeHint,
    add_once,
    default_targets,
    request_direction,
    resolve_target_word,
    unknown_target,
)
from kgen.backends.registry import (
    DEFAULT_BACKEND,
    all_backend_info,
    backend_for_word,
    known_backends,
)
from kgen.backends.targets import all_targets
from kgen.evals.problem.catalog import catalog, normalise_name
from kgen.evals.problem.format import ProblemInfo

JsonCompleter = Callable[[str, str, type[BaseModel]], Any]


class SpecDraft(BaseModel):
    """A model's reading of a request, validated before it becomes a :class:`KernelSpec`."""

    problem: str | None = Field(
        default=None,
        description="exact catalog problem name, or null when no catalog problem is this operation",
    )
    operation: str = Field(description="one-line description of the requested operation")
    backend: str = Field(default=DEFAULT_BACKEND, description="a kernel backend name, e.g. 'triton'")
    targets: list[str] = Field(default_factory=list, description="hardware targets named, e.g. ['h100']")
    dtypes: list[str] = Field(default_factory=list, description="e.g. ['bfloat16']; empty if none named")
    shapes: dict[str, int] = Field(
        default_factory=dict, description="size constants named, e.g. {'HIDDEN': 4096}"
    )


def _draft_backend(value: str) -> str:
    name = backend_for_word(value or DEFAULT_BACKEND)
    if name is None:  # "CuTe_DSL", "cute.dsl": the separators a model may use
        name = backend_for_word(" ".join(TOKEN.findall((value or "").lower())))
    if name is None:
        name = backend_for_word(normalise_name(value or ""))
    if name is None:
        raise SpecError(f"unknown backend '{value}'; known: {', '.join(known_backends())}")
    return name


def _draft_targets(values: list[str], default_target: str | None) -> tuple[list[str], list[str]]:
    targets: list[str] = []
    for value in values:
        name = resolve_target_word(value.strip().lower()) if value.strip() else None
        if name is None:
            raise unknown_target(value)
        add_once(targets, name)
    if targets:
        return targets, []
    targets, note = default_targets(default_target)
    return targets, [note]


def _draft_dtypes(values: list[str]) -> tuple[list[str], list[str]]:
    dtypes: list[str] = []
    notes: list[str] = []
    for value in values:
        key = value.strip().lower().removeprefix("torch.")
        if key in DTYPE_WORDS:
            add_once(dtypes, DTYPE_WORDS[key])
        else:
            notes.append(f"ignored dtype '{value}' from the model: not one kgen's problems take")
    return dtypes, notes


def spec_prompt(text: str) -> tuple[str, str]:
    """(system, user) messages that ask a model for a :class:`SpecDraft`."""

    problems = [
        {"name": i.name, "kind": i.kind, "aliases": i.aliases, "description": i.description, "sizes": i.sizes}
        for i in catalog()
    ]
    targets = [{"name": t.name, "display_name": t.display_name, "aliases": list(t.aliases)} for t in all_targets()]
    backend_names = [
        {"name": b.name, "label": b.label, "aliases": [w for w in b.words if w != b.name]}
        for b in all_backend_info()
    ]
    common = {"problems": problems, "targets": targets, "backends": known_backends(),
              "backend_names": backend_names, "default_backend": DEFAULT_BACKEND, "request": text}
    return render_template("spec", part="system", **common), render_template("spec", part="user", **common)


def parse_request_with_model(
    text: str, complete_json: JsonCompleter, *, default_target: str | None = None
) -> KernelSpec:
    """A model reads the request; its answer is checked before it is believed.

    ``complete_json(system, user, SpecDraft)`` returns a :class:`SpecDraft`
    (or anything ``SpecDraft.model_validate`` accepts, or a ``(value, ...)`` tuple
    whose first item is one). A catalog name the
    catalog lacks, or one whose direction contradicts the request, falls back
    to the matcher (noted); if the matcher finds nothing either, SpecError.
    An operation the model says is not in the catalog comes back with
    ``problem=""`` so the caller writes a reference problem for it.
    """
    if not (text or "").strip():
        raise SpecError('empty request: say which kernel to write, e.g. "Triton RMSNorm backward for H100"')
    system, user = spec_prompt(text)
    raw = complete_json(system, user, SpecDraft)
    if isinstance(raw, tuple) and raw:  # (value, completions), as structured_output returns
        raw = raw[0]
    draft = SpecDraft.model_validate(raw.model_dump() if isinstance(raw, BaseModel) else raw)
    named = (draft.problem or "").strip()
    if named.lower() in ("null", "none"):
        named = ""
    info: ProblemInfo | None = None
    if named:
        info = catalog_entry(named)
        direction = request_direction(text)
        wrong = (
            f"'{named}', which is not a catalog problem" if info is None
            else f"{info.name}, a {info.kind}, for a {direction} request"
            if direction is not None and info.kind != direction else ""
        )
        if wrong:
            try:
                spec = parse_request(text, default_target=default_target)
            except SpecError as exc:
                raise SpecError(f"the model named {wrong}, and the matcher found none: {exc}") from exc
            spec.notes.insert(0, f"the model named {wrong}; the matcher chose {spec.problem}")
            return spec
    backend = _draft_backend(draft.backend)
    targets, notes = _draft_targets(draft.targets, default_target)
    dtypes, dtype_notes = _draft_dtypes(draft.dtypes)
    notes += dtype_notes
    if info is None:
        operation = draft.operation.strip()
        if not operation:
            raise SpecError("the model matched no catalog problem and described no operation")
        notes.append("not in the catalog: a reference problem must be written for it")
        shapes = dict(draft.shapes)
    else:
        operation = info.description or info.name
        hints = [ShapeHint(f"{k}={v}", k, [v]) for k, v in draft.shapes.items()]
        shapes, shape_notes = apply_shapes(hints, info)
        notes += shape_notes
    return KernelSpec(
        request=text,
        problem=info.name if info is not None else "",
        operation=operation,
        backend=backend,
        targets=targets,
        dtypes=dtypes,
        shapes=shapes,
        source="model",
        notes=notes,
    )
