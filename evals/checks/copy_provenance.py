"""Where each output element's value was copied from: torch copies that tile a kernel's result.

Under the ``strict`` torch-ops policy, copies and casts (``clone``, ``copy_``, ``_to_copy``,
``contiguous()``, ``expand(...).contiguous()``, slice assignment) are allowed data movement:
a kernel that writes a scratch tensor and ``out.copy_(scratch)`` computed every value. The
same ops can also do the work: a kernel computes one row and torch copies it into every
other row (``expand(...).contiguous()``, ``out[1:] = out[:1]``, ``repeat``, ``torch.cat([h,
h])``), and the kernel has computed a fraction of what the problem asks. The ghost check does
not see it (with the kernels off the copies copy poison), nor the torch-op recorder (every op
is allowed, or is one ``repeat`` among the compute ops), so this mode follows the values.

Every storage the forward allocates gets an id per element (its *own* ids). A copy op is
replayed on int64 *origin* tensors laid out like the data (the same aten op, with each data
argument replaced by its origin view, so broadcasting, indexing and concatenation follow
torch's own rules): after the call, each element of an output names the element its value was
copied from — its own id when nothing was copied into it, another element's id for a copy of
data computed in the call, :data:`EXTERNAL` for a copy of data that existed before the call
(an input, a parameter) or a constant fill. An output whose elements hold fewer distinct
computed values than computed elements is a tile: :func:`replicated_outputs` names the share
of its elements that are extra copies (``1 - 1/R`` for ``R`` copies of one row) and the ops
that wrote them.

A storage allocated with a constant (``zeros``, ``full``) counts as the call's data: a kernel
may accumulate into it unseen. What it cannot see: a kernel writes unseen (on a GPU it dispatches no aten op), so a kernel
that later overwrites an element copied into keeps the element counted as a copy. Under
``strict`` a kernel writes its outputs itself; a buffer initialised by tiling a kernel's
result and then updated by a kernel is named a tile too. Ops dispatched by Triton's CPU
interpreter (its host copies of kernel arguments) are ignored, as by the torch-op recorder.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from pydantic import BaseModel, Field
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

from kgen.evals.checks.torch_usage import dispatched_by_triton_interpreter

#: the origin of a value copied from data that existed before the call, or a constant fill
EXTERNAL = -1

#: ops that fill with a constant: what they write holds no computed data
_FILLS = frozenset({"fill_", "zero_", "fill", "zero", "masked_fill_", "masked_fill"})


class ReplicatedOutput(BaseModel):
    """An output part of which is extra copies of values computed in the call."""

    index: int
    #: share of the output's elements that repeat another element's computed value
    share: float
    #: how many elements that is, of how many
    replicas: int
    elements: int
    #: the copy ops that wrote into the output's storage (or into what was copied into it)
    ops: list[str] = Field(default_factory=list)

    def describe(self) -> str:
        ops = ", ".join(self.ops) or "copies"
        return (
            f"output {self.index}: {self.share:.0%} of its elements ({self.replicas} of {self.elements}) "
            f"are copies of other elements' values, written by {ops} from data computed in the call"
        )


def _key(t: torch.Tensor) -> int | None:
    """The storage's address; None for tensors without ordinary strided storage."""
    if t.layout != torch.strided or t.device.type == "meta" or t.is_sparse:
        return None
    return t.untyped_storage().data_ptr()


def _tensors(tree: Any) -> list[torch.Tensor]:
    from torch.utils._pytree import tree_leaves

    return [t for t in tree_leaves(tree) if isinstance(t, torch.Tensor)]


