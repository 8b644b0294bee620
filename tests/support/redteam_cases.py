"""The red-team suite's cases: planted-bad candidates and correct controls, for every backend.

A fixture declares what it is with module-level names the verifier never reads:
``KGEN_REDTEAM_PROBLEM`` (a catalog name, a problem file in tests/fixtures/problems, or a
path under tests/fixtures such as ``kernelbench/level1/29_Softplus``) and
``KGEN_REDTEAM_EXPECT`` (a RejectionClass value, or "passed" for a control): what a GPU
says. ``KGEN_REDTEAM_CPU_EXPECT`` (optional) is what the CPU says where that differs. It
defaults to the GPU's word for a backend whose kernels run on the CPU (Triton, through its
interpreter), and to "compiled, not run" for one whose kernels cannot (CuTe DSL): on the
CPU such a candidate is judged only by what needs no kernel to run (the static rules, its
forward's watched call with the launches switched off, the compile), so a fixture names
the class there only when those judge it. Either word may be several, joined by ``|``, where
the fault shows in more than one check and which one sees it first depends on the inputs drawn
(``Case.accepts``).

The backend is the fixture's folder: ``tests/fixtures/candidates/*.py`` are Triton,
``tests/fixtures/candidates/cute/*.py`` CuTe DSL. Every shipped seed kernel is a control
of its backend too. Shared by tests/evals/test_redteam.py and scripts/verification_matrix.py.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from kgen.backends.registry import backend_info

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
CANDIDATES = FIXTURES / "candidates"
#: the folder of each backend's fixtures
BACKEND_FOLDERS = {"triton": CANDIDATES, "cute": CANDIDATES / "cute"}
BACKENDS = tuple(BACKEND_FOLDERS)
#: ``EvalResult.outcome`` of a candidate compiled on the CPU and not run (no verdict)
NOT_RUN = "compiled, not run"
_DECLARED = ("KGEN_REDTEAM_PROBLEM", "KGEN_REDTEAM_EXPECT", "KGEN_REDTEAM_CPU_EXPECT")


@dataclass(frozen=True)
class Case:
    candidate: Path
    problem: str
    #: what a GPU says: a RejectionClass value or "passed"
    expect: str
    backend: str = "triton"
    #: what the CPU says, where it differs from ``expect``
    cpu_expect: str | None = None

    @property
    def id(self) -> str:
        return self.candidate.stem

    @property
    def is_control(self) -> bool:
        return self.expect == "passed"

    def accepts(self, device: str, outcome: str) -> bool:
        """Whether ``outcome`` is one the case may have on ``device`` (``expect_on``'s words)."""
        return outcome in self.expect_on(device).split("|")

    def expect_on(self, device: str) -> str:
        """The outcome the case must have on ``device`` ("cpu" or "cuda")."""
        if device != "cpu":
            return self.expect
        if self.cpu_expect is not None:
            return self.cpu_expect
        return self.expect if backend_info(self.backend).runs_on_cpu else NOT_RUN

    def judged_on_cpu(self) -> bool:
        """Whether the CPU reaches a verdict on it (not "compiled, not run")."""
        return self.expect_on("cpu") != NOT_RUN


def _declared(path: Path) -> dict[str, str]:
    found: dict[str, str] = {}
    try:
        tree = ast.parse(path.read_text())
    except SyntaxError:  # the bad-input fixtures include a syntax error on purpose
        return found
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name in _DECLARED:
                found[name] = ast.literal_eval(node.value)
    return found


def _problem(name: str) -> str:
    local = FIXTURES / "problems" / f"{name}.py"
    if local.exists():
        return str(local)
    if "/" in name and (FIXTURES / f"{name}.py").exists():
        return str(FIXTURES / f"{name}.py")
    return name


def _folder_cases(backend: str) -> list[Case]:
    cases = []
    for path in sorted(BACKEND_FOLDERS[backend].glob("*.py")):
        declared = _declared(path)
        if "KGEN_REDTEAM_EXPECT" in declared:
            cases.append(Case(path, _problem(declared["KGEN_REDTEAM_PROBLEM"]), declared["KGEN_REDTEAM_EXPECT"],
                              backend, declared.get("KGEN_REDTEAM_CPU_EXPECT")))
    return cases


def redteam_cases(backend: str = "triton") -> list[Case]:
    """The declared fixtures of ``backend`` ("all": every backend's)."""
    names = BACKENDS if backend == "all" else (backend,)
    return [case for name in names for case in _folder_cases(name)]


def seed_kernel_cases(backend: str = "triton") -> list[Case]:
    names = BACKENDS if backend == "all" else (backend,)
    return [
        Case(p, p.stem, "passed", name)
        for name in names
        for p in sorted((ROOT / "knowledge_base" / "seed_kernels" / name).glob("*.py"))
    ]


def fixture_controls(backend: str = "triton") -> list[Case]:
    return [c for c in redteam_cases(backend) if c.is_control]


def control_cases(backend: str = "triton") -> list[Case]:
    return seed_kernel_cases(backend) + fixture_controls(backend)


def bad_cases(backend: str = "triton") -> list[Case]:
    return [c for c in redteam_cases(backend) if not c.is_control]
