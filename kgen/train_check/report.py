"""The result of a train check: curves, band, verdict, drift table; as JSON and as a text table."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from kgen.train_check.compare import Band, ModuleDrift
from kgen.train_check.op_check import OpCheck
from kgen.train_check.swaps import Swap

Verdict = Literal["agree", "disagree", "inconclusive"]


class TrainCheckResult(BaseModel):
    """Everything one check found; ``reason`` says why the verdict is what it is."""

    verdict: Verdict
    reason: str
    size: str
    steps: int
    device: str
    seed: int
    stock: list[float] = []
    stock_jittered: list[float] = []
    kernel: list[float] = []
    band: Band | None = None
    steps_outside: list[int] = []
    drift: list[ModuleDrift] = []
    ops: list[OpCheck] = []
    swaps: list[Swap] = []


def text_report(result: TrainCheckResult) -> str:
    """A plain-text table: the loss curves and band per step, then the drift per module."""
    lines = [f"train-check ({result.size}, {result.steps} steps, {result.device}): {result.verdict}: {result.reason}"]
    for swap in result.swaps:
        extra = f" (torch: {swap.torch_part})" if swap.torch_part else ""
        lines.append(f"  swapped {swap.replaced}{extra}: {', '.join(swap.kernels)}")
    if result.band is not None:
        lines.append(f"{'step':>4}  {'stock':>9}  {'jittered':>9}  {'kernel':>9}  {'|gap|':>9}  {'allowed':>9}")
        for step, allowed in enumerate(result.band.allowed):
            kernel = result.kernel[step] if step < len(result.kernel) else float("nan")
            gap = abs(kernel - result.stock[step])
            mark = "  <-- outside" if step in result.steps_outside else ""
            lines.append(f"{step:>4}  {result.stock[step]:9.5f}  {result.stock_jittered[step]:9.5f}  {kernel:9.5f}"
                         f"  {gap:9.2e}  {allowed:9.2e}{mark}")
    if result.drift:
        lines.append(f"{'module':<40}  {'kernel drift':>12}  {'noise drift':>12}  {'allowed':>9}")
        for row in result.drift:
            lines.append(f"{row.module:<40}  {row.kernel:12.3e}  {row.noise:12.3e}  {row.allowed:9.2e}"
                         + ("" if row.ok else "  <-- drifted"))
    if result.ops:
        lines.append(f"{'kernel, on the run tensors':<28}  {'step':>4}  {'rel-L2 error':>12}  {'tolerance':>9}")
        for op in result.ops:
            lines.append(f"{op.problem:<28}  {op.step:>4}  {op.error:12.3e}  {op.tolerance:9.1e}"
                         + ("" if op.ok else "  <-- outside"))
    return "\n".join(lines)


def curves_picture(result: TrainCheckResult) -> str:
    """The check's loss curves as SVG (`plot.loss_curves_svg`): the jittered stock run and the kernel run
    against the reference, the band shaded."""
    from kgen.train_check.plot import loss_curves_svg

    title = f"kgen train-check ({result.size}, {result.steps} steps, {result.device}): {result.verdict}"
    runs = {"stock, jittered": result.stock_jittered, "kernels": result.kernel}
    return loss_curves_svg(title, result.stock, {k: v for k, v in runs.items() if v},
                           result.band.allowed if result.band else None)