class CopyProvenance:
    """One call's origins, by storage (see the module docstring)."""

    def __init__(self) -> None:
        self._next_id = 0
        #: storage -> (base id, element size) for storages allocated during the call
        self._created: dict[int, tuple[int, int]] = {}
        #: storage -> int64 origin per storage element, made when a copy first touches it
        self._origins: dict[int, torch.Tensor] = {}
        #: storage -> the copy ops whose values it holds
        self._ops: dict[int, set[str]] = {}
        #: storages the call allocated and filled whole with pre-call data (no origin tensor kept)
        self._external: set[int] = set()
        #: storages seen through views of another element size: not followed
        self._untracked: set[int] = set()

    # ---- storages --------------------------------------------------------------------

    def created(self, t: torch.Tensor) -> None:
        """``t``'s storage was allocated by an op of the call: its elements get own ids."""
        key = _key(t)
        if key is None:
            return
        n = t.untyped_storage().nbytes() // max(1, t.element_size())
        if n == 0:
            return
        self._created[key] = (self._next_id, t.element_size())
        self._next_id += n
        self._origins.pop(key, None)
        self._ops.pop(key, None)
        self._untracked.discard(key)
        self._external.discard(key)

    def _storage_origins(self, t: torch.Tensor) -> torch.Tensor | None:
        """The origin of every element of ``t``'s storage, made on first use."""
        key = _key(t)
        if key is None or key in self._untracked:
            return None
        known = self._origins.get(key)
        if known is not None:
            return known
        n = t.untyped_storage().nbytes() // max(1, t.element_size())
        base = self._created.get(key)
        if base is not None and base[1] != t.element_size():
            self._untracked.add(key)
            return None
        if base is None or key in self._external:
            origins = torch.full((n,), EXTERNAL, dtype=torch.int64, device=t.device)
        else:
            origins = torch.arange(base[0], base[0] + n, dtype=torch.int64, device=t.device)
        self._origins[key] = origins
        return origins

    def view(self, t: torch.Tensor, write: bool = True) -> torch.Tensor | None:
        """``t``'s elements' origins, laid out as ``t`` (a view: writing it records a copy).
        Read only (``write=False``), data that existed before the call needs no origin
        tensor of its own: one broadcast :data:`EXTERNAL` stands for all of it."""
        key = _key(t)
        if not write and key is not None and key not in self._origins and (
                key not in self._created or key in self._external):
            return torch.full((), EXTERNAL, dtype=torch.int64, device=t.device).expand(t.shape)
        origins = self._storage_origins(t)
        if origins is None:
            return None
        try:
            return origins.as_strided(t.shape, t.stride(), t.storage_offset())
        except RuntimeError:  # a view reaching past the storage it claims: not followed
            return None

    def _ops_of(self, tensors: list[torch.Tensor]) -> set[str]:
        found: set[str] = set()
        for t in tensors:
            key = _key(t)
            if key is not None:
                found |= self._ops.get(key, set())
        return found

    # ---- what ops do -----------------------------------------------------------------

    def copied(self, name: str, dst: torch.Tensor, values: torch.Tensor, sources: list[torch.Tensor]) -> None:
        """``dst`` now holds the values whose origins are ``values`` (shaped like ``dst``, or
        broadcastable to it), copied by op ``name`` from ``sources``."""
        key = _key(dst)
        if (key is not None and key not in self._origins and all(st == 0 for st in values.stride())
                and int(values.reshape(-1)[:1].sum()) == EXTERNAL and dst.numel() * dst.element_size()
                == dst.untyped_storage().nbytes()):
            # a whole storage of pre-call data (x.contiguous() of an input): no origin tensor needed
            self._external.add(key)
            return
        target = self.view(dst)
        if target is None:
            return
        target.copy_(values)
        if key is not None:
            broadcast = any(s == 0 and n > 1 for t in sources for s, n in zip(t.stride(), t.shape, strict=True))
            named = f"{name} of a broadcast (stride-0) view" if broadcast else name
            self._ops.setdefault(key, set()).update({named} | self._ops_of(sources))

    def written(self, name: str, dst: torch.Tensor) -> None:
        """An op other than a copy wrote ``dst``: its elements now hold what was computed in
        place (own ids) or a constant (:data:`EXTERNAL`)."""
        key = _key(dst)
        if key is None or key not in self._origins:
            return
        target = self.view(dst)
        if target is None:
            return
        base = self._created.get(key)
        if name in _FILLS or base is None:
            target.fill_(EXTERNAL)
        else:
            own = torch.arange(base[0], base[0] + self._origins[key].numel(), dtype=torch.int64, device=dst.device)
            target.copy_(own.as_strided(dst.shape, dst.stride(), dst.storage_offset()))

    # ---- the verdict's measure ---------------------------------------------------------

    def replicated(self, index: int, out: torch.Tensor) -> ReplicatedOutput | None:
        """How much of ``out`` repeats values computed in the call (None: nothing was copied
        into it). Counted over the storage elements ``out`` covers, so an output that is an
        expanded view (stride 0) is not a tile of itself."""
        key = _key(out)
        if key is None or key not in self._origins or out.numel() == 0:
            return None
        origins = self._origins[key]
        addresses = torch.arange(origins.numel(), device=origins.device).as_strided(
            out.shape, out.stride(), out.storage_offset()).reshape(-1).unique()
        sources = origins[addresses]
        computed = sources[sources >= 0]
        replicas = int(computed.numel() - computed.unique().numel())
        return ReplicatedOutput(
            index=index, share=replicas / addresses.numel(), replicas=replicas, elements=int(addresses.numel()),
            ops=sorted(self._ops.get(key, set())),
        )


