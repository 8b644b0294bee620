"""Harness integrity: kgen's own functions and the timing primitives, unchanged by the candidate.

The candidate runs in the verifier's own process, beside the code that judges
it. The static rules forbid the routes they can read (stores into imported
modules, ``setattr``, ``sys``, ``exec``, dunders ...), but Python has more
routes than any reader of source can follow: a local alias, a standard
library that imports by dotted name, text evaluated by a library. Whatever
the route, tampering must end in a changed object that kgen later calls. So
before the candidate is imported, :func:`take_snapshot` holds on to every
such object, and :func:`tampered` names what differs afterwards:

* every function, class and module bound in kgen's own loaded modules, and
  the methods of kgen's classes (a ``sys.modules`` patch of
  ``kgen.evals.checks.compare.compare_outputs`` rebinds a module attribute);
* for Python functions, the code, defaults and keyword defaults too (a
  ``fn.__code__ = ...`` swap keeps the function object);
* the timing and synchronisation primitives (:data:`TIMER_NAMES`: CUDA
  events, ``torch.cuda.synchronize``, the clocks, Triton's ``do_bench``);
* the callables of the torch namespaces the checks compute with (``torch``,
  ``torch.Tensor``, ``torch.nn.functional``, ``torch.nn.Module``,
  ``torch.cuda``).

Names that appear later (a module imported lazily) are not judged; a name
that disappears is. Replacements a library makes of its own names (torch
wraps ``torch.manual_seed`` once its compiler is imported) are recognised by
where the new code lives, down its ``__wrapped__`` chain: inside the package
that owns the name (a candidate cannot put code there without the code
builders the static rules forbid). The one replacement kgen makes itself while
a candidate runs, the shifted clock of :mod:`kgen.evals.checks.clock`, is
recognised the same way. Comparing is a few thousand identity tests: cheap enough
to run after every watched call.
"""

from __future__ import annotations

import importlib
import sys
import types
from dataclasses import dataclass, field
from typing import Any

from kgen.evals.checks import clock as _clock

#: dotted names of the primitives timing and synchronisation rely on (absent ones are skipped)
TIMER_NAMES: tuple[str, ...] = (
    "torch.cuda.Event",
    "torch.cuda.Event.record",
    "torch.cuda.Event.elapsed_time",
    "torch.cuda.Event.synchronize",
    "torch.cuda.Event.query",
    "torch.cuda.synchronize",
    "torch.cuda.current_stream",
    "torch.cuda.Stream",
    "torch.cuda.Stream.synchronize",
    "torch.cuda.Stream.wait_event",
    "torch.cuda.Stream.record_event",
    "time.perf_counter",
    "time.perf_counter_ns",
    "time.monotonic",
    "time.monotonic_ns",
    "time.time",
    "triton.testing.do_bench",
    "triton.testing.do_bench_cudagraph",
)
#: torch namespaces whose callables the checks (comparison, fingerprints, poison) call
TORCH_NAMESPACES: tuple[str, ...] = (
    "torch", "torch.Tensor", "torch.nn.functional", "torch.nn.Module", "torch.cuda",
)
#: where kgen's own clock shift is defined: its replacements of the time module are kgen's
_CLOCK_FILE = _clock.__file__


_MISSING = object()


@dataclass(frozen=True)
class _Entry:
    """One binding kgen relies on: ``owner``'s ``attr`` (a module's, a class's through its
    MRO, or ``sys.modules``'s), with the object and code it held."""

    label: str
    owner: Any
    attr: str
    held: tuple[Any, ...]


@dataclass(frozen=True)
class HarnessSnapshot:
    """Everything :func:`tampered` compares, held by reference."""

    entries: list[_Entry] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.entries)


def _function_of(obj: Any) -> Any:
    """The Python function behind a method wrapper (staticmethod, classmethod, property)."""
    if isinstance(obj, (staticmethod, classmethod)):
        return obj.__func__
    if isinstance(obj, property):
        return obj.fget
    return obj


def _held(obj: Any) -> tuple[Any, ...]:
    """The object, and for a Python function the parts a code swap would change."""
    fn = _function_of(obj)
    if isinstance(fn, types.FunctionType):
        return (obj, fn.__code__, fn.__defaults__, fn.__kwdefaults__)
    return (obj,)


def _judged(value: Any) -> bool:
    """Functions, classes, method wrappers and modules: what is called or looked up, not data
    (caches and counters a module keeps may be rebound; callable instances are data too)."""
    return isinstance(value, (types.FunctionType, types.BuiltinFunctionType, types.MethodDescriptorType,
                              types.WrapperDescriptorType, types.ModuleType, type, staticmethod,
                              classmethod, property))


def _bound(owner: Any, attr: str) -> Any:
    """What ``owner.attr`` resolves to without running descriptors: a dict's key, a module's
    own binding, or the first class in a class's MRO that defines it."""
    if isinstance(owner, dict):
        return owner.get(attr, _MISSING)
    if isinstance(owner, type):
        for klass in owner.__mro__:
            if attr in vars(klass):
                return vars(klass)[attr]
        return _MISSING
    return vars(owner).get(attr, _MISSING)


def _lookup(dotted: str) -> Any:
    """The object a dotted name points at now (None where a part is missing)."""
    head, *rest = dotted.split(".")
    obj: Any = sys.modules.get(head)
    for part in rest:
        if obj is None:
            return None
        obj = getattr(obj, part, None)
    return obj


