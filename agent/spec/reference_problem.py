"""A reference problem for an operation outside the catalog, written by a model and then checked.

Everything kgen says about a kernel is relative to its reference problem, so
a model-written one is held to the catalog's standard before use: it must
load, run, be reproducible under ``torch.manual_seed``, give finite,
non-degenerate outputs and run in float64 (the verifier's reference
precision). The model's file is untrusted code, so the checks run in the
sandbox (:mod:`kgen.agent.spec.problem_self_check_child`), never in this process.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from pydantic import BaseModel, Field

from kgen.agent.llm.code_extraction import REFERENCE_PROBLEM, NoCodeError, extract_module
from kgen.agent.llm.templates import render_template
from kgen.agent.spec.kernel_spec import SpecError
from kgen.agent.spec.request_scan import request_direction
from kgen.errors import KgenError
from kgen.evals.problem.catalog import catalog, normalise_name, resolve_problem
from kgen.evals.problem.format import ProblemError, read_problem
from kgen.evals.sandbox.box import SandboxLimits, run_python_module

#: complete_text(system, user) -> the model's reply
TextCompleter = Callable[[str, str], str]

#: Address-space cap for the self-check child: CPU sizes need little, a runaway allocation dies.
_ADDRESS_SPACE_BYTES = 16 * 1024**3


class ReferenceProblemError(KgenError, RuntimeError):
    """A reference problem could not be written, or failed its self-check; ``reasons`` say why."""

    def __init__(self, message: str, reasons: Sequence[str] = ()):
        self.reasons = list(reasons) or [message]
        super().__init__(message if not reasons else f"{message}: {'; '.join(self.reasons)}")


class ProblemCheck(BaseModel):
    """The self-check's verdict on one problem file."""

    passed: bool
    reasons: list[str] = Field(default_factory=list)
    seconds: float = 0.0
    #: the size constants it ran at (the problem's CPU sizes)
    sizes: dict[str, int] = Field(default_factory=dict)


def problem_slug(operation: str, limit: int = 48) -> str:
    """A file-name-safe stem from an operation description."""
    words = re.findall(r"[a-z0-9]+", operation.lower())
    slug = ""
    for word in words:
        candidate = f"{slug}_{word}" if slug else word
        if len(candidate) > limit:
            break
        slug = candidate
    return slug or (words[0][:limit] if words else "operation")


def extract_problem_code(reply: str) -> str:
    """The problem file in a model's reply: the final complete module defining ``class Model``
    and ``get_inputs`` — the same rule that reads candidates (:mod:`kgen.agent.llm.code_extraction`),
    so a draft followed by a corrected file gives the corrected file.

    Anything else is an error, because a guessed fragment would fail later with a less useful
    message; its reason goes back to the model on the next attempt.
    """

    try:
        return extract_module(reply, REFERENCE_PROBLEM)
    except NoCodeError as exc:
        raise ReferenceProblemError(
            "the model's reply has no complete python code block defining class Model and get_inputs",
            [str(exc)],
        ) from exc


def _example(operation: str) -> Path:
    """A real catalog file as the format example, in the operation's direction."""

    try:
        direction = request_direction(operation)
    except SpecError:
        direction = None
    return resolve_problem("rmsnorm_backward" if direction == "backward" else "rmsnorm_forward").path


def reference_problem_prompt(
    operation: str, previous_code: str | None = None, previous_reasons: Sequence[str] = ()
) -> tuple[str, str]:
    """(system, user) messages asking for a problem file; with the last attempt's faults if any."""

    example = _example(operation)
    context = {
        "operation": operation,
        "example_name": example.name,
        "example_source": example.read_text(),
        "catalog_names": [info.name for info in catalog()],
        "previous_code": previous_code,
        "previous_reasons": list(previous_reasons),
    }
    return (
        render_template("reference_problem", part="system", **context),
        render_template("reference_problem", part="user", **context),
    )


def _free_path(out_dir: Path, stem: str) -> Path:
    path = out_dir / f"{stem}.py"
    n = 2
    while path.exists():
        path = out_dir / f"{stem}_{n}.py"
        n += 1
    return path