# ----------------------------------------------------------------------------------------
# The copy ops, replayed on origins
# ----------------------------------------------------------------------------------------

#: functional ops that only move data: op base name -> positions of their data arguments
#: (a list position: every tensor of that list); replayed with origins in those places
_MOVES: dict[str, tuple[int, ...]] = {
    "repeat": (0,), "cat": (0,), "stack": (0,), "hstack": (0,), "vstack": (0,),
    "index_select": (0,), "gather": (0,), "take": (0,), "index": (0,), "_unsafe_index": (0,),
    "flip": (0,), "roll": (0,), "expand_copy": (0,), "repeat_interleave": (0,),
    "index_copy": (0, 3), "slice_scatter": (0, 1), "select_scatter": (0, 1),
    "diagonal_scatter": (0, 1), "as_strided_scatter": (0, 1), "narrow_copy": (0,),
    "permute_copy": (0,), "transpose_copy": (0,), "t_copy": (0,), "view_copy": (0,),
    "unfold_copy": (0,), "squeeze_copy": (0,), "unsqueeze_copy": (0,), "alias_copy": (0,),
    "slice_copy": (0,), "select_copy": (0,), "diagonal_copy": (0,), "as_strided_copy": (0,),
}
#: the data-movement ops among the torch-op recorder's compute ops (``repeat``, ``cat`` ...)
MOVE_OPS = frozenset(_MOVES)
#: functional ops whose result holds its first argument's values element for element
_SAME_VALUES = frozenset({"clone", "_to_copy", "lift_fresh_copy", "to", "contiguous"})
#: in-place ops that copy into their first argument: base name -> positions of the source data
_COPY_INTO: dict[str, tuple[int, ...]] = {"copy_": (1,), "index_copy_": (3,), "index_put_": (2,)}


def _replace(value: Any, provenance: CopyProvenance) -> Any:
    """A data argument with its origins in place of its values (a list: each tensor)."""
    if isinstance(value, torch.Tensor):
        origin = provenance.view(value, write=False)
        if origin is None:
            raise LookupError
        return origin
    if isinstance(value, (list, tuple)):
        return type(value)(_replace(v, provenance) for v in value)
    return value


def _replayed(func: Any, args: tuple, kwargs: dict, positions: tuple[int, ...], provenance: CopyProvenance) -> Any:
    """``func`` run on the origins of its data arguments (other arguments as they are)."""
    new_args = [(_replace(a, provenance) if i in positions else a) for i, a in enumerate(args)]
    return func(*new_args, **kwargs)


