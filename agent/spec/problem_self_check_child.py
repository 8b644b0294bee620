"""Runs inside the sandbox: execute a model-written reference problem and list what is wrong.

Run as ``python -m kgen.agent.spec.problem_self_check_child PROBLEM.py REPORT.json``.
A reference problem is the ground truth every candidate kernel is judged
against, so a fault here turns the whole verifier into a liar: a reference
that draws random numbers inside ``forward`` fails every correct kernel, one
that returns zeros passes every kernel that writes nothing, one that hard-codes
bf16 makes the fp64 reference a bf16 one. Each check below names one of those
faults in words a model can act on when it is asked to fix its file.

The problem runs at its CPU sizes (``ProblemInfo.cpu_sizes``), the way the
verifier runs it without a GPU, and seeded with ``torch.manual_seed`` the way
the verifier seeds it.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

from kgen.evals.problem.format import ProblemError, load_problem, read_problem

SEED = 1234
#: Normwise relative difference between a native and an fp64 run above which
#: the two runs compute different things (bf16 rounding alone stays near 1e-2).
FP64_AGREEMENT = 0.05


class _Fatal(Exception):
    """A fault after which no further check can run."""


def _line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip().splitlines()[0]
    return text if len(text) <= 300 else text[:297] + "..."


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, (tuple, list)):
        return [leaf for item in value for leaf in _leaves(item)]
    return [value]


def _same(a: list[Any], b: list[Any]) -> bool:
    """Bit-identical, NaN equal to NaN (a NaN is reported once, as a NaN, not as noise)."""
    import torch

    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            if x.shape != y.shape or x.dtype != y.dtype:
                return False
            if x.dtype == torch.bool:
                if not torch.equal(x, y):
                    return False
            elif not bool(((x == y) | ((x != x) & (y != y))).all()):
                return False
        elif x != y:
            return False
    return True


def _clone(values: list[Any]) -> list[Any]:
    import torch

    return [v.clone() if isinstance(v, torch.Tensor) else copy.deepcopy(v) for v in values]


class _Check:
    def __init__(self, path: Path):
        import torch

        self.torch = torch
        self.reasons: list[str] = []
        try:
            info = read_problem(path)
            self.sizes = info.cpu_sizes()
            self.problem = load_problem(path, self.sizes)
        except ProblemError as exc:
            raise _Fatal(str(exc)) from exc

    def build(self, seed: int) -> tuple[Any, list[Any]]:
        """Seeded exactly as the verifier seeds: init inputs, model, inputs."""
        torch = self.torch
        torch.manual_seed(seed)
        init = self._call(self.problem.get_init_inputs, "get_init_inputs()")
        torch.manual_seed(seed)
        model = self._call(lambda: self.problem.model_class(*init), "Model(*get_init_inputs())")
        if not isinstance(model, torch.nn.Module):
            raise _Fatal(f"Model is a {type(model).__name__}, not a torch.nn.Module")
        torch.manual_seed(seed)
        inputs = self._call(self.problem.get_inputs, "get_inputs()")
        if not any(isinstance(x, torch.Tensor) for x in inputs):
            raise _Fatal("get_inputs() returned no tensors")
        return model, inputs

    def forward(self, model: Any, inputs: list[Any], what: str = "forward") -> list[Any]:
        with self.torch.no_grad():
            out = self._call(lambda: model(*inputs), what)
        leaves = _leaves(out)
        strays = [type(x).__name__ for x in leaves if not isinstance(x, self.torch.Tensor)]
        if strays:
            raise _Fatal(f"{what} returned a {strays[0]}; every output must be a torch.Tensor")
        return leaves

    @staticmethod
    def _call(fn: Any, what: str) -> Any:
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - untrusted code: any failure is a finding
            raise _Fatal(f"{what} raised {_line(exc)}") from exc

    def run(self) -> None:
        model, inputs = self.build(SEED)
        saved = _clone(inputs)
        out = self.forward(model, inputs)
        if not _same(inputs, saved):
            self.reasons.append("forward modifies its inputs in place; a reference must not")
        self.values(out, "")
        again = self.forward(model, _clone(saved))
        if not _same(out, again):
            self.reasons.append(
                "forward is not deterministic: two calls on the same inputs gave different outputs "
                "(random numbers inside forward?)"
            )
        model2, inputs2 = self.build(SEED)
        if not _same(inputs2, saved):
            self.reasons.append(
                "get_inputs() is not reproducible under torch.manual_seed: it draws from another "
                "random source (random, numpy, time); use torch's generator only"
            )
        elif not _same(self.forward(model2, inputs2), out):
            self.reasons.append(
                "two runs with the same seed gave different outputs: Model(*get_init_inputs()) is "
                "not reproducible under torch.manual_seed"
            )
        model3, inputs3 = self.build(SEED + 1)
        if _same(inputs3, saved):
            self.reasons.append("get_inputs() ignores the seed: every seed gives the same inputs")
        elif _same(self.forward(model3, inputs3), out):
            self.reasons.append("the outputs do not depend on the inputs: another seed gave identical outputs")
        self.fp64(model, saved, out)
        self.counts()

    def values(self, out: list[Any], run: str) -> None:
        torch = self.torch
        for i, x in enumerate(out):
            label = f"output {i}{run}"
            if x.numel() == 0:
                self.reasons.append(f"{label} is empty")
                continue
            if x.is_floating_point() or x.is_complex():
                if not bool(torch.isfinite(x).all()):
                    self.reasons.append(f"{label} has NaN or Inf values")
                    continue
            if x.dtype == torch.bool:
                continue
            if not bool(x.any()):
                self.reasons.append(f"{label} is all zeros, which would pass a kernel that writes nothing")
            elif x.numel() > 1 and bool((x == x.reshape(-1)[0]).all()):
                self.reasons.append(f"{label} is constant ({x.reshape(-1)[0].item()}), which hides bugs")

    def fp64(self, model: Any, inputs: list[Any], native: list[Any]) -> None:
        """kgen's verifier runs every reference in fp64: it must run and stay fp64 there."""
        torch = self.torch
        up = [x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]
        try:
            model64 = copy.deepcopy(model).double()
        except Exception as exc:  # noqa: BLE001 - untrusted code
            self.reasons.append(f"the model cannot be converted to float64: {_line(exc)}")
            return
        try:
            out64 = self.forward(model64, up, "forward in float64")
        except _Fatal as exc:
            self.reasons.append(f"{exc} (kgen's verifier runs references in float64)")
            return
        if len(out64) != len(native):
            self.reasons.append(f"forward returns {len(native)} output(s) natively, {len(out64)} in float64")
            return
        for i, (x64, x) in enumerate(zip(out64, native, strict=True)):
            if x.is_floating_point() and x64.dtype != torch.float64:
                self.reasons.append(
                    f"on float64 inputs output {i} is {str(x64.dtype).removeprefix('torch.')}: compute "
                    "in torch.promote_types(x.dtype, torch.float32) and return the inputs' dtype, not "
                    "a fixed one"
                )
                return
        self.values(out64, " of the float64 run")
        for i, (x64, x) in enumerate(zip(out64, native, strict=True)):
            if not (x.is_floating_point() and x.shape == x64.shape):
                continue
            ref = x64.double()
            if not bool(torch.isfinite(ref).all() and torch.isfinite(x).all()):
                continue
            scale = ref.norm().item()
            diff = (x.double() - ref).norm().item()
            if scale > 0 and diff / scale > FP64_AGREEMENT:
                self.reasons.append(
                    f"output {i} differs between the native and the float64 run (relative "
                    f"difference {diff / scale:.3g}): the math depends on the input dtype"
                )

    def counts(self) -> None:
        for name in ("kgen_bytes", "kgen_flops"):
            fn = getattr(self.problem.module, name, None)
            if fn is None:
                continue
            try:
                value = fn()
            except Exception as exc:  # noqa: BLE001 - untrusted code
                self.reasons.append(f"{name}() raised {_line(exc)}")
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                self.reasons.append(f"{name}() returned {value!r}; it must return a positive int")


def check(path: Path) -> dict[str, Any]:
    report: dict[str, Any] = {"reasons": [], "sizes": {}}
    try:
        job = _Check(path)
        report["sizes"] = job.sizes
        try:
            job.run()
        finally:
            report["reasons"] = list(job.reasons)
    except _Fatal as exc:
        report["reasons"].append(str(exc))
    return report


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    report = check(Path(argv[0]))
    report["finished"] = True
    Path(argv[1]).write_text(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
