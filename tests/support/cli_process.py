"""A kgen command run as a user runs it, in a process of its own, read up to a moment of its
progress (to interrupt it there, as Ctrl-C would)."""

from __future__ import annotations

import subprocess
import time

import pytest


def stderr_until(proc: subprocess.Popen, marker: str, seconds: float) -> list[str]:
    """``proc``'s stderr lines up to and including the first that holds ``marker``. A process
    that ends or takes ``seconds`` without printing it is killed and the test fails, showing
    what it printed."""
    lines: list[str] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        if marker in line:
            return lines
    proc.kill()
    pytest.fail(f"the command never printed {marker!r}:\n" + "".join(lines))
