"""Rendering the prompt templates that live as Jinja files in ``prompts/``.

Templates are text files so prompt changes are reviewable without reading
code; ``StrictUndefined`` makes a missing field an error instead of a prompt
that silently lacks the parent's measurements or the verifier's evidence.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from kgen.backends.registry import UnknownBackendError, backend_info
from kgen.prompts import PROMPTS_DIR


def backend_label(name: str) -> str:
    """How people write a backend ("CuTe DSL"), from the registry at render time; a name the
    registry no longer knows (an old knowledge-base entry) is shown as it is."""

    try:
        return backend_info(name).label
    except UnknownBackendError:
        return name


@lru_cache(maxsize=1)
def _environment():
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(PROMPTS_DIR)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    # a global, so that macros imported without context (``_sections.j2``) can label too
    env.globals["backend_label"] = backend_label
    return env


def render_template(name: str, **context: Any) -> str:
    """Render ``prompts/<name>.j2`` with ``context``; a missing variable raises."""
    return _environment().get_template(f"{name}.j2").render(**context)
