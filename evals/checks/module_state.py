"""The weights a candidate is judged with, and the state it may not carry across calls.

**Weights.** Reference and candidate used to be built from the same seed, so a
candidate that copied, transposed or pre-scaled a weight once in ``__init__``
matched the reference for ever after. Instead the reference's parameters and
floating buffers are re-drawn after construction (:func:`rerandomise`: same
mean and spread as the module's own init, a constant tensor such as a norm
weight of ones gets a spread of its own, a tensor that was never negative stays
non-negative), loaded into the candidate (:func:`transfer_weights`: by name
when both modules name their state alike, else by shape in declaration order),
and re-drawn again between calls: a stale copy no longer matches.

**State.** :func:`state_fingerprint` records every tensor a module holds (its
parameters, buffers and tensor attributes, in every submodule, plus tensors in
lists, tuples and dicts of attributes) and every tensor in the candidate's own
module globals; :func:`changed_state` names the ones a call changed. A forward
that keeps results, keys or flags in such tensors between calls is caching,
whatever the Python source looks like (a kernel can write a buffer without a
single Python-level store).
"""

from __future__ import annotations

import types
from collections.abc import Iterator
from typing import Any

import torch
from pydantic import BaseModel

from kgen.evals.checks.candidate_call import same_values


class WeightTransfer(BaseModel):
    """How the reference's state reached the candidate (evidence for a verdict)."""

    how: str  # "by name", "by shape and order", "none"
    tensors: int = 0
    detail: str = ""

    @property
    def transferred(self) -> bool:
        return self.how != "none"