def _entries_of(label: str, owner: Any, modules: bool = True) -> list[_Entry]:
    """Every judged binding of a module, or of a class and its bases (``object`` aside), under
    ``label.name`` (``modules=False``: submodules left out, for namespaces that import them lazily)."""
    if isinstance(owner, type):
        names = {name for klass in owner.__mro__[:-1] for name in vars(klass)}
    else:
        names = set(vars(owner))
    found = []
    for name in sorted(names):
        value = _bound(owner, name)
        if _judged(value) and (modules or not isinstance(value, types.ModuleType)):
            found.append(_Entry(f"{label}.{name}", owner, name, _held(value)))
    return found


def _kgen_entries() -> list[_Entry]:
    """kgen's loaded modules: each one's place in ``sys.modules``, its bindings, and the
    methods of the classes it defines."""
    found: list[_Entry] = []
    for name, module in sorted(sys.modules.items()):
        if not (name == "kgen" or name.startswith("kgen.")) or not isinstance(module, types.ModuleType):
            continue
        found.append(_Entry(f"sys.modules[{name!r}]", sys.modules, name, (module,)))
        found += _entries_of(name, module)
        for attr, value in list(vars(module).items()):
            if isinstance(value, type) and value.__module__ == name:
                found += [e for e in _entries_of(f"{name}.{attr}", value) if e.attr in vars(value)]
    return found


def take_snapshot() -> HarnessSnapshot:
    """Hold on to everything :func:`tampered` compares: call before the candidate's code runs."""
    if "triton" in sys.modules:  # its bench helpers, loaded now so a later patch of them is seen
        importlib.import_module("triton.testing")
    entries = _kgen_entries()
    for space in TORCH_NAMESPACES:
        namespace = _lookup(space)
        if namespace is not None:
            if isinstance(namespace, types.ModuleType):
                entries.append(_Entry(f"sys.modules[{space!r}]", sys.modules, space, (namespace,)))
            entries += _entries_of(space, namespace, modules=False)
    for name in TIMER_NAMES:
        owner_name, _, attr = name.rpartition(".")
        owner = _lookup(owner_name)
        if owner is not None and _bound(owner, attr) is not _MISSING:
            entries.append(_Entry(name, owner, attr, _held(_bound(owner, attr))))
    unique = {entry.label: entry for entry in entries}  # a timer is also in its namespace
    return HarnessSnapshot(list(unique.values()))


def _package_dir(label: str) -> str | None:
    """The folder of the package that owns a label's name (``torch`` for ``torch.cuda.x``)."""
    top = label.removeprefix("sys.modules[").strip("'[]").split(".")[0]
    module = sys.modules.get(top)
    path = getattr(module, "__file__", None)
    return path.rsplit("/", 1)[0] + "/" if path and top in _SELF_REPLACING else None


#: packages that replace some of their own functions after import (torch's compiler wraps a few)
_SELF_REPLACING = frozenset({"torch", "triton", "kgen"})


def _own_replacement(label: str, now: Any) -> bool:
    """A replacement whose code, and the code of everything it wraps, lives in the package that
    owns the name, or a compiled function that package defines."""
    where = _package_dir(label)
    if where is None:
        return False
    fn, depth = _function_of(now), 0
    while fn is not None and depth < 8:
        code = getattr(fn, "__code__", None)
        if code is not None:
            if not code.co_filename.startswith(where):
                return False
        elif not (isinstance(fn, types.BuiltinFunctionType)
                  and (getattr(fn, "__module__", None) or "").split(".")[0] == label.split(".")[0]):
            return False
        fn, depth = getattr(fn, "__wrapped__", None), depth + 1
    return True


def _kgen_clock_shift(label: str, now: Any) -> bool:
    """The time module's readers replaced by kgen's own shifted-clock trial (undone after it)."""
    code = getattr(now, "__code__", None)
    return label.startswith("time.") and code is not None and code.co_filename == _CLOCK_FILE


def _describe(now: Any) -> str:
    if now is _MISSING:
        return "removed"
    fn = _function_of(now)
    where = getattr(getattr(fn, "__code__", None), "co_filename", None)
    module = getattr(fn, "__module__", None) or type(fn).__module__
    name = getattr(fn, "__qualname__", None) or type(fn).__name__
    return f"now {module}.{name}" + (f" from {where.rsplit('/', 1)[-1]}" if where else "")


def tampered(snapshot: HarnessSnapshot) -> list[str]:
    """One line per snapshot entry that is no longer what it was (empty: nothing changed)."""
    changes = []
    for entry in snapshot.entries:
        now = _bound(entry.owner, entry.attr)
        held = entry.held
        if now is held[0]:
            if len(held) == 1 or all(a is b for a, b in zip(_held(now)[1:], held[1:], strict=True)):
                continue
            changes.append(f"{entry.label}: its code or defaults were replaced")
        elif not (_kgen_clock_shift(entry.label, now) or _own_replacement(entry.label, now)):
            changes.append(f"{entry.label} was replaced ({_describe(now)})")
    return changes


def is_timer(change: str) -> bool:
    """Whether a :func:`tampered` line names a timing or synchronisation primitive."""
    name = change.split(" ", 1)[0].rstrip(":")
    return name in TIMER_NAMES or name.startswith(("torch.cuda.Event.", "triton.testing.do_bench"))
