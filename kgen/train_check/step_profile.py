"""Where a training step's time goes: torch.profiler's kernels grouped by kind, per step.

A kernel that wins alone can lose in the model: the compiler no longer fuses the casts, adds
and reshapes around it, copies appear at its boundaries, and each opaque op costs host time.
This module profiles a few steps of one model (stock compiled, or with kgen's kernels) and
groups every device kernel by what it is, by its name:

* ``matmul`` (cuBLAS, CUTLASS, nvjet), ``attention`` (flash/fused attention kernels);
* ``kgen`` (the Triton kernels of kgen's swapped-in code, named by the caller);
* ``inductor`` (kernels torch.compile generated) and, apart, ``inductor copy/cast`` (its
  kernels that only copy or convert: fused names of nothing but ``clone``/``_to_copy``/``copy``);
* ``copy/fill`` (aten copies, casts, memsets and memcpys: what a boundary adds);
* ``other`` (the rest, e.g. eager aten kernels).

On a CPU there are no device kernels: the table groups the outermost aten operators' CPU time
the same way (the dry run's machinery, not a figure to read).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from pydantic import BaseModel

#: the kinds, in the order the table prints them
KINDS = ("matmul", "attention", "kgen", "inductor", "inductor copy/cast", "copy/fill", "other")
_MATMUL = re.compile(r"gemm|cutlass|cublas|nvjet|xmma|wgmma|aten::(mm|bmm|addmm|matmul|linear)\b", re.IGNORECASE)
_ATTENTION = re.compile(r"flash|fmha|attention|sdpa", re.IGNORECASE)
_COPY = re.compile(r"copy|memcpy|memset|fill|cast|aten::(to|_to_copy|clone|contiguous|zero_|zeros|empty)\b",
                   re.IGNORECASE)
#: an Inductor kernel's name: triton_(poi|red|per|tem)_fused_<ops>_<n>
_INDUCTOR = re.compile(r"^triton_(poi|red|per|tem|for)_")
_ONLY_COPIES = re.compile(r"^triton_(poi|red|per)_fused_((clone|_to_copy|copy|view|permute|transpose|expand|"
                          r"unsqueeze|squeeze|slice)_?)+\d*$")


class KindRow(BaseModel):
    """One kind of kernel: device milliseconds and launches per step."""

    kind: str
    ms_per_step: float
    launches_per_step: float


class StepProfile(BaseModel):
    """One model's profiled steps."""

    label: str
    steps: int
    #: "cuda" (device kernels) or "cpu" (operators' CPU time: machinery only)
    measured_on: str
    rows: list[KindRow]
    #: the ten kernels (or operators) taking the most time per step: (name, kind, ms per step)
    top: list[tuple[str, str, float]]

    @property
    def total_ms(self) -> float:
        return sum(r.ms_per_step for r in self.rows)

    @property
    def launches(self) -> float:
        return sum(r.launches_per_step for r in self.rows)

    def row(self, kind: str) -> KindRow:
        return next((r for r in self.rows if r.kind == kind), KindRow(kind=kind, ms_per_step=0.0,
                                                                         launches_per_step=0.0))


def triton_kernel_names(modules: Iterable[Any]) -> set[str]:
    """The Python names of the Triton kernels (JIT, autotuned, heuristics-wrapped) defined at the
    top of these modules: their names in a profile."""
    import inspect

    names = set()
    for module in modules:
        for value in vars(module).values():
            fn = getattr(value, "fn", None)
            while fn is not None and not inspect.isfunction(fn):
                fn = getattr(fn, "fn", None)
            if fn is not None and type(value).__module__.startswith("triton"):
                names.add(fn.__name__)
    return names


def kernel_kind(name: str, kgen_kernels: Iterable[str] = ()) -> str:
    """The kind of one kernel (or operator) by its name (a kgen kernel's name may carry a suffix
    the compiler added)."""
    if any(name == k or name.startswith(f"{k}_") for k in kgen_kernels):
        return "kgen"
    if _INDUCTOR.match(name):
        return "inductor copy/cast" if _ONLY_COPIES.match(name) else "inductor"
    if _ATTENTION.search(name):
        return "attention"
    if _MATMUL.search(name):
        return "matmul"
    if _COPY.search(name):
        return "copy/fill"
    return "other"


def profile_steps(label: str, step: Callable[[Any], None], batches: list[Any], device: str,
                  kgen_kernels: Iterable[str] = ()) -> StepProfile:
    """Profile ``step`` over ``batches`` (already warmed up by the caller: compiled, autotuned)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=activities) as prof:
        for ids in batches:
            step(ids)
        if device == "cuda":
            torch.cuda.synchronize()
    return summarise(label, prof.events(), len(batches), device, kgen_kernels)


def summarise(label: str, events: Iterable[Any], steps: int, device: str,
              kgen_kernels: Iterable[str] = ()) -> StepProfile:
    """Group the profiler's events: device kernels on a GPU; the outermost aten operators on a CPU."""
    names = set(kgen_kernels)
    per_name: dict[str, list[float]] = {}
    for event in events:
        if device == "cuda":
            if str(getattr(event, "device_type", "")).endswith("CUDA") and event.name:
                micro = float(event.device_time)
            else:
                continue
        else:  # the outermost aten operators (an op another aten op called is inside its time)
            parent = event.cpu_parent
            if not event.name.startswith("aten::") or (parent is not None and parent.name.startswith("aten::")):
                continue
            micro = float(event.cpu_time_total)
        acc = per_name.setdefault(event.name, [0.0, 0.0])
        acc[0] += micro
        acc[1] += 1
    totals = {kind: [0.0, 0.0] for kind in KINDS}
    for name, (micro, count) in per_name.items():
        kind = kernel_kind(name, names)
        totals[kind][0] += micro
        totals[kind][1] += count
    rows = [KindRow(kind=k, ms_per_step=v[0] / 1000 / steps, launches_per_step=v[1] / steps) for k, v in totals.items()]
    top = sorted(per_name.items(), key=lambda item: -item[1][0])[:10]
    return StepProfile(label=label, steps=steps, measured_on=device, rows=rows,
                       top=[(name, kernel_kind(name, names), v[0] / 1000 / steps) for name, v in top])


def profile_table(profiles: list[StepProfile]) -> str:
    """The profiles side by side as a markdown table: ms and launches per step by kind."""
    header = "| kind | " + " | ".join(f"{p.label} ms | {p.label} launches" for p in profiles) + " |"
    lines = [header, "|---|" + "---|---|" * len(profiles)]
    for kind in KINDS:
        cells = [f"{p.row(kind).ms_per_step:.3f} | {p.row(kind).launches_per_step:.0f}" for p in profiles]
        lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    lines.append("| **all** | " + " | ".join(f"{p.total_ms:.3f} | {p.launches:.0f}" for p in profiles) + " |")
    for p in profiles:
        lines += ["", f"Top kernels, {p.label} (ms per step, measured on {p.measured_on}):", ""]
        lines += [f"- `{name[:90]}` ({kind}): {ms:.3f}" for name, kind, ms in p.top]
    return "\n".join(lines) + "\n"
