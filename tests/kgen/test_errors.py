"""One error hierarchy: every error kgen raises on purpose is a ``KgenError`` with a message, and
the one usage error, ``KgenUsageError``, is the root of every "bad input" error."""

from __future__ import annotations

import ast
import pickle
from pathlib import Path

import pytest

import kgen
from kgen.errors import KgenError, KgenUsageError

ROOT = Path(__file__).resolve().parents[2]
#: the folders of the product; each installs under the ``kgen`` namespace
FOLDERS = ("agent", "backends", "evals", "kgen", "knowledge_base", "prompts")
#: data folders inside packages: problem files and seed kernels, not kgen's own code
DATA = ("problems", "seed_kernels", "seed_kernels_unverified", "fixtures")
#: the verifier child's signals and two private control-flow exceptions: how a check or a step
#: hands its outcome to the loop that called it; they never reach a caller of kgen
NOT_ERRORS = {"Rejected", "Inconclusive", "SkipTrial", "ComparisonFailure", "CandidateFailure",
              "_Fatal", "_NoSpecReply"}
#: the runtime copied into every exported package, which never imports kgen (it runs where kgen is
#: not installed): its errors cannot derive from KgenError, and a package's user catches them by
#: the package's own names
PACKAGE_RUNTIME = ROOT / "kgen" / "export" / "op_runtime.py"


def declared_exceptions() -> dict[str, list[str]]:
    """Every exception class the product declares, by name, with the names of its bases."""
    classes: dict[str, list[str]] = {}
    for folder in FOLDERS:
        for path in (ROOT / folder).rglob("*.py"):
            if set(path.relative_to(ROOT).parts) & set(DATA) or path == PACKAGE_RUNTIME:
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ClassDef):
                    bases = [ast.unparse(b).rpartition(".")[2] for b in node.bases]
                    classes[node.name] = bases
    exceptions = {"BaseException", "Exception", "ValueError", "LookupError", "RuntimeError"}
    while True:  # a class whose base is an exception is one
        more = {name for name, bases in classes.items() if set(bases) & exceptions} - exceptions
        if not more:
            return {name: classes[name] for name in exceptions if name in classes}
        exceptions |= more


def roots(name: str, classes: dict[str, list[str]]) -> set[str]:
    """The names a class derives from, through the product's own classes."""
    found: set[str] = set()
    for base in classes.get(name, []):
        found |= {base} | roots(base, classes)
    return found


def test_the_discovery_finds_the_errors():
    classes = declared_exceptions()
    assert {"KgenError", "KgenUsageError", "UnknownTargetError", "Rejected", "RunError"} <= set(classes)
    assert len(classes) >= 35


def test_every_error_kgen_declares_derives_from_kgen_error():
    classes = declared_exceptions()
    outside = sorted(name for name in classes
                     if name not in NOT_ERRORS | {"KgenError"} and "KgenError" not in roots(name, classes))
    assert not outside, f"not under kgen.errors.KgenError: {', '.join(outside)}"
    # and the signals stay outside, so no `except KgenError` can swallow a verdict
    assert not [name for name in NOT_ERRORS if "KgenError" in roots(name, classes)]


def usage_errors() -> list[type[BaseException]]:
    from kgen.agent.llm.models import ModelSpecError
    from kgen.agent.run_directory import RunInUseError, RunNotFoundError
    from kgen.agent.search.graph import RunError
    from kgen.agent.spec.kernel_spec import SpecError
    from kgen.backends.registry import BackendUnavailableError, UnknownBackendError
    from kgen.backends.targets import UnknownTargetError
    from kgen.core.settings import SettingsError
    from kgen.evals.problem.catalog import UnknownProblemError
    from kgen.evals.problem.format import ProblemError
    from kgen.evals.problem.policies import PolicyError

    return [SettingsError, UnknownTargetError, UnknownBackendError, BackendUnavailableError,
            UnknownProblemError, ProblemError, PolicyError, ModelSpecError, SpecError, RunError,
            RunNotFoundError, RunInUseError]


def test_bad_input_errors_are_usage_errors_and_keep_the_stdlib_bases_callers_catch():
    kinds = {error.__name__: error for error in usage_errors()}
    assert all(issubclass(error, KgenUsageError) for error in kinds.values())
    for name in ("UnknownTargetError", "UnknownBackendError", "UnknownProblemError", "RunNotFoundError"):
        assert issubclass(kinds[name], LookupError), name
    for name in ("BackendUnavailableError", "RunInUseError"):
        assert issubclass(kinds[name], RuntimeError), name
    # the public name, and the base its callers have always caught
    assert kgen.KgenUsageError is KgenUsageError and issubclass(KgenUsageError, ValueError)
    assert kgen.KgenError is KgenError and issubclass(KgenUsageError, KgenError)


def test_the_message_is_the_one_line_and_survives_pickling():
    from kgen.agent.llm.providers import ProviderError
    from kgen.backends.targets import UnknownTargetError, resolve_target

    with pytest.raises(UnknownTargetError) as caught:
        resolve_target("h900")
    error = caught.value
    assert error.message == str(error) and error.message.startswith("unknown hardware target 'h900'")
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is UnknownTargetError and again.message == error.message
    provider = pickle.loads(pickle.dumps(ProviderError("HTTP 500", kind="other", model="openai:x")))
    assert (provider.message, provider.kind, provider.model) == ("HTTP 500", "other", "openai:x")


def test_errors_module_imports_nothing_of_kgen():
    """The bottom of the house: backends/ import it, so it may import none of kgen."""
    tree = ast.parse((ROOT / "kgen" / "errors.py").read_text())
    imported = [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
    imported += [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    assert not [name for name in imported if name == "kgen" or name.startswith("kgen.")]



def test_no_module_digs_the_message_out_of_args():
    """``str(exc.args[0] if exc.args else exc)`` was repeated 13 times: ``exc.message`` says it."""
    idiom = "exc.args[0] if exc.args"
    users = [str(path.relative_to(ROOT)) for folder in FOLDERS for path in (ROOT / folder).rglob("*.py")
             if idiom in path.read_text()]
    assert not users
