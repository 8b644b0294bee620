"""Backends by name: ``get_backend("triton")``."""

from __future__ import annotations

from collections.abc import Callable

from kgen.backends.base import Backend


class UnknownBackendError(LookupError):
    """A backend name kgen does not know."""


def _triton() -> Backend:
    from kgen.backends.triton import TritonBackend

    return TritonBackend()


_FACTORIES: dict[str, Callable[[], Backend]] = {
    "triton": _triton,
}


def known_backends() -> list[str]:
    return sorted(_FACTORIES)


def get_backend(name: str) -> Backend:
    """A fresh backend instance; raises UnknownBackendError listing the known backends."""
    key = name.strip().lower() if isinstance(name, str) else name
    factory = _FACTORIES.get(key)
    if factory is None:
        raise UnknownBackendError(f"unknown backend {name!r}; known backends: {', '.join(known_backends())}")
    return factory()
