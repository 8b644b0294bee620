"""The verifier that runs inside the sandbox: static rules, load, correctness, compile.

Run as ``python -m kgen.evals.child REQUEST.json REPORT.json``. The report is
rewritten after every stage and every trial, so when the candidate kills
this process (segfault, illegal memory access, timeout) the parent still
has the evidence gathered up to that point.

Correctness runs trials in a fixed order, so a failure can be named by what
passed before it: the default sizes on normal inputs over every seed first,
then the other input distributions, then the other size sets; then the
ghost check (kernels switched off must change the output) and the cache
probe (new values in the same buffers must give new outputs).

Nothing here imports triton before the backend has prepared the process:
the CPU interpreter is chosen by an environment variable read at import.
"""

from __future__ import annotations

import copy
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from kgen.backends.base import KernelLaunch, KernelReport
from kgen.evals.precision_probe import ACCUMULATION_PROBES as PROBE_DISTRIBUTIONS
from kgen.evals.result import RejectionClass, ResultModel, StageResult, StageStatus, Trial

#: Input sets rotated through timed calls, so no trial reuses the previous trial's buffers.
TIMING_INPUT_SETS = 3


class ChildRequest(BaseModel):
    problem_path: str
    candidate_path: str
    backend: str = "triton"
    device: str = "cpu"
    seeds: list[int]
    size_sets: list[dict[str, int]]
    #: indices of size sets kgen made up (odd sizes): skipped, not failed, if the reference cannot run them
    generated_size_sets: list[int] = Field(default_factory=list)
    #: sizes for the precision-probe distributions (a long reduction axis); None: the first set
    probe_sizes: dict[str, int] | None = None
    distributions: bool = True
    targets: list[str] = Field(default_factory=list)
    #: sizes whose kernel launches are compiled for the targets (the problem's defaults)
    compile_sizes: dict[str, int] | None = None
    train_check: bool = False
    #: time the candidate and the baselines at the problem's default sizes (GPU only)
    bench: bool = False
    bench_sizes: dict[str, int] | None = None
    workdir: str = "."


class ChildReport(ResultModel):
    stages: list[StageResult] = Field(default_factory=list)
    #: trials not run, and why (a generated size set the reference cannot run, an
    #: output the distribution makes unrepresentable in its dtype)
    skipped: list[str] = Field(default_factory=list)
    trials: list[Trial] = Field(default_factory=list)
    kernels: list[KernelReport] = Field(default_factory=list)
    train_check: dict[str, Any] | None = None
    bench: dict[str, Any] | None = None
    rejection: RejectionClass | None = None
    reason: str = ""
    finished: bool = False


class Rejected(Exception):
    def __init__(self, rejection: RejectionClass, message: str):
        super().__init__(message)
        self.rejection = rejection


class SkipTrial(Exception):
    """A trial the reference itself cannot judge: recorded, never held against the candidate."""


def _write(report: ChildReport, path: Path) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(report.model_dump_json())
    os.replace(tmp, path)


def _exception_line(exc: BaseException, candidate_path: str) -> str:
    """One line: the exception and the candidate's own line where it was raised."""
    frames = traceback.extract_tb(exc.__traceback__)
    own = [f for f in frames if Path(f.filename).resolve() == Path(candidate_path).resolve()]
    where = f" at {Path(own[-1].filename).name}:{own[-1].lineno}" if own else ""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}{where}: {text[0] if text else ''}".rstrip(": ")


