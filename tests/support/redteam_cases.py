"""The red-team suite's cases: planted-bad candidates and correct controls.

A fixture declares what it is with two module-level names the verifier never
reads: ``KGEN_REDTEAM_PROBLEM`` (a catalog name, or a problem file in
tests/fixtures/problems) and ``KGEN_REDTEAM_EXPECT`` (a RejectionClass value,
or "passed" for a control), the verdict on a GPU. A fixture whose CPU verdict differs
(a race the interpreter's one-program-at-a-time order never shows, a cheat only the
timing stage sees) also declares ``KGEN_REDTEAM_CPU_EXPECT``. Every shipped seed kernel
is a control too.
Shared by tests/evals/test_redteam.py and scripts/verification_matrix.py.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"


@dataclass(frozen=True)
class Case:
    candidate: Path
    problem: str
    expect: str
    #: the CPU's verdict where it differs from ``expect`` (``KGEN_REDTEAM_CPU_EXPECT``)
    cpu_expect: str | None = None

    @property
    def id(self) -> str:
        return self.candidate.stem

    def expect_on(self, device: str) -> str:
        """The expected verdict on ``device`` ("cpu" or "cuda")."""
        return self.cpu_expect if device == "cpu" and self.cpu_expect else self.expect


def _declared(path: Path) -> dict[str, str]:
    found: dict[str, str] = {}
    try:
        tree = ast.parse(path.read_text())
    except SyntaxError:  # the bad-input fixtures include a syntax error on purpose
        return found
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name in ("KGEN_REDTEAM_PROBLEM", "KGEN_REDTEAM_EXPECT", "KGEN_REDTEAM_CPU_EXPECT"):
                found[name] = ast.literal_eval(node.value)
    return found


def _problem(name: str) -> str:
    local = FIXTURES / "problems" / f"{name}.py"
    return str(local) if local.exists() else name


def redteam_cases() -> list[Case]:
    cases = []
    for path in sorted((FIXTURES / "candidates").glob("*.py")):
        declared = _declared(path)
        if "KGEN_REDTEAM_EXPECT" in declared:
            cases.append(Case(path, _problem(declared["KGEN_REDTEAM_PROBLEM"]), declared["KGEN_REDTEAM_EXPECT"],
                              declared.get("KGEN_REDTEAM_CPU_EXPECT")))
    return cases


def seed_kernel_cases() -> list[Case]:
    seeds = sorted((ROOT / "knowledge_base" / "seed_kernels" / "triton").glob("*.py"))
    return [Case(p, p.stem, "passed") for p in seeds]


def fixture_controls(device: str = "cpu") -> list[Case]:
    return [c for c in redteam_cases() if c.expect_on(device) == "passed"]


def control_cases() -> list[Case]:
    return seed_kernel_cases() + fixture_controls()


def bad_cases(device: str = "cpu") -> list[Case]:
    return [c for c in redteam_cases() if c.expect_on(device) != "passed"]
