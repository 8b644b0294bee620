"""One train check: two stock runs (reference, jittered) and the kernel run, compared."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel

from kgen.errors import KgenUsageError
from kgen.train_check.compare import DEFAULT_FACTOR, Band, module_drift, noise_band, steps_outside
from kgen.train_check.kernels import (
    choose_kernels,
    interpreter_arithmetic_quiet,
    kernel_files,
    package_folder,
    prepare_process,
)
from kgen.train_check.live_calls import LiveCalls
from kgen.train_check.loop import RunResult, jitter_parameters, logits_loss, train
from kgen.train_check.model import SIZES, ModelSize, build_model
from kgen.train_check.op_check import OpCheck, check_calls
from kgen.train_check.report import TrainCheckResult
from kgen.train_check.swaps import stock_loss, swap_kernels
from kgen.train_check.tokens import token_batches

#: the steps whose kernel calls are judged against fp64 (`op_check`): fresh weights, and trained ones
RECORDED_STEPS = (0, -1)

#: told each stage of a check as it starts, in words (the command prints them on stderr)
Progress = Callable[[str], None]


def _silent(line: str) -> None:
    """No progress wanted."""


def stock_run(size: ModelSize, steps: int, seed: int, device: str, jitter_seed: int | None = None) -> RunResult:
    """A stock run; ``jitter_seed`` moves the initial parameters by one bf16 rounding step."""
    model = build_model(size, seed, device)
    if jitter_seed is not None:
        jitter_parameters(model, jitter_seed)
    return train(model, token_batches(size.vocab, size.batch, size.seq, steps, seed, device), logits_loss(stock_loss))


class Stock(BaseModel):
    """The two stock runs a check compares with, and the band they give: measured once, shared by
    every kernel set checked at the same size, steps, seed and device (`scripts/train_check_gpu.py`
    checks a good and a planted set against one pair)."""

    size: ModelSize
    steps: int
    seed: int
    device: str
    factor: float
    reference: RunResult
    jittered: RunResult
    band: Band | None = None
    #: why no band could be measured ("" when there is one)
    problem: str = ""


def stock_runs(size: ModelSize, steps: int, seed: int, device: str, factor: float = DEFAULT_FACTOR,
               progress: Progress = _silent) -> Stock:
    """The reference run and the jittered one, and their noise band unless it cannot be measured."""
    progress(f"stock run 1 of 2 (the reference): {steps} steps")
    reference = stock_run(size, steps, seed, device)
    progress(f"stock run 2 of 2 (parameters moved by one bf16 step): {steps} steps")
    jittered = stock_run(size, steps, seed, device, jitter_seed=seed + 1)
    stock = Stock(size=size, steps=steps, seed=seed, device=device, factor=factor, reference=reference,
                  jittered=jittered)
    if not all(math.isfinite(x) for x in reference.losses + jittered.losses) or len(jittered.losses) < steps:
        stock.problem = "a stock run's loss is not finite"
    elif (band := noise_band(reference.losses, jittered.losses, factor)).noise[-1] == 0.0:
        stock.problem = "the two stock runs are identical: no noise measured"
    else:
        stock.band = band
    return stock


def model_size(size: str | ModelSize, flag: str = "--size") -> tuple[str, ModelSize]:
    """A size's name and shape: a name of `SIZES`, or a `ModelSize` (the tests use smaller ones);
    ``flag`` is the option a wrong name came from."""
    if isinstance(size, ModelSize):
        return "custom", size
    if size not in SIZES:
        raise KgenUsageError(f"{flag} must be one of {', '.join(SIZES)}, not '{size}'")
    return size, SIZES[size]


def check_arguments(size: str | ModelSize, steps: int, kernels: Path | None = None,
                    export: Path | None = None, fused: bool = False) -> tuple[str, ModelSize]:
    """A check's arguments judged before any work (the command asks before it picks a device):
    the size's name and shape, or a usage error."""
    named = model_size(size)
    if steps < 2:
        raise KgenUsageError(f"--steps must be at least 2, not {steps}")
    kernel_files(kernels, fused)
    if export is not None:
        package_folder(export)
    return named


