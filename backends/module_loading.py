"""Import untrusted candidate modules from files.

Candidates are imported from a real file (never from a string) because
``@triton.jit`` and CuTe DSL read a kernel's source through ``inspect``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import types
from pathlib import Path

from kgen.errors import KgenError


class CandidateLoadError(KgenError):
    """A candidate file that does not import: syntax error, import error, exception at import."""


def load_module_from_file(path: Path, prefix: str = "kgen_candidate") -> types.ModuleType:
    path = Path(path).resolve()
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:10]
    name = f"{prefix}_{digest}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise CandidateLoadError(f"cannot import {path}: not a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        sys.modules.pop(name, None)
        raise CandidateLoadError(f"syntax error in {path.name} line {exc.lineno}: {exc.msg}") from exc
    except BaseException as exc:  # noqa: BLE001 - untrusted code may raise anything at import
        sys.modules.pop(name, None)
        raise CandidateLoadError(f"{path.name} failed at import: {type(exc).__name__}: {exc}") from exc
    return module
