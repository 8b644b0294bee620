"""Verifier working directories, named after the kgen process that made them.

A kgen killed outright (SIGKILL: no ``finally``, no ``atexit``) leaves its verifiers' boxes in
the temporary folder; its verifiers end by themselves (``lifecycle.py``), the folders
do not. Each folder's name carries its owner's pid and start time, so the next kgen removes
those whose owner is gone, and never one of a kgen still running.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import threading
import time
from pathlib import Path

from kgen.evals.sandbox.lifecycle import is_running, start_ticks

PREFIX = "kgen-eval-"
#: A folder younger than this is left alone whatever its name says (clock or pid oddities).
MIN_AGE_S = 60.0
_OWNED = re.compile(rf"^{re.escape(PREFIX)}(\d+)-(\d+)-")
_swept = threading.Event()


def new_workdir() -> Path:
    """A fresh folder for one verifier, named after this process (pid and start time)."""
    sweep_orphans_once()
    return Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-{start_ticks(os.getpid()) or 0}-"))


def sweep_orphans(root: Path | None = None, min_age_s: float = MIN_AGE_S) -> list[Path]:
    """Remove the verifier folders of kgen processes that are gone; the folders removed."""
    root = Path(root or tempfile.gettempdir())
    removed = []
    for folder in root.glob(f"{PREFIX}*"):
        match = _OWNED.match(folder.name)
        if match is None or not folder.is_dir():
            continue
        pid, started = int(match.group(1)), int(match.group(2)) or None
        try:
            age = time.time() - folder.stat().st_mtime
        except OSError:
            continue
        if age < min_age_s or is_running(pid, started):
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed


def sweep_orphans_once() -> None:
    """The sweep, once per process (the first verifier a kgen starts pays a directory listing)."""
    if not _swept.is_set():
        _swept.set()
        sweep_orphans()