def _observe(provenance: CopyProvenance, func: Any, args: tuple, kwargs: dict, out: Any,
             inputs: list[torch.Tensor]) -> None:
    """What one op did to the origins (run with every mode off: these ops are kgen's)."""
    base = func.overloadpacket.__name__
    results = _tensors(out)
    input_keys = {_key(t) for t in inputs}
    for t in results:
        if _key(t) not in input_keys:
            provenance.created(t)
    name = f"aten.{base}"
    if base in _COPY_INTO and args and isinstance(args[0], torch.Tensor):
        if base == "index_put_" and (kwargs.get("accumulate") or (len(args) > 3 and args[3])):
            provenance.written(name, args[0])
            return
        dst = provenance.view(args[0])
        if dst is None:
            return
        sources = _tensors([args[i] for i in _COPY_INTO[base] if i < len(args)])
        if base == "copy_":
            values = provenance.view(args[1], write=False) if isinstance(args[1], torch.Tensor) else None
            if values is None:
                provenance.written(name, args[0])
                return
        else:
            replayed = dst.clone()
            try:
                _replayed(func, (replayed, *args[1:]), kwargs, _COPY_INTO[base], provenance)
            except (LookupError, RuntimeError):
                provenance.written(name, args[0])
                return
            values = replayed
        provenance.copied(name, args[0], values, sources)
        return
    if len(results) == 1 and args and (base in _SAME_VALUES or base in _MOVES):
        result = results[0]
        try:
            if base in _SAME_VALUES:
                values = provenance.view(args[0], write=False) if isinstance(args[0], torch.Tensor) else None
                if values is None:
                    return
            else:
                values = _replayed(func, args, {k: v for k, v in kwargs.items() if k != "dtype"}, _MOVES[base], provenance)
        except (LookupError, RuntimeError, TypeError):
            return
        if isinstance(values, torch.Tensor) and values.shape == result.shape:
            provenance.copied(name, result, values, _tensors([args[i] for i in _MOVES.get(base, (0,)) if i < len(args)]))
        return
    for t in _written_arguments(func, args, kwargs):
        provenance.written(base, t)


def _written_arguments(func: Any, args: tuple, kwargs: dict) -> list[torch.Tensor]:
    """The tensors an op writes in place (its schema's mutable arguments, ``out=`` included)."""
    written = []
    for i, argument in enumerate(func._schema.arguments):
        if argument.alias_info is None or not argument.alias_info.is_write:
            continue
        value = args[i] if i < len(args) else kwargs.get(argument.name)
        written += _tensors(value)
    return written


@contextmanager
def trace_copies() -> Iterator[CopyProvenance]:
    """Follow copied values through every aten op dispatched on this thread in the block.

    Enter it below the torch-op recorder (before ``record_torch_ops``) so the recorder's
    check of whose op it is (Triton's interpreter or the candidate) sees no frame of ours.
    Results are unchanged: every op runs as it was called."""
    provenance = CopyProvenance()

    class _Trace(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            inputs = _tensors((args, kwargs))
            out = func(*args, **kwargs)
            if not dispatched_by_triton_interpreter(sys._getframe(1)):
                with _disable_current_modes(), torch.no_grad():
                    _observe(provenance, func, args, kwargs, out, inputs)
            return out

    with _Trace():
        yield provenance


def replicated_outputs(provenance: CopyProvenance, outputs: list[Any],
                       keep: Callable[[ReplicatedOutput], bool] = lambda r: r.replicas > 0) -> list[ReplicatedOutput]:
    """The outputs part of which repeats values computed in the call, largest share first."""
    found = []
    for i, out in enumerate(outputs):
        if isinstance(out, torch.Tensor):
            with torch.no_grad():
                measured = provenance.replicated(i, out)
            if measured is not None and keep(measured):
                found.append(measured)
    return sorted(found, key=lambda r: -r.share)