def _sizes_text(sizes: dict[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sizes.items())


class _Evaluation:
    def __init__(self, request: ChildRequest, report_path: Path):
        self.request = request
        self.report_path = report_path
        self.report = ChildReport()
        from kgen.backends.registry import get_backend

        self.backend = get_backend(request.backend)
        self.backend.prepare_process(request.device)
        import torch  # after prepare_process: torch may import triton

        if request.backend == "triton":
            import triton  # noqa: F401 - imported by kgen, so its first-import work is not the candidate's

        from kgen.evals.candidate_guard import CandidateGuard

        self.torch = torch
        self.device = torch.device(request.device)
        self.module: Any = None
        self.first_launches: list[KernelLaunch] = []
        self.candidate_path = Path(request.candidate_path)
        cache = os.environ.get("TRITON_CACHE_DIR", str(Path(request.workdir) / ".triton"))
        self.guard = CandidateGuard(self.candidate_path, [Path(request.workdir), Path(cache), Path("/dev")])
        self.guard.install()
        self.passed_distributions: set[str] = set()
        self.failed_distributions: dict[str, float] = {}
        self.previous_outputs: list[Any] = []
        self._warm_up()

    def _warm_up(self) -> None:
        """Start the libraries' own threads before any thread is counted against the candidate."""
        torch = self.torch
        (torch.randn(512, 512) @ torch.randn(512, 512)).sum().item()
        if self.device.type == "cuda":
            torch.ones(1, device=self.device).sum().item()

    def save(self) -> None:
        _write(self.report, self.report_path)

    def stage(self, name: str, status: StageStatus, message: str, started: float, **evidence: Any):
        self.report.stages.append(
            StageResult(name=name, status=status, message=message, seconds=time.monotonic() - started, evidence=evidence)
        )
        self.save()

    # -- static rules and load ----------------------------------------------------
    def static(self) -> None:
        from kgen.evals.static_rules import check_candidate_source

        started = time.monotonic()
        try:
            source = self.candidate_path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise Rejected(RejectionClass.LOAD_ERROR, f"cannot read the candidate: {exc}") from exc
        try:
            compile(source, str(self.candidate_path), "exec")
        except SyntaxError as exc:
            raise Rejected(
                RejectionClass.LOAD_ERROR, f"syntax error in {self.candidate_path.name} line {exc.lineno}: {exc.msg}"
            ) from exc
        violations = check_candidate_source(source, self.candidate_path.name)
        if violations:
            first = violations[0]
            raise Rejected(
                first.rejection,
                f"{first.message} (rule {first.rule}, line {first.line})"
                + (f"; {len(violations) - 1} more rule violation(s)" if len(violations) > 1 else ""),
            )
        self.stage("static", StageStatus.PASSED, "no forbidden construct found", started)

    def load(self) -> None:
        from kgen.backends.module_loading import CandidateLoadError

        started = time.monotonic()
        try:
            with self.guard:
                self.module = self.backend.load_candidate(self.candidate_path)
        except CandidateLoadError as exc:
            self._raise_guard_violation()
            raise Rejected(RejectionClass.LOAD_ERROR, str(exc)) from exc
        self._raise_guard_violation()
        model_new = getattr(self.module, "ModelNew", None)
        if not isinstance(model_new, type):
            raise Rejected(RejectionClass.NO_MODEL_NEW, f"{self.candidate_path.name} defines no class ModelNew")
        self.stage("load", StageStatus.PASSED, "ModelNew found", started)

    def _raise_guard_violation(self) -> None:
        if self.guard.violations:
            v = self.guard.violations[0]
            raise Rejected(RejectionClass.SANDBOX_VIOLATION, f"the candidate tried a forbidden {v.action}: {v.detail}")

    # -- correctness ------------------------------------------------------------------
    def _plan(self) -> list[tuple[dict[str, int], str, int]]:
        """(sizes, distribution, seed) for every trial, in the order that names failures."""
        from kgen.evals.input_distributions import distributions_for
        from kgen.evals.problem import load_problem

        seeds = self.request.seeds
        first_sizes = self.request.size_sets[0]
        plan = [(first_sizes, "normal", seed) for seed in seeds]
        if self.request.distributions:
            self.torch.manual_seed(seeds[0])
            problem = load_problem(self.request.problem_path, first_sizes)
            names = [d for d in distributions_for(problem.info, problem.get_inputs()) if d != "normal"]
            probe_sizes = self.request.probe_sizes or first_sizes
            plan += [
                (probe_sizes if name in PROBE_DISTRIBUTIONS else first_sizes, name, seeds[(i + 1) % len(seeds)])
                for i, name in enumerate(names)
            ]
        plan += [(sizes, "normal", seeds[i % len(seeds)]) for i, sizes in enumerate(self.request.size_sets[1:])]
        return plan

    def correctness(self) -> None:
        from kgen.evals.problem import load_problem

        started = time.monotonic()
        worst = 0.0
        problems: dict[str, Any] = {}
        plan = self._plan()
        generated = [self.request.size_sets[i] for i in self.request.generated_size_sets]
        for sizes, distribution, seed in plan:
            key = repr(sorted(sizes.items()))
            try:
                if key not in problems:
                    problems[key] = load_problem(self.request.problem_path, sizes)
                trial = self._trial(problems[key], seed, distribution, generated=sizes in generated)
            except SkipTrial as exc:
                self.report.skipped.append(str(exc))
                continue
            except Rejected as exc:
                if exc.rejection is RejectionClass.MISMATCH and distribution not in PROBE_DISTRIBUTIONS:
                    self._probe_precision(problems[key], seed, exc)
                raise
            worst = max([worst, *(o.rel_l2_error / max(o.tolerance_rel_l2, 1e-300) for o in trial.outputs)])
        first = problems[repr(sorted(self.request.size_sets[0].items()))]
        self._ghost_check(first, self.request.seeds[0])
        self._cache_probe(first, self.request.seeds[-1])
        self.stage(
            "correctness",
            StageStatus.PASSED,
            f"{len(plan)} trial(s) matched the fp64 reference over {len(self.request.seeds)} seed(s), "
            f"{len({d for _, d, _ in plan})} input distribution(s) and {len(self.request.size_sets)} size set(s); "
            f"worst error {worst:.2f}x of tolerance; kernels switched off change the output; "
            "new inputs in old buffers give new outputs",
            started,
            seeds=self.request.seeds,
            size_sets=self.request.size_sets,
            distributions=sorted({d for _, d, _ in plan}),
            worst_error_over_tolerance=worst,
        )

    def _to_device(self, value: Any, upcast: bool = False) -> Any:
        torch = self.torch
        if isinstance(value, torch.Tensor):
            value = value.to(self.device)
            if upcast and value.is_floating_point():
                value = value.to(torch.float64)
        return value

    def _inputs(self, problem, seed: int, distribution: str) -> list[Any]:
        from kgen.evals.input_distributions import apply_distribution, distribution_generator

        self.torch.manual_seed(seed)
        inputs = apply_distribution(distribution, problem.get_inputs(), distribution_generator(seed, distribution))
        return [self._to_device(x) for x in inputs]

    def _models(self, problem, seed: int):
        torch = self.torch
        torch.manual_seed(seed)
        init = problem.get_init_inputs()
        torch.manual_seed(seed)
        reference = problem.model_class(*init).to(self.device)
        torch.manual_seed(seed)
        try:
            with self.guard:
                candidate = self.module.ModelNew(*init)
        except Exception as exc:  # noqa: BLE001 - untrusted code
            self._raise_guard_violation()
            raise Rejected(
                RejectionClass.CONSTRUCTION_ERROR,
                f"ModelNew(*init_inputs) raised {_exception_line(exc, self.request.candidate_path)}",
            ) from exc
        if isinstance(candidate, torch.nn.Module):
            candidate = candidate.to(self.device)
            ref_state, cand_state = reference.state_dict(), candidate.state_dict()
            if list(ref_state) == list(cand_state):
                # Same parameters under the same names: give them the reference's values,
                # so a candidate initialised differently is judged on its kernels alone.
                candidate.load_state_dict({k: v.to(cand_state[k].dtype) for k, v in ref_state.items()})
        return reference, candidate

    def _references(self, reference, inputs: list[Any]) -> tuple[list[Any], list[Any]]:
        from kgen.evals.candidate_call import clone_value
        from kgen.evals.compare import flatten_outputs

        with self.torch.no_grad():
            native = flatten_outputs(reference(*[clone_value(x) for x in inputs]))
            ref64 = flatten_outputs(
                copy.deepcopy(reference).double()(*[self._to_device(x, upcast=True) for x in inputs])
            )
        return native, ref64

    def _runtime_error(self, exc: BaseException, what: str) -> Rejected:
        return Rejected(
            RejectionClass.RUNTIME_ERROR,
            f"forward raised {_exception_line(exc, self.request.candidate_path)} ({what})",
        )

    def _call(self, candidate, inputs, poison_like, what: str, execute: bool = True):
        from kgen.evals.candidate_call import call_candidate

        evidence = call_candidate(
            candidate, inputs, self.backend, self.guard, self.device, poison_like, execute_kernels=execute
        )
        self._raise_guard_violation()
        if evidence.error is not None:
            raise self._runtime_error(evidence.error, what)
        if execute and not evidence.launches:
            raise Rejected(RejectionClass.NO_KERNEL_LAUNCH, f"forward launched no {self.backend.name} kernel ({what})")
        if evidence.compute_ops:
            ops = ", ".join(f"{op} x{n}" for op, n in sorted(evidence.compute_ops.items()))
            raise Rejected(RejectionClass.NOT_A_KERNEL, f"forward computed with torch instead of kernels: {ops} ({what})")
        if evidence.mutated_inputs:
            raise Rejected(
                RejectionClass.INPUT_MUTATION,
                f"forward changed input(s) {evidence.mutated_inputs} in place ({what})",
            )
        if evidence.deferred_outputs:
            raise Rejected(
                RejectionClass.DEFERRED_WORK,
                f"output(s) {evidence.deferred_outputs} were still changing after forward returned: work left "
                f"running on another stream or thread ({what})",
            )
        return evidence

    def _trial(self, problem, seed: int, distribution: str, generated: bool = False) -> Trial:
        from kgen.evals.compare import (
            ComparisonFailure,
            check_structure,
            compare_output,
            failure_of,
        )
        from kgen.evals.input_distributions import representable

        started = time.monotonic()
        what = f"seed {seed}, {distribution} inputs, sizes {_sizes_text(problem.sizes)}"
        inputs = self._inputs(problem, seed, distribution)
        reference, candidate = self._models(problem, seed)
        if generated:
            try:
                self._references(reference, inputs)
            except Exception as exc:  # noqa: BLE001 - the problem's own limits, not the candidate's
                raise SkipTrial(f"{what}: the reference cannot run these made-up sizes ({type(exc).__name__}: {exc})") from exc
        trial = Trial(seed=seed, sizes=problem.sizes, distribution=distribution)
        self.report.trials.append(trial)
        self.save()  # if the candidate kills the process now, the parent knows where
        # The candidate runs before the reference: no reference output can be lying in freed memory.
        before = self._call(candidate, inputs, self.previous_outputs, what + ", before the reference")
        native, ref64 = self._references(reference, inputs)
        unrepresentable = [i for i, (r64, rn) in enumerate(zip(ref64, native, strict=True)) if not representable(r64, rn.dtype)]
        if unrepresentable:
            self.report.trials.remove(trial)
            raise SkipTrial(f"{what}: output(s) {unrepresentable} cannot be stored in their dtype at this magnitude")
        after = self._call(candidate, inputs, native, what + ", after the reference")
        shared = [
            i for i, (a, b) in enumerate(zip(before.outputs, after.outputs, strict=False))
            if isinstance(a, self.torch.Tensor) and isinstance(b, self.torch.Tensor) and a.numel()
            and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
        ]
        if shared:
            raise Rejected(
                RejectionClass.STALE_OUTPUT,
                f"output(s) {shared} of two calls share one buffer: each call overwrites the result a "
                f"caller kept from the last one ({what})",
            )
        trial.launches = len(after.launches)
        if not self.first_launches:
            self.first_launches = list(after.launches)
        for outputs in (before.outputs, after.outputs):
            try:
                check_structure(outputs, native)
            except ComparisonFailure as exc:
                raise Rejected(exc.rejection, f"{exc} ({what})") from exc
            self._check_unwritten(outputs, trial, what)
            trial.outputs = [
                compare_output(i, out, r64, rn)
                for i, (out, r64, rn) in enumerate(zip(outputs, ref64, native, strict=True))
            ]
            failure = failure_of(trial.outputs)
            if failure is not None:
                trial.seconds = time.monotonic() - started
                self.save()
                raise Rejected(*self._name_failure(failure, trial, outputs, what))
        trial.passed = True
        trial.seconds = time.monotonic() - started
        self.passed_distributions.add(distribution)
        self.previous_outputs = list(after.outputs)
        self.save()
        return trial

    def _probe_precision(self, problem, seed: int, failure: Rejected) -> None:
        """A mismatch on ordinary inputs: if the probe inputs make it much worse, it is an
        accumulator too narrow for its sums (a bf16 running sum feeding an fp32 output
        fails even on normal inputs), and the verdict should say so."""
        from kgen.evals.input_distributions import distributions_for
        from kgen.evals.precision_probe import fits_low_precision_accumulation
        from kgen.evals.problem import load_problem

        if self.request.probe_sizes and self.request.probe_sizes != problem.sizes:
            problem = load_problem(self.request.problem_path, self.request.probe_sizes)
        probes = [d for d in distributions_for(problem.info, problem.get_inputs()) if d in PROBE_DISTRIBUTIONS]
        for probe in probes:
            try:
                self._trial(problem, seed, probe)  # a failure records its error ratio
            except (Rejected, SkipTrial):
                continue
        if fits_low_precision_accumulation(dict(self.failed_distributions), set(self.passed_distributions)):
            worst = max(self.failed_distributions, key=self.failed_distributions.get)
            raise Rejected(
                RejectionClass.LOW_PRECISION_ACCUMULATION,
                f"{failure}; on {worst} inputs, built to expose narrow accumulators, the error grows to "
                f"{self.failed_distributions[worst]:.0f}x the tolerance: the pattern of low-precision accumulation",
            ) from failure

    def _check_unwritten(self, outputs: list[Any], trial: Trial, what: str) -> None:
        from kgen.evals.poison import poisoned_count

        for i, out in enumerate(outputs):
            left = poisoned_count(out)
            if left and trial.sizes != self.request.size_sets[0] and "normal" in self.passed_distributions:
                raise Rejected(
                    RejectionClass.SHAPE_SPECIALISATION,
                    f"right at sizes {_sizes_text(self.request.size_sets[0])}, but at other sizes {left} of "
                    f"{out.numel()} elements of output {i} were never written ({what})",
                )
            if left == out.numel() and left:
                raise Rejected(
                    RejectionClass.UNWRITTEN_OUTPUT,
                    f"output {i} was never written: all {left} elements still hold the poison kgen put in "
                    f"fresh memory ({what})",
                )
            if left:
                raise Rejected(
                    RejectionClass.PARTIAL_OUTPUT,
                    f"output {i}: {left} of {out.numel()} elements ({left / out.numel():.1%}) were never written "
                    f"(still poison): the launch grid misses part of the output ({what})",
                )

    def _name_failure(self, failure, trial: Trial, outputs: list[Any], what: str) -> tuple[RejectionClass, str]:
        """Which class of the verification table a numerical failure belongs to."""
        from kgen.evals.candidate_call import same_values
        from kgen.evals.precision_probe import fits_low_precision_accumulation

        detail = f"{failure} ({what})"
        if self.previous_outputs and any(
            isinstance(o, type(p)) and same_values(o, p) for o, p in zip(outputs, self.previous_outputs, strict=False)
        ):
            return RejectionClass.STALE_OUTPUT, f"returned the previous call's output for new inputs: {detail}"
        worst = max(o.rel_l2_error / max(o.tolerance_rel_l2, 1e-300) for o in trial.outputs)
        self.failed_distributions[trial.distribution] = worst
        normal_passed = "normal" in self.passed_distributions
        if trial.distribution in PROBE_DISTRIBUTIONS and fits_low_precision_accumulation(
            dict(self.failed_distributions), set(self.passed_distributions)
        ):
            return (
                RejectionClass.LOW_PRECISION_ACCUMULATION,
                f"right on normal inputs, wrong on {trial.distribution} inputs built to expose low-precision "
                f"accumulation: {detail}",
            )
        if trial.distribution != "normal" and normal_passed:
            return (
                RejectionClass.INPUT_DISTRIBUTION,
                f"right on normal inputs, wrong on {trial.distribution} inputs: {detail}",
            )
        if trial.sizes != self.request.size_sets[0] and normal_passed:
            return (
                RejectionClass.SHAPE_SPECIALISATION,
                f"right at sizes {_sizes_text(self.request.size_sets[0])}, wrong at other sizes: {detail}",
            )
        if trial.seed != self.request.seeds[0] and normal_passed:
            return RejectionClass.SHAPE_SPECIALISATION, f"right for seed {self.request.seeds[0]}, wrong for another: {detail}"
        return failure.rejection, detail

    def _ghost_check(self, problem, seed: int) -> None:
        """With its kernel launches switched off, a real candidate's output must change."""
        from kgen.evals.candidate_call import same_outputs

        what = f"ghost check, seed {seed}"
        inputs = self._inputs(problem, seed, "normal")
        reference, candidate = self._models(problem, seed)
        real = self._call(candidate, inputs, self.previous_outputs, what)
        ghost = self._call(candidate, inputs, real.outputs, what + ", kernels off", execute=False)
        if same_outputs(ghost.outputs, real.outputs):
            raise Rejected(
                RejectionClass.NOT_A_KERNEL,
                "the output is the same with every kernel launch switched off: the kernels do not compute it "
                f"({what})",
            )

    def _cache_probe(self, problem, seed: int) -> None:
        """New values in the very same input buffers must give new outputs (no pointer-keyed cache)."""
        from kgen.evals.candidate_call import clone_value, same_outputs
        from kgen.evals.compare import flatten_outputs

        torch = self.torch
        what = f"cache probe, seed {seed}"
        first = self._inputs(problem, seed, "normal")
        second = self._inputs(problem, seed + 7919, "normal")
        _, candidate = self._models(problem, seed)
        saved_first = [clone_value(x) for x in first]
        try:
            with self.guard, torch.no_grad():
                out_first = [clone_value(o) for o in flatten_outputs(candidate(*first))]
                for buffer, new in zip(first, second, strict=True):
                    if isinstance(buffer, torch.Tensor):
                        buffer.copy_(new)
                out_second = flatten_outputs(candidate(*first))
        except Exception as exc:  # noqa: BLE001 - untrusted code
            self._raise_guard_violation()
            raise self._runtime_error(exc, what) from exc
        self._raise_guard_violation()
        inputs_differ = not same_outputs([x for x in saved_first if isinstance(x, torch.Tensor)],
                                         [x for x in second if isinstance(x, torch.Tensor)])
        if inputs_differ and same_outputs(out_first, out_second):
            raise Rejected(
                RejectionClass.STALE_OUTPUT,
                "new values in the same input buffers returned the same output: outputs are cached across "
                f"calls ({what})",
            )

    # -- compile and training -----------------------------------------------------------
    def compile(self) -> None:
        from kgen.backends.targets import resolve_target

        if not self.request.targets:
            return
        started = time.monotonic()
        launches = self._compile_launches()
        for name in self.request.targets:
            target = resolve_target(name)
            reports = self.backend.cross_compile(self.module, launches, target)
            self.report.kernels.extend(reports)
            self.save()
            failed = [r for r in reports if not r.ok]
            if failed:
                raise Rejected(
                    RejectionClass.COMPILE_ERROR,
                    f"kernel {failed[0].kernel} does not compile for {target.name}: {failed[0].error}",
                )
        sizes = self.request.compile_sizes or self.request.size_sets[0]
        self.stage(
            "compile",
            StageStatus.PASSED,
            f"{len(self.report.kernels)} kernel build(s) for {', '.join(self.request.targets)} "
            f"at sizes {_sizes_text(sizes)}",
            started,
        )

    def _compile_launches(self) -> list[KernelLaunch]:
        """The launches the problem's default sizes make, recorded with execution switched off
        on storage-less "meta" tensors: the real launch configuration even for a KernelBench
        file whose default inputs would not fit in this machine's memory. A candidate that
        cannot run on meta tensors is compiled at the launches its trials made."""
        from kgen.backends.triton.launches import record_launches
        from kgen.evals.problem import load_problem

        sizes = self.request.compile_sizes
        if not sizes or sizes == self.request.size_sets[0] or self.request.backend != "triton":
            return self.first_launches
        torch = self.torch
        try:
            problem = load_problem(self.request.problem_path, sizes)
            torch.manual_seed(self.request.seeds[0])
            with torch.device("meta"):
                inputs = problem.get_inputs()
                candidate = self.module.ModelNew(*problem.get_init_inputs())
            with self.guard, torch.no_grad(), record_launches(execute=False) as log:
                candidate(*inputs)
        except Exception:  # noqa: BLE001 - meta tensors are a shortcut, not a requirement
            return self.first_launches
        return list(log.launches) or self.first_launches

    def train(self) -> None:
        from kgen.evals.problem import read_problem
        from kgen.evals.train_check import run_train_check

        if not self.request.train_check:
            return
        started = time.monotonic()
        info = read_problem(self.request.problem_path)
        with self.guard:
            result = run_train_check(info, self.module.ModelNew, self.device, seed=self.request.seeds[0])
        self._raise_guard_violation()
        self.report.train_check = result.model_dump()
        if not result.applicable:
            self.stage("train_check", StageStatus.SKIPPED, result.message, started)
            return
        if not result.passed:
            raise Rejected(RejectionClass.TRAINING_DIVERGENCE, result.message)
        self.stage("train_check", StageStatus.PASSED, result.message, started)

    def timing(self) -> None:
        """Time the verified candidate, eager PyTorch and torch.compile the same way, at the
        problem's default sizes; judge the figures before reporting them."""
        from kgen.backends.targets import UnknownTargetError, resolve_target
        from kgen.evals.baselines import BaselineUnavailable, liger_baseline
        from kgen.evals.compare import compare_output, failure_of, flatten_outputs
        from kgen.evals.problem import load_problem
        from kgen.evals.sol import faster_than_light, speed_of_light, with_measurement
        from kgen.evals.timing import measure_copy_bandwidth, measure_matmul_tflops, time_on_gpu

        if not self.request.bench:
            return
        started = time.monotonic()
        torch = self.torch
        if self.device.type != "cuda":
            self.stage("timing", StageStatus.SKIPPED, "timings need a GPU: not measured", started)
            return
        sizes = self.request.bench_sizes or self.request.size_sets[0]
        problem = load_problem(self.request.problem_path, sizes)
        seed = self.request.seeds[0]
        input_sets = [self._inputs(problem, seed + 1000 + i, "normal") for i in range(TIMING_INPUT_SETS)]
        reference, candidate = self._models(problem, seed)
        last: dict[str, Any] = {}

        def timed_candidate(*args: Any) -> Any:
            last["args"], last["out"] = args, candidate(*args)
            return last["out"]

        measurements: dict[str, Any] = {}
        errors: dict[str, str] = {}
        with torch.no_grad():
            with self.guard:
                result = time_on_gpu(timed_candidate, input_sets, budget_s=2.0)
            self._raise_guard_violation()
            measurements["candidate"] = result.model_dump()
            # The outputs of a timed call are checked again: no switching behaviour once timing starts.
            index = next(i for i, s in enumerate(input_sets) if s[0] is last["args"][0])
            _, ref64 = self._references(reference, input_sets[index])
            outputs = [o.clone() for o in flatten_outputs(last["out"])]
            comparisons = [compare_output(i, o, r) for i, (o, r) in enumerate(zip(outputs, ref64, strict=True))]
            failure = failure_of(comparisons)
            if failure is not None:
                raise Rejected(RejectionClass.STALE_OUTPUT, f"the output of a timed call is wrong: {failure}")
            baselines: list[tuple[str, Any]] = [("eager", reference), ("torch.compile", torch.compile(reference))]
            try:
                baselines.append(("liger", liger_baseline(problem)))
            except BaselineUnavailable as exc:
                errors["liger"] = f"not measured: {exc}"
            for name, fn in baselines:
                try:
                    measurements[name] = time_on_gpu(fn, input_sets, budget_s=2.0).model_dump()
                except Exception as exc:  # noqa: BLE001 - a baseline that fails is reported, not fatal
                    errors[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        if any(flag.startswith("timer_patched") for flag in result.flags):
            raise Rejected(RejectionClass.TIMING_ATTACK, f"the timers were tampered with: {'; '.join(result.flags)}")
        if any(flag.startswith("deferred_work") for flag in result.flags):
            raise Rejected(RejectionClass.DEFERRED_WORK, f"timing the candidate: {'; '.join(result.flags)}")
        dtype = next((x.dtype for x in input_sets[0] if isinstance(x, torch.Tensor) and x.is_floating_point()), torch.float32)
        sol = None
        try:
            target = resolve_target(torch.cuda.get_device_name(self.device))
            sol = speed_of_light(
                problem.bytes_moved(), problem.flops(), target, dtype,
                measured_bandwidth_tbs=measure_copy_bandwidth(self.device),
                measured_matrix_tflops=measure_matmul_tflops(self.device),
            )
        except UnknownTargetError as exc:
            errors["sol"] = f"no speed-of-light: {exc}"
        eager_ms = measurements.get("eager", {}).get("median_ms")
        if sol is not None:
            if faster_than_light(sol, result.median_ms):
                raise Rejected(
                    RejectionClass.TIMING_ATTACK,
                    f"measured {result.median_ms:.4f} ms, under the speed-of-light floor of {sol.floor_ms:.4f} ms: "
                    "a time the hardware cannot reach is a measurement being fooled, not a record",
                )
            sol = with_measurement(sol, result.median_ms, baseline_ms=eager_ms)
        self.report.bench = {
            "device_name": torch.cuda.get_device_name(self.device),
            "sizes": problem.sizes,
            "measurements": measurements,
            "errors": errors,
            "sol": sol.model_dump() if sol is not None else None,
        }
        speedups = ", ".join(
            f"{measurements[name]['median_ms'] / result.median_ms:.2f}x vs {name}" for name in ("eager", "torch.compile")
            if name in measurements
        )
        pct = f", {sol.pct_of_sol:.0f}% of speed-of-light" if sol is not None and sol.pct_of_sol is not None else ""
        self.stage("timing", StageStatus.PASSED, f"median {result.median_ms:.4f} ms ({speedups}{pct})", started)


STAGES = ("static", "load", "correctness", "compile", "train_check", "timing")


#: Rejections after which the training check still runs when asked for: the kernel is safe
#: to run, only wrong, and how wrong it trains is evidence worth having.
NUMERICAL_REJECTIONS = frozenset(
    {RejectionClass.MISMATCH, RejectionClass.NAN_OR_INF, RejectionClass.LOW_PRECISION_ACCUMULATION,
     RejectionClass.INPUT_DISTRIBUTION, RejectionClass.SHAPE_SPECIALISATION}
)


def run(request: ChildRequest, report_path: Path) -> ChildReport:
    evaluation = _Evaluation(request, report_path)
    steps = (
        evaluation.static, evaluation.load, evaluation.correctness, evaluation.compile, evaluation.train,
        evaluation.timing,
    )
    for name, step in zip(STAGES, steps, strict=True):
        started = time.monotonic()
        try:
            step()
        except Rejected as exc:
            evaluation.report.rejection = exc.rejection
            evaluation.report.reason = str(exc)
            evaluation.stage(name, StageStatus.FAILED, str(exc), started)
            if name == "correctness" and exc.rejection in NUMERICAL_REJECTIONS and request.train_check:
                started = time.monotonic()
                try:
                    evaluation.train()
                except Rejected as train_exc:
                    evaluation.stage("train_check", StageStatus.FAILED, str(train_exc), started)
            break
    evaluation.report.finished = True
    evaluation.save()
    return evaluation.report


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    request = ChildRequest.model_validate_json(Path(argv[0]).read_text())
    run(request, Path(argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
