"""The rooms of the house import downhill only (docs/architecture.md).

Read from the source, not by importing it: every ``import`` and ``from ... import`` of a kgen
module, at module level or inside a function (a lazy import is still a dependency), is an
arrow from the importing module to the imported one.

A *room* is a subpackage (``kgen.evals.verifier``, ``kgen.agent.llm``, ``kgen.cli``), or a
module that stands directly in a package that also has subpackages (``kgen.evals.harness``,
``kgen.agent.run_directory``, ``kgen.errors``): those are rooms of one module. Inside a room
modules may lean on each other; between rooms the arrows must never close a circle, and
between the top-level folders they must follow the order the design gives.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from functools import cache
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]

#: The top-level folders, uphill first: a module may import its own folder and those after it.
ORDER = (
    "kgen",  # the namespace's front door: kgen.generate / kgen.evaluate, resolved lazily
    "kgen.cli",
    "kgen.api",
    "kgen.train_check",  # `kgen train-check`: a Llama trained stock and with kernels (files, exported ops) swapped in
    "kgen.export",  # `kgen export`: reads runs (kgen.agent) and problems, writes packages
    "kgen.agent",
    "kgen.knowledge_base",
    "kgen.evals",
    "kgen.core",
    "kgen.backends",
    "kgen.prompts",
    "kgen.errors",
)
#: Data folders inside packages: problem files, seed kernels, notes. Not kgen's own code.
DATA = ("problems", "seed_kernels", "seed_kernels_unverified", "guidance")


@cache
def modules() -> dict[str, Path]:
    """Every product module by its dotted name, found through pyproject's package map."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    package_dir: dict[str, str] = config["package-dir"]
    found: dict[str, Path] = {}
    for package in config["packages"]:
        top = max((p for p in package_dir if package == p or package.startswith(p + ".")), key=len)
        folder = ROOT / package_dir[top] / Path(*package[len(top):].strip(".").split(".") if package != top else ())
        for path in folder.glob("*.py"):
            name = package if path.stem == "__init__" else f"{package}.{path.stem}"
            found[name] = path
    return found


def _resolve(name: str) -> str | None:
    """The kgen module an import names (``kgen.evals.verdict.Verdict`` -> ``kgen.evals.verdict``)."""
    while name and name not in modules():
        name = name.rpartition(".")[0]
    return name or None


@cache
def arrows() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for name, path in modules().items():
        is_package = path.stem == "__init__"
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                named = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = name.split(".") if is_package else name.split(".")[:-1]
                    parts = parts[: len(parts) - node.level + 1]
                    base = ".".join(parts + ([node.module] if node.module else []))
                named = [base] + [f"{base}.{alias.name}" for alias in node.names]
            else:
                continue
            for imported in named:
                if imported == "kgen" or imported.startswith("kgen."):
                    target = _resolve(imported)
                    if target is not None and target != name:
                        targets.add(target)
        graph[name] = targets
    return graph


@cache
def packages_with_subpackages() -> frozenset[str]:
    names = set(modules())
    return frozenset(p for p in names if any(q.startswith(p + ".") and modules()[q].stem == "__init__"
                                              for q in names))


def room(name: str) -> str:
    """The subpackage a module belongs to, or the module itself beside subpackages."""
    if modules()[name].stem == "__init__":
        return name
    package = name.rpartition(".")[0]
    return name if package in packages_with_subpackages() else package


def top_level(name: str) -> str:
    """The top-level folder of ``ORDER`` a module is in."""
    return max((top for top in ORDER if name == top or name.startswith(top + ".")), key=len)


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One circle of arrows in ``graph``, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_module_map_reads_the_whole_product():
    names = modules()
    assert len(names) > 100
    for expected in ("kgen.evals.harness", "kgen.evals.verifier.child", "kgen.agent.search.graph",
                     "kgen.cli.main", "kgen.backends.registry", "kgen.knowledge_base.store"):
        assert expected in names
    assert not any(set(path.relative_to(ROOT).parts) & set(DATA) for path in names.values())
    # the reader sees lazy imports too: the child's stages are imported inside functions
    assert "kgen.evals.verifier.child" in {m for m, targets in arrows().items() if targets}


def test_no_circle_between_rooms():
    rooms: dict[str, set[str]] = {}
    for name, targets in arrows().items():
        rooms.setdefault(room(name), set()).update(room(t) for t in targets if room(t) != room(name))
    circle = _cycle(rooms)
    assert circle is None, "rooms import each other in a circle: " + " -> ".join(circle)


def test_top_level_folders_import_downhill():
    rank = {top: i for i, top in enumerate(ORDER)}
    uphill = sorted(
        f"{name} -> {target}"
        for name, targets in arrows().items()
        for target in targets
        if rank[top_level(target)] < rank[top_level(name)]
    )
    assert not uphill, "imports that run uphill (ORDER in this file, docs/architecture.md):\n" + "\n".join(uphill)


def test_the_circle_finder_finds_circles():
    """The two checks above are only as good as this: it must see a circle when there is one."""
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


HEAVY = ("torch", "triton", "cutlass", "chromadb", "langgraph", "openai", "anthropic")


def _heavy_after(code: str) -> tuple[str, list[str]]:
    """What ``code`` printed, and which heavy libraries it left imported, in a fresh process."""
    probe = code + f"\nimport sys\nprint('HEAVY', ','.join(m for m in {HEAVY!r} if m in sys.modules))\n"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    heavy = next(line for line in done.stdout.splitlines() if line.startswith("HEAVY"))
    return done.stdout, [m for m in heavy.removeprefix("HEAVY").strip().split(",") if m]


def test_help_imports_neither_torch_nor_triton():
    """`kgen --help` is the first thing a person runs; it must not pay for torch or triton."""
    out, heavy = _heavy_after(
        "import sys\n"
        "from kgen.cli.main import main\n"
        "sys.argv = ['kgen', '--help']\n"
        "try:\n"
        "    main()\n"
        "except SystemExit:\n"
        "    pass\n"
    )
    assert "Usage" in out
    assert heavy == [], f"`kgen --help` imported {heavy}"


def test_the_verifier_child_imports_no_toolchain_before_its_backend_prepares_the_process():
    """Triton reads TRITON_INTERPRET when it is imported: the child's own imports (its stages
    included) must leave torch and triton to ``open_context``, after ``prepare_process``."""
    _, heavy = _heavy_after("import kgen.evals.verifier.child\n")
    assert heavy == [], f"importing the verifier child imported {heavy}"