def _floating_state(module: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    for name, tensor in module.state_dict(keep_vars=True).items():
        if isinstance(tensor, torch.Tensor) and tensor.is_floating_point() and tensor.numel():
            yield name, tensor


def rerandomise(module: torch.nn.Module, generator: torch.Generator) -> None:
    """Re-draw every floating parameter and buffer of ``module`` in place (see the module docstring)."""
    with torch.no_grad():
        for _, tensor in _floating_state(module):
            values = tensor.detach().to(torch.float64)
            finite = values[torch.isfinite(values)]
            if finite.numel() == 0:
                continue
            mean = finite.mean().item()
            std = finite.std(unbiased=False).item() if finite.numel() > 1 else 0.0
            if std == 0.0:
                std = 0.25 * max(abs(mean), 1.0)  # ones (norm weights), zeros (biases): make them vary
            noise = torch.randn(tensor.shape, generator=generator, dtype=torch.float64)
            new = mean + std * noise
            if bool((finite >= 0).all()):
                new = new.abs()  # running variances, scales: keep them in their domain
            tensor.copy_(new.to(tensor.device, tensor.dtype))


def transfer_weights(reference: torch.nn.Module, candidate: Any) -> WeightTransfer:
    """Copy the reference's state into the candidate: by name, else by shape and order."""
    if not isinstance(candidate, torch.nn.Module):
        return WeightTransfer(how="none", detail="the candidate is not an nn.Module")
    ref_state = reference.state_dict()
    cand_state = candidate.state_dict(keep_vars=True)
    if not ref_state:
        return WeightTransfer(how="none", detail="the reference has no parameters or buffers")
    with torch.no_grad():
        # By name: every reference entry has a namesake of its shape (the candidate may hold more,
        # such as a folded copy of a weight, which then goes stale and shows).
        if all(k in cand_state and cand_state[k].shape == v.shape for k, v in ref_state.items()):
            for key, value in ref_state.items():
                cand_state[key].copy_(value.to(cand_state[key].device, cand_state[key].dtype))
            extra = len(cand_state) - len(ref_state)
            return WeightTransfer(
                how="by name", tensors=len(ref_state), detail=f"{extra} candidate entries kept their own values" if extra else ""
            )
        # By shape in declaration order, skipping candidate entries no reference entry needs.
        pairs: list[tuple[str, str]] = []
        rest = list(cand_state.items())
        for ref_key, value in ref_state.items():
            index = next((i for i, (_, t) in enumerate(rest) if t.shape == value.shape), None)
            if index is None:
                pairs = []
                break
            pairs.append((ref_key, rest[index][0]))
            rest = rest[index + 1:]
        if pairs:
            for ref_key, cand_key in pairs:
                target = cand_state[cand_key]
                target.copy_(ref_state[ref_key].to(target.device, target.dtype))
            shown = ", ".join(f"{r}->{c}" for r, c in pairs)
            return WeightTransfer(how="by shape and order", tensors=len(pairs), detail=shown[:300])
    return WeightTransfer(
        how="none",
        detail=f"no match by name, nor by shape in registration order: reference {_shapes(ref_state)}; "
        f"candidate {_shapes(cand_state) or 'nothing'}",
    )


def _shapes(state: dict[str, torch.Tensor], limit: int = 6) -> str:
    shown = ", ".join(f"{k} {tuple(v.shape)}" for k, v in list(state.items())[:limit])
    return shown + (f" and {len(state) - limit} more" if len(state) > limit else "")


# ----------------------------------------------------------------------------------------
# State fingerprints
# ----------------------------------------------------------------------------------------


def _tensors_in(value: Any, prefix: str, depth: int = 0) -> Iterator[tuple[str, torch.Tensor]]:
    if isinstance(value, torch.Tensor):
        yield prefix, value
    elif depth < 2 and isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _tensors_in(item, f"{prefix}[{i}]", depth + 1)
    elif depth < 2 and isinstance(value, dict):
        for key, item in value.items():
            yield from _tensors_in(item, f"{prefix}[{key!r}]", depth + 1)


def held_tensors(module: Any, globals_of: types.ModuleType | None = None) -> dict[str, torch.Tensor]:
    """Every tensor the module object (and its submodules) holds, and, in the candidate's own
    file: its tensor globals, class attributes, functions' default arguments and closures."""
    found: dict[str, torch.Tensor] = {}
    if isinstance(module, torch.nn.Module):
        for sub_name, sub in module.named_modules():
            where = f"{sub_name}." if sub_name else ""
            for key, value in vars(sub).items():
                if key in ("_parameters", "_buffers"):
                    for name, tensor in value.items():
                        if isinstance(tensor, torch.Tensor):
                            found[f"{where}{name}"] = tensor
                elif not key.startswith("_modules"):
                    for name, tensor in _tensors_in(value, f"{where}{key}"):
                        found[name] = tensor
    if globals_of is not None:
        own = getattr(globals_of, "__name__", None)
        for key, value in vars(globals_of).items():
            if key.startswith("__"):
                continue
            for name, tensor in _tensors_in(value, f"module global {key}"):
                found[name] = tensor
            if isinstance(value, type) and value.__module__ == own:
                for attr, item in vars(value).items():
                    for name, tensor in _tensors_in(item, f"class attribute {key}.{attr}"):
                        found[name] = tensor
                    for name, tensor in _defaults_of(item, f"{key}.{attr}"):
                        found[name] = tensor
            for name, tensor in _defaults_of(value, key):
                found[name] = tensor
    return found


def _defaults_of(fn: Any, where: str) -> Iterator[tuple[str, torch.Tensor]]:
    """Tensors in a function's default arguments and closure cells (``def f(x, _cache={})``
    and a factory's captured buffer both hold state)."""
    fn = getattr(fn, "__func__", fn)
    if not isinstance(fn, types.FunctionType):
        return
    for i, value in enumerate(fn.__defaults__ or ()):
        yield from _tensors_in(value, f"default argument {i} of {where}")
    for key, value in (fn.__kwdefaults__ or {}).items():
        yield from _tensors_in(value, f"default argument {key} of {where}")
    for i, cell in enumerate(fn.__closure__ or ()):
        try:
            contents = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        yield from _tensors_in(contents, f"closure cell {i} of {where}")


def state_fingerprint(module: Any, globals_of: types.ModuleType | None = None) -> dict[str, torch.Tensor]:
    """Copies of every held tensor (exact: compared bit for bit afterwards)."""
    with torch.no_grad():
        return {
            name: tensor.detach().clone()
            for name, tensor in held_tensors(module, globals_of).items()
            if tensor.layout == torch.strided and tensor.device.type != "meta"
        }


def changed_state(before: dict[str, torch.Tensor], module: Any, globals_of: types.ModuleType | None = None) -> list[str]:
    """Names of held tensors that changed (or appeared, or were replaced) since ``before``."""

    now = held_tensors(module, globals_of)
    changed = [name for name in now if name not in before]
    for name, old in before.items():
        tensor = now.get(name)
        if tensor is None:
            changed.append(name)
        elif tensor.layout == torch.strided and not same_values(old, tensor.detach()):
            changed.append(name)
    return changed