def write_reference_problem(
    operation: str,
    complete_text: TextCompleter,
    out_dir: Path,
    *,
    previous_code: str | None = None,
    previous_reasons: Sequence[str] = (),
) -> Path:
    """Ask the model for a problem file and save it as ``out_dir/problem_<slug>.py``.

    Nothing is executed here; :func:`self_check_problem` does that, boxed.
    An existing file is never overwritten (a numbered name is used instead).
    """
    system, user = reference_problem_prompt(operation, previous_code, previous_reasons)
    code = extract_problem_code(complete_text(system, user))
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = _free_path(out_dir, f"problem_{problem_slug(operation)}")
    path.write_text(code)
    return path


def _collision(path: Path) -> str | None:
    """A problem that calls itself by a catalog name would be mistaken for that problem."""

    info = read_problem(path)
    for entry in catalog():
        same_file = entry.path.resolve() == path.resolve()
        if not same_file and normalise_name(info.name) == normalise_name(entry.name):
            return f"KGEN_NAME '{info.name}' is already a catalog problem's name; choose another"
    return None


def self_check_problem(path: Path, timeout_s: float = 60) -> ProblemCheck:
    """Run a problem file in the sandbox and report every fault found (see the child module)."""

    started = time.monotonic()
    path = Path(path)

    def verdict(reasons: list[str], sizes: dict[str, int] | None = None) -> ProblemCheck:
        return ProblemCheck(
            passed=not reasons, reasons=reasons, seconds=time.monotonic() - started, sizes=sizes or {}
        )

    try:
        read_problem(path)  # parses only: a syntax error costs no child process
        collision = _collision(path)
    except ProblemError as exc:
        return verdict([str(exc)])
    if collision:
        return verdict([collision])
    box = Path(tempfile.mkdtemp(prefix="kgen-problem-check-"))
    try:
        boxed = box / path.name
        shutil.copyfile(path, boxed)
        report_path = box / "self_check_report.json"
        outcome = run_python_module(
            "kgen.agent.spec.problem_self_check_child",
            [str(boxed), str(report_path)],
            SandboxLimits(timeout_s=timeout_s, max_address_space_bytes=_ADDRESS_SPACE_BYTES),
            workdir=box,
        )
        report = _read_report(report_path)
        if outcome.timed_out:
            return verdict([f"the self-check did not finish within {timeout_s:g} s (a hang, or sizes too large for a CPU run)"])
        if report is None:
            last = (outcome.stderr_tail.strip().splitlines() or ["no output"])[-1]
            how = outcome.signal_name or f"exit status {outcome.returncode}"
            return verdict([f"the self-check process died ({how}): {last}"])
        reasons = [str(r).replace(str(boxed), str(path)) for r in report.get("reasons", [])]
        return verdict(reasons, report.get("sizes"))
    finally:
        shutil.rmtree(box, ignore_errors=True)


def _read_report(path: Path) -> dict | None:
    try:
        report = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return report if isinstance(report, dict) and report.get("finished") else None


def new_reference_problem(
    operation: str,
    complete_text: TextCompleter,
    out_dir: Path,
    *,
    attempts: int = 2,
    timeout_s: float = 60,
) -> Path:
    """Write a reference problem and self-check it; a failed check goes back to the model.

    Returns the path of a file that passed. Raises :class:`ReferenceProblemError`
    with the last attempt's reasons when none did.
    """
    previous_code: str | None = None
    reasons: list[str] = []
    for _ in range(max(1, attempts)):
        try:
            path = write_reference_problem(
                operation, complete_text, out_dir, previous_code=previous_code, previous_reasons=reasons
            )
        except ReferenceProblemError as exc:
            previous_code, reasons = None, exc.reasons
            continue
        check = self_check_problem(path, timeout_s=timeout_s)
        if check.passed:
            return path
        previous_code, reasons = path.read_text(), check.reasons
    raise ReferenceProblemError(f"no reference problem for '{operation}' passed its self-check", reasons)
