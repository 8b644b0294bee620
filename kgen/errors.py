"""kgen's errors: one root, and one error for bad input.

Every error kgen raises on purpose is a :class:`KgenError` whose ``message`` is the one line a
person reads, so a caller catches kgen's errors in one clause and shows them one way.
:class:`KgenUsageError` is the one usage error: the input of the person or program calling kgen
is wrong (an unknown name, a bad value, a missing file, a key or a server that cannot be used).
The command line turns it into one ``error:`` line and exit code 2; the Python API raises it.
Each module declares its own errors under these two and keeps the stdlib base its callers
catch: ``class UnknownTargetError(KgenUsageError, LookupError)``.

The verifier child's signals (``Rejected``, ``Inconclusive``, ``SkipTrial``, a failed
comparison, a candidate failing in training) are no errors of kgen: they are how a check hands
its verdict to the child's loop, and never reach a caller. They stay outside this root so that
no ``except KgenError`` can swallow a verdict.

This module imports nothing of kgen: it is the bottom of the house, and every folder, the
backends included, may import it.
"""

from __future__ import annotations


class KgenError(Exception):
    """An error kgen raises on purpose; ``message`` says what went wrong in one line."""

    def __init__(self, message: str, *args: object) -> None:
        super().__init__(message, *args)
        self.message = message


class KgenUsageError(KgenError, ValueError):
    """Bad input from the person or program calling kgen: exit code 2.

    An unknown problem, target, backend, policy or run; an empty request; a missing or malformed
    file; a bad option, model string, key or server. kgen checks what it is given before it
    starts, so mostly nothing ran; a run that meets such a cause later (a server that stops
    answering) stops with it and says what it kept.
    """