def run_check(kernels: Path | None = None, steps: int = 12, size: str | ModelSize = "tiny", device: str = "cpu",
              seed: int = 0, factor: float = DEFAULT_FACTOR, export: Path | None = None,
              stock: Stock | None = None, fused: bool = False, progress: Progress = _silent) -> TrainCheckResult:
    """Train stock twice (unless ``stock`` holds those runs) and once with the kernels; the verdict
    says whether the kernel run agrees.

    ``export`` is a package `kgen export` wrote, whose ops serve the problems it holds
    (``kernels``' files and the seeds the rest). ``fused``: the fused seams swap in too (each
    block's residual add + RMSNorm, the LM head + loss). ``progress`` is told each run and each
    step of the kernel run as they start (a CPU check works for tens of seconds)."""
    size_name, shape = check_arguments(size, steps)  # the folders: by choose_kernels, below
    base = {"size": size_name, "steps": steps, "device": device, "seed": seed}
    progress(f"building the {size_name} model on the {device} and loading its kernels")
    prepare_process(device)
    model = build_model(shape, seed, device)  # first: a kernel folder or package that cannot serve is a usage error now
    chosen = choose_kernels(model.config.vocab_size, model.config.rms_norm_eps, kernels, export, fused)
    if stock is None:
        stock = stock_runs(shape, steps, seed, device, factor, progress)
    elif (stock.size, stock.steps, stock.seed, stock.device, stock.factor) != (shape, steps, seed, device, factor):
        raise ValueError("the stock runs were made for another size, step count, seed, device or factor")
    reference, jittered, band = stock.reference, stock.jittered, stock.band
    curves = {"stock": reference.losses, "stock_jittered": jittered.losses}
    if band is None:
        return TrainCheckResult(verdict="inconclusive", reason=stock.problem, **base, **curves)
    recorder = LiveCalls(steps=RECORDED_STEPS, last_step=steps - 1)
    step_loss, swaps = swap_kernels(model, chosen, recorder)

    def at_step(step: int) -> None:
        progress(f"kernel run: step {step + 1} of {steps}")
        recorder.at_step(step)

    try:
        with interpreter_arithmetic_quiet():
            kernel = train(model, token_batches(shape.vocab, shape.batch, shape.seq, steps, seed, device), step_loss,
                           on_step=at_step)
    except Exception as exc:  # a kernel that cannot run here says nothing about its numerics
        return TrainCheckResult(verdict="inconclusive", reason=f"the kernel run failed: {type(exc).__name__}: {exc}",
                                **base, **curves, band=band, swaps=swaps)
    progress("each kernel's calls at the first and last step against its problem's fp64 reference")
    try:
        with interpreter_arithmetic_quiet():
            ops = check_calls(recorder.calls)
    except Exception as exc:  # kgen's own reference could not run: no word on the kernel
        return TrainCheckResult(verdict="inconclusive", reason=f"the kernels' calls could not be judged: "
                                f"{type(exc).__name__}: {exc}", **base, **curves, kernel=kernel.losses, band=band,
                                swaps=swaps)
    outside = steps_outside(band, reference.losses, kernel.losses)
    drift = module_drift(reference.params, jittered.params, kernel.params, factor) if kernel.params else []
    found = _disagreements(outside, [row.module for row in drift if not row.ok], ops, factor)
    verdict, reason = ("disagree", "; ".join(found)) if found else (
        "agree", f"loss within the stock noise band (x{factor:g}) at every step, no module drifted, "
                 "every kernel within the verifier's tolerance on the run's own tensors")
    return TrainCheckResult(verdict=verdict, reason=reason, **base, **curves, kernel=kernel.losses, band=band,
                            steps_outside=outside, drift=drift, ops=ops, swaps=swaps)


def _disagreements(outside: list[int], drifted: list[str], ops: list[OpCheck], factor: float) -> list[str]:
    """Each way the kernel run disagrees with stock, in words."""
    found = []
    if outside:
        found.append(f"the loss left the stock noise band (x{factor:g}) at step {outside[0]}")
    if drifted:
        found.append(f"parameters drifted past the stock noise (x{factor:g}): {', '.join(drifted)}")
    found += [f"{op.problem} on the run's own tensors at step {op.step}: {op.message}" for op in ops if not op.ok]
    return found
