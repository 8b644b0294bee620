"""The verifier that runs inside the sandbox: static rules, load, correctness, compile.

Run as ``python -m kgen.evals.verifier.child REQUEST.json REPORT.json``. The report is
rewritten after every stage and every trial, so when the candidate kills
this process (segfault, illegal memory access, timeout) the parent still
has the evidence gathered up to that point.

Correctness runs trials in a fixed order, so a failure can be named by what
passed before it: the default sizes on normal inputs over every seed first,
then the other input distributions, then the other size sets; then the
ghost check (kernels switched off must change the output) and the cache
probe (new values in the same buffers must give new outputs).

Nothing here imports the backend's toolchain before the backend has prepared the
process: Triton's CPU interpreter is chosen by an environment variable read at import.
"""

from __future__ import annotations

import copy
import importlib
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from kgen.backends.base import KernelLaunch
from kgen.evals.checks.precision_probe import ACCUMULATION_PROBES as PROBE_DISTRIBUTIONS
from kgen.evals.problem.format import sizes_text
from kgen.evals.problem.policies import Precision
from kgen.evals.verdict import (
    Inconclusive,
    InconclusiveCause,
    Rejected,
    RejectionClass,
    SkipTrial,
    StageResult,
    StageStatus,
    Trial,
)
from kgen.evals.verifier.failure_diagnosis import (
    diagnose,
    explain,
    ill_conditioned,
    name_failure,
    probe_precision,
)
from kgen.evals.verifier.messages import (
    HEARTBEAT_FILE,
    STAGES,
    TIMING_ONLY_STAGES,
    ChildReport,
    ChildRequest,
)

#: Scalars a forward may read to the host per call (sizes, a flag); more is host computation.
MAX_HOST_READS = 16


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


class Evaluation:
    """One candidate's verification in this process: the state every stage shares, and what
    the stage modules (``call_sequence``, ``compile_pass``, ``failure_diagnosis``,
    ``ghost_check``, ``poison``, ``timing_stage``) ask of it: inputs, models, references and
    watched calls made the one way the trials make them."""

    def __init__(self, request: ChildRequest, report_path: Path):
        self.request = request
        self.report_path = report_path
        self.report = ChildReport()
        from kgen.backends.registry import backend_info, get_backend

        self.backend = get_backend(request.backend)
        self.backend.prepare_process(request.device)
        self.backend.report_progress(report_path.parent / HEARTBEAT_FILE)
        import torch  # after prepare_process: torch may import triton

        for toolchain in backend_info(request.backend).requires:
            # imported by kgen, so its first-import work is not the candidate's
            importlib.import_module(toolchain)

        from kgen.evals.checks.memory_report import DeviceMemory
        from kgen.evals.sandbox.guard import CandidateGuard

        self.torch = torch
        self.device = torch.device(request.device)
        self.memory = DeviceMemory(torch, self.device, request.problem_path)
        #: the sizes of the inputs made last: where their reference runs follows from them
        self.sizes_now: dict[str, int] = dict(request.size_sets[0])
        #: where the ghost check and the call sequence run: the first size set, or smaller sizes
        #: when the device cannot hold its reference (``_plan``)
        self.behaviour_sizes: dict[str, int] = dict(request.size_sets[0])
        self.generated: list[dict[str, int]] = []
        #: problem modules loaded at each set of sizes (``_problem``)
        self.problems: dict[str, Any] = {}
        self.module: Any = None
        self.first_launches: list[KernelLaunch] = []
        self._held_before_call: int | None = None
        self.candidate_path = Path(request.candidate_path)
        cache_env = backend_info(request.backend).cache_env
        cache = os.environ.get(cache_env or "", "") or str(Path(request.workdir) / f".{request.backend}")
        from kgen.backends.targets import resolve_target

        # Only for code that asks about the GPU: the emulation swaps a few torch names, which a
        # candidate could notice; one that never mentions CUDA has nothing to gain from it.
        uses_gpu_idioms = "cuda" in self.candidate_path.read_text(errors="replace")
        emulation = self.backend.device_emulation(
            request.device, resolve_target(request.targets[0]) if request.targets else None
        ) if uses_gpu_idioms else None
        self.guard = CandidateGuard(self.candidate_path, [Path(request.workdir), Path(cache), Path("/dev")], emulation)
        self.guard.install()
        self.passed_distributions: set[str] = set()
        self.failed_distributions: dict[str, float] = {}
        self.previous_outputs: list[Any] = []
        self.reference_aliases: set[int] = set()
        self.transfer = None
        self.precision = request.policies.precision
        # Library calls follow the precision policy too: cuDNN convolutions default to TF32 on
        # Ampere and later, which an fp32 problem judged as IEEE fp32 must not get by accident.
        tf32 = self.precision is Precision.TF32
        torch.backends.cudnn.allow_tf32 = tf32
        torch.backends.cuda.matmul.allow_tf32 = tf32
        self._warm_up()

    def _warm_up(self) -> None:
        """Start the libraries' own threads before any thread is counted against the candidate."""
        torch = self.torch
        (torch.randn(512, 512) @ torch.randn(512, 512)).sum().item()
        if self.device.type == "cuda":
            torch.ones(1, device=self.device).sum().item()
        self.backend.warm_up(str(self.device))

    def save(self) -> None:
        self.report.memory = self.memory.finish()
        _write(self.report, self.report_path)

    def stage(self, name: str, status: StageStatus, message: str, started: float, **evidence: Any):
        self.memory.stage_ended(name)
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
        if self.request.reference_self_test:
            self.stage("static", StageStatus.PASSED, "self-test: the reference as the candidate, kernel rules off", started)
            return
        violations = check_candidate_source(source, self.candidate_path.name, self.request.policies)
        if violations:
            # Every violation, not the first only: a fix for one should not meet the next one later.
            shown = [f"{v.message} (rule {v.rule}, line {v.line})" for v in violations[:STATIC_SHOWN]]
            more = len(violations) - len(shown)
            raise Rejected(
                violations[0].rejection,
                "\n".join(shown) + (f"\n... and {more} more" if more else ""),
                evidence={"violations": [v.model_dump(mode="json") for v in violations]},
            )
        self.stage("static", StageStatus.PASSED, "no forbidden construct found", started)

    def load(self) -> None:
        from kgen.backends.module_loading import CandidateLoadError

        started = time.monotonic()
        try:
            with self.guard:
                self.module = self.backend.load_candidate(self.candidate_path)
        except CandidateLoadError as exc:
            self.raise_guard_violation()
            if exc.__cause__ is not None:
                self._raise_if_interpreter_limit(exc.__cause__, "importing the candidate")
            raise Rejected(RejectionClass.LOAD_ERROR, str(exc)) from exc
        self.raise_guard_violation()
        model_new = getattr(self.module, "ModelNew", None)
        if not isinstance(model_new, type):
            raise Rejected(RejectionClass.NO_MODEL_NEW, f"{self.candidate_path.name} defines no class ModelNew")
        self.stage("load", StageStatus.PASSED, "ModelNew found", started)

    def raise_guard_violation(self) -> None:
        if self.guard.violations:
            v = self.guard.violations[0]
            raise Rejected(RejectionClass.SANDBOX_VIOLATION, f"the candidate tried a forbidden {v.action}: {v.detail}")

    # -- correctness ------------------------------------------------------------------
    def _plan(self) -> list[tuple[dict[str, int], str, int]]:
        """(sizes, distribution, seed) for every trial, in the order that names failures."""
        from kgen.evals.problem.format import load_problem, read_problem
        from kgen.evals.problem.input_distributions import distributions_for

        seeds = self.request.seeds
        first_sizes = self.request.size_sets[0]
        info = read_problem(self.request.problem_path)
        # Where the device cannot hold the fp64 reference, one trial runs at the full sizes and
        # the rest where it can (``DeviceMemory.scaled``): the report's memory notes say which.
        rest = self.memory.scaled(info, first_sizes) or first_sizes
        self.behaviour_sizes = rest
        plan = [(first_sizes, "normal", seeds[0])] + [(rest, "normal", seed) for seed in seeds[1:]]
        if self.request.distributions:
            self.torch.manual_seed(seeds[0])
            problem = load_problem(self.request.problem_path, rest)
            names = [d for d in distributions_for(problem.info, problem.get_inputs()) if d != "normal"]
            drawn = self.memory.distribution_sizes(info, rest) or rest
            probe_sizes = self.request.probe_sizes or drawn
            plan += [
                (probe_sizes if name in PROBE_DISTRIBUTIONS else drawn, name, seeds[(i + 1) % len(seeds)])
                for i, name in enumerate(names)
            ]
        for i, sizes in enumerate(self.request.size_sets[1:]):
            scaled = self.memory.scaled(info, sizes)
            if scaled is not None and sizes in self.generated:
                self.generated.append(scaled)
            plan.append((scaled or sizes, "normal", seeds[i % len(seeds)]))
        return plan

    def correctness(self) -> None:
        from kgen.evals.verifier.call_sequence import run_cache_probe, run_call_sequence
        from kgen.evals.verifier.ghost_check import run_ghost_check

        started = time.monotonic()
        self.worst = 0.0
        self.problems: dict[str, Any] = {}
        self.generated = [self.request.size_sets[i] for i in self.request.generated_size_sets]
        plan = self._plan()
        generated = self.generated
        fallbacks = {
            repr(sorted(self.request.size_sets[i].items())): sets
            for i, sets in self.request.fallback_size_sets.items()
        }
        for sizes, distribution, seed in plan:
            skipped = self._run_trial(sizes, distribution, seed, generated=sizes in generated)
            if skipped and distribution == "normal":
                # A combined move the reference cannot run: each constant's move alone.
                for alone in fallbacks.get(repr(sorted(sizes.items())), []):
                    self._run_trial(alone, distribution, seed, generated=True)
        first = self.problem_at(self.request.size_sets[0])
        behaviour = self.problem_at(self.behaviour_sizes)
        if not self.request.reference_self_test:
            run_ghost_check(self, behaviour, self.request.seeds[0])
        # The plain calls before the cache probe: both run uninstrumented, and a candidate that
        # is honest only while watched is then named for that, not for what its cheat looks like.
        sequence = run_call_sequence(self, behaviour, self.request.seeds[0] + 31337)
        # at the full sizes always: it needs no reference, and a cache keyed by size is caught there
        run_cache_probe(self, first, self.request.seeds[-1])
        self.stage(
            "correctness",
            StageStatus.PASSED,
            f"{len(self.report.trials)} trial(s) matched the fp64 reference over {len(self.request.seeds)} seed(s), "
            f"{len({d for _, d, _ in plan})} input distribution(s) and {len({repr(t.sizes) for t in self.report.trials})} "
            f"size set(s); worst error {self.worst:.2f}x of tolerance; kernels switched off change the output; "
            f"new inputs in old buffers give new outputs; {sequence.summary}",
            started,
            seeds=self.request.seeds,
            size_sets=self.request.size_sets,
            distributions=sorted({d for _, d, _ in plan}),
            worst_error_over_tolerance=self.worst,
            weights=self.transfer.model_dump() if self.transfer is not None else None,
            call_sequence=sequence.model_dump(),
        )

    def problem_at(self, sizes: dict[str, int]):
        from kgen.evals.problem.format import load_problem

        key = repr(sorted(sizes.items()))
        if key not in self.problems:
            self.problems[key] = load_problem(self.request.problem_path, sizes)
        return self.problems[key]

    def _run_trial(self, sizes: dict[str, int], distribution: str, seed: int, generated: bool) -> bool:
        """One trial; True when it was skipped (recorded in the report, never held against the candidate)."""
        from kgen.evals.problem.format import ProblemError

        try:
            problem = self.problem_at(sizes)
            trial = self.trial(problem, seed, distribution, generated=generated)
        except ProblemError as exc:
            if not generated:
                raise
            self.report.skipped.append(f"sizes {sizes_text(sizes)}: the problem cannot be built at them ({exc})")
            return True
        except SkipTrial as exc:
            self.report.skipped.append(str(exc))
            return True
        except Rejected as exc:
            if exc.rejection is RejectionClass.MISMATCH and distribution not in PROBE_DISTRIBUTIONS:
                probe_precision(self, self.problem_at(sizes), seed, exc)
            first = self.request.size_sets[0]
            if (exc.rejection in (RejectionClass.RUNTIME_ERROR, RejectionClass.CONSTRUCTION_ERROR)
                    and sizes != first and "normal" in self.passed_distributions):
                raise Rejected(
                    RejectionClass.SHAPE_SPECIALISATION,
                    f"right at sizes {sizes_text(first)}, but at sizes {sizes_text(sizes)} {exc}",
                ) from exc
            raise
        self.worst = max([self.worst, *(o.rel_l2_error / max(o.tolerance_rel_l2, 1e-300) for o in trial.outputs)])
        del trial
        self.memory.free_between_trials()
        return False

    def to_device(self, value: Any, upcast: bool = False, device: Any = None) -> Any:
        torch = self.torch
        if isinstance(value, torch.Tensor):
            value = value.to(self.device if device is None else device)
            if upcast and value.is_floating_point():
                value = value.to(torch.float64)
        return value

    def inputs_for(self, problem, seed: int, distribution: str) -> list[Any]:
        """The trial's inputs on the device, laid out exactly as ``get_inputs()`` laid them out."""
        from kgen.evals.problem.input_distributions import (
            apply_distribution,
            distribution_generator,
        )
        from kgen.evals.problem.layout import copy_inputs

        self.memory.decision(problem.sizes)  # a problem this device cannot hold ends here, before allocating
        self.sizes_now = dict(problem.sizes)
        self.torch.manual_seed(seed)
        if distribution == "normal" and self.device.type == "cuda":
            # Drawn on the device from the same seed (reproducible there), not on the host and
            # copied over: at the default sizes a host draw of every input set took seconds per
            # candidate, at full size minutes. The other distributions transform on the host.
            # A get_inputs() the device cannot run (a host generator, numpy) is drawn on the host.
            try:
                with self.torch.device(self.device):
                    return copy_inputs(problem.get_inputs(), self.device)
            except (RuntimeError, TypeError, ValueError):
                self.torch.manual_seed(seed)
        inputs = apply_distribution(distribution, problem.get_inputs(), distribution_generator(seed, distribution))
        return copy_inputs(inputs, self.device)

    def models(self, problem, seed: int, fresh_weights: bool = True):
        """The reference and the candidate, built from one seed; with ``fresh_weights`` the
        reference's state is re-drawn and loaded into the candidate (``module_state``)."""
        from kgen.evals.checks.module_state import WeightTransfer, rerandomise, transfer_weights

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
            self.raise_guard_violation()
            self._raise_if_interpreter_limit(exc, "ModelNew(*init_inputs)")
            raise Rejected(
                RejectionClass.CONSTRUCTION_ERROR,
                f"ModelNew(*init_inputs) raised {_exception_line(exc, self.request.candidate_path)}",
            ) from exc
        self.transfer = WeightTransfer(how="none")
        if isinstance(candidate, torch.nn.Module):
            # KernelBench semantics: both judged in the mode the reference is constructed in
            # (training: BatchNorm normalises with the batch's statistics).
            candidate = candidate.to(self.device).train(reference.training)
            original = copy.deepcopy(reference.state_dict())
            if fresh_weights:
                rerandomise(reference, torch.Generator().manual_seed(seed + 104729))
            self.transfer = transfer_weights(reference, candidate)
            if not self.transfer.transferred and fresh_weights:
                # Nothing to load them into: judge both with the seed's weights, as built.
                reference.load_state_dict(original)
        return reference, candidate

    def references(self, reference, inputs: list[Any]) -> tuple[list[Any], list[Any]]:
        """The reference's outputs in the problem's own dtypes and in fp64; ``self.reference_aliases``
        names the outputs that share storage with an input (a view the candidate may return too)."""
        from kgen.evals.checks.candidate_call import aliased_outputs
        from kgen.evals.problem.format import flatten_outputs
        from kgen.evals.problem.layout import copy_inputs

        where = self.memory.reference_device(self.sizes_now)
        on_host = where != self.device
        with self.torch.no_grad():
            # With the reference on the host (the device has no room for it and its fp64 twin),
            # a host copy runs, and its state (running statistics) is handed back after.
            model = copy.deepcopy(reference).to(where) if on_host else reference
            args = copy_inputs(inputs, where if on_host else None)
            native = flatten_outputs(model(*args))
            self.reference_aliases = set(aliased_outputs(native, args))
            del args
            ref64 = flatten_outputs(
                copy.deepcopy(model).double()(*[self.to_device(x, upcast=True, device=where) for x in inputs])
            )
            if on_host:
                reference.load_state_dict(model.state_dict())
        return native, ref64

    def runtime_error(self, exc: BaseException, what: str) -> Rejected:
        """The rejection for an exception the candidate raised; raises ``Inconclusive`` instead
        when it is the CPU interpreter, not the kernel, that cannot go on."""
        self._raise_if_interpreter_limit(exc, what)
        return Rejected(
            RejectionClass.RUNTIME_ERROR,
            f"forward raised {_exception_line(exc, self.request.candidate_path)} ({what})",
        )

    def _raise_if_cpu_fallback(self, what: str) -> None:
        """A forward that launched nothing on the CPU, from a file with a device-tested CPU
        fallback (``if x.device.type == "cpu": return torch...``), took the branch a GPU never
        takes: only a GPU can judge its kernels."""
        from kgen.evals.static_rules import cpu_fallback_lines

        if self.device.type != "cpu":
            return
        lines = cpu_fallback_lines(self.candidate_path.read_text())
        if lines:
            raise Inconclusive(
                InconclusiveCause.NEEDS_GPU,
                f"needs a GPU: on the CPU the forward takes its CPU fallback (line {lines[0]}, under a device "
                f"test) and launches no kernel; a GPU runs the kernels ({what})",
            )

    def _raise_if_interpreter_limit(self, exc: BaseException, what: str) -> None:
        from kgen.evals.checks.memory_report import is_out_of_memory

        if is_out_of_memory(exc):
            raise self.memory.whose_oom(exc, what, by_candidate=True, held_before=self._held_before_call) from exc
        limit = self.backend.interpreter_limit(exc) if self.device.type == "cpu" else None
        if limit is not None:
            raise Inconclusive(
                InconclusiveCause.NEEDS_GPU,
                f"needs a GPU: {limit} ({_exception_line(exc, self.request.candidate_path)}; {what})",
            ) from exc

    def call(self, candidate, inputs, poison_like, what: str, execute: bool = True, aliases: bool = True):
        from kgen.evals.checks.candidate_call import call_candidate

        self._held_before_call = self.memory.held_bytes()
        evidence = call_candidate(
            candidate, inputs, self.backend, self.guard, self.device, poison_like, execute_kernels=execute,
            policies=self.request.policies, pristine_device=self.memory.reference_device(self.sizes_now),
        )
        self.raise_guard_violation()
        if evidence.error is not None:
            raise self.runtime_error(evidence.error, what)
        if self.request.reference_self_test:
            evidence.compute_ops, evidence.host_reads = {}, 0
        elif execute and not evidence.launches:
            self._raise_if_cpu_fallback(what)
            raise Rejected(RejectionClass.NO_KERNEL_LAUNCH, f"forward launched no {self.backend.name} kernel ({what})")
        if evidence.compute_ops:
            ops = evidence.torch_ops.describe()
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
        if execute and evidence.host_reads > MAX_HOST_READS:
            raise Rejected(
                RejectionClass.NOT_A_KERNEL,
                f"forward read {evidence.host_reads} scalars to the host (.item(), int(), float(); at most "
                f"{MAX_HOST_READS} are allowed for sizes and flags): that is host computation, not a kernel ({what})",
            )
        if evidence.overruns:
            raise Rejected(
                RejectionClass.OUT_OF_BOUNDS_WRITE,
                f"wrote past the end of a buffer it allocated: {'; '.join(evidence.overruns)} ({what})",
            )
        if aliases and execute:
            self.check_aliases(evidence.aliased_outputs, what)
        return evidence

    def check_aliases(self, aliased: dict[int, int], what: str) -> None:
        own = {i: j for i, j in aliased.items() if i not in self.reference_aliases}
        if own:
            i, j = next(iter(own.items()))
            raise Rejected(
                RejectionClass.OUTPUT_ALIASES_INPUT,
                f"output {i} shares storage with input {j} (the reference returns a new tensor): a caller "
                f"that writes to one corrupts the other ({what})",
            )

    def trial(self, problem, seed: int, distribution: str, generated: bool = False) -> Trial:
        from kgen.evals.checks.compare import (
            ComparisonFailure,
            check_structure,
            compare_output,
            failure_of,
        )
        from kgen.evals.checks.poison import check_unwritten
        from kgen.evals.problem.input_distributions import SELF_CHECKED, representable

        started = time.monotonic()
        what = f"seed {seed}, {distribution} inputs, sizes {sizes_text(problem.sizes)}"
        inputs = self.inputs_for(problem, seed, distribution)
        reference, candidate = self.models(problem, seed)
        if generated:
            try:
                self.references(reference, inputs)
            except Exception as exc:  # noqa: BLE001 - the problem's own limits, not the candidate's
                raise SkipTrial(f"{what}: the reference cannot run these made-up sizes ({type(exc).__name__}: {exc})") from exc
        trial = Trial(seed=seed, sizes=problem.sizes, distribution=distribution)
        self.report.trials.append(trial)
        self.save()  # if the candidate kills the process now, the parent knows where
        # The candidate runs before the reference: no reference output can be lying in freed memory.
        before = self.call(candidate, inputs, self.previous_outputs, what + ", before the reference", aliases=False)
        native, ref64 = self.references(reference, inputs)
        unrepresentable = [i for i, (r64, rn) in enumerate(zip(ref64, native, strict=True)) if not representable(r64, rn.dtype)]
        if not unrepresentable and (distribution in SELF_CHECKED or generated):
            # A distribution or made-up size set that changes the problem's conditioning (a norm
            # over one element, a mean shifted by hundreds of sigmas) is fair only where the
            # problem's own reference, in its own dtypes, still meets the tolerance, and where
            # one fp32 rounding of every input moves the answer by less than half of it.
            own = [compare_output(i, rn, r64, precision=self.precision) for i, (rn, r64) in enumerate(zip(native, ref64, strict=True))
                   if isinstance(rn, self.torch.Tensor) and rn.is_floating_point()]
            unrepresentable = [c.index for c in own if not c.passed] or ill_conditioned(self, reference, inputs, native, ref64)
        if unrepresentable:
            self.report.trials.remove(trial)
            raise SkipTrial(
                f"{what}: output(s) {unrepresentable} cannot be computed in their dtype to the tolerance at "
                "these inputs (the problem's own reference misses it too)"
            )
        # Judged now that the reference's own aliases (a view it returns) are known.
        self.check_aliases(before.aliased_outputs, what + ", before the reference")
        after = self.call(candidate, inputs, native, what + ", after the reference")
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
            check_unwritten(self, outputs, trial, what)
            trial.outputs = [
                compare_output(i, out, r64, rn, precision=self.precision)
                for i, (out, r64, rn) in enumerate(zip(outputs, ref64, native, strict=True))
            ]
            failure = failure_of(trial.outputs)
            if failure is not None:
                trial.seconds = time.monotonic() - started
                self.save()
                failure = explain(self, failure, trial, outputs, ref64, reference, inputs)
                diagnosis = diagnose(self, problem, seed, inputs, ref64, what, failure)
                raise Rejected(*(diagnosis or name_failure(self, failure, trial, outputs, what)))
        trial.passed = True
        trial.seconds = time.monotonic() - started
        self.passed_distributions.add(distribution)
        # kept for the next trial's poison shapes and stale-output diagnosis; on the host when
        # the device has no room for the reference (its outputs are gigabytes)
        pristine = self.memory.reference_device(self.sizes_now)
        self.previous_outputs = [o.to(pristine) if isinstance(o, self.torch.Tensor) else o for o in after.outputs]
        self.save()
        return trial

    # -- compile and training -----------------------------------------------------------
    def compile(self) -> None:
        from kgen.backends.targets import resolve_target

        names = [*self.request.targets, *self.request.also_compile_for]
        if not names:
            return
        if self.backend.compiles_from_calls:
            from kgen.evals.verifier.compile_pass import compile_from_calls

            compile_from_calls(self)
            return
        from kgen.evals.verifier.compile_pass import record_compile_reports

        started = time.monotonic()
        misfits = record_compile_reports(
            self, [resolve_target(n) for n in self.request.targets],
            [resolve_target(n) for n in self.request.also_compile_for], self._compile_launches(),
        )
        sizes = self.request.compile_sizes or self.request.size_sets[0]
        self.stage(
            "compile",
            StageStatus.PASSED,
            f"{len(self.report.kernels)} kernel build(s) for {', '.join(names)} at sizes {sizes_text(sizes)}"
            + (f"; does not compile for {'; '.join(misfits)}" if misfits else ""),
            started,
        )

    def _compile_launches(self) -> list[KernelLaunch]:
        """The launches the problem's default sizes make, recorded with execution switched off
        on storage-less "meta" tensors: the real launch configuration even for a KernelBench
        file whose default inputs would not fit in this machine's memory. A candidate that
        cannot run on meta tensors is compiled at the launches its trials made."""
        from kgen.evals.problem.format import load_problem

        sizes = self.request.compile_sizes
        if not sizes or sizes == self.request.size_sets[0]:
            return self.first_launches
        torch = self.torch
        try:
            problem = load_problem(self.request.problem_path, sizes)
            torch.manual_seed(self.request.seeds[0])
            with torch.device("meta"):
                inputs = problem.get_inputs()
                candidate = self.module.ModelNew(*problem.get_init_inputs())
            with self.guard, torch.no_grad(), self.backend.record_launches(execute=False) as log:
                candidate(*inputs)
        except Exception:  # noqa: BLE001 - meta tensors are a shortcut, not a requirement
            return self.first_launches
        return list(log.launches) or self.first_launches

    def timing(self) -> None:
        from kgen.evals.verifier.timing_stage import run_timing

        run_timing(self)

    def train(self) -> None:
        from kgen.evals.problem.format import read_problem
        from kgen.evals.verifier.train_check import run_train_check

        if not self.request.train_check:
            return
        started = time.monotonic()
        info = read_problem(self.request.problem_path)
        with self.guard:
            result = run_train_check(info, self.module.ModelNew, self.device, seed=self.request.seeds[0])
        self.raise_guard_violation()
        self.report.train_check = result.model_dump()
        if not result.applicable:
            self.stage("train_check", StageStatus.SKIPPED, result.message, started)
            return
        if not result.passed:
            raise Rejected(RejectionClass.TRAINING_DIVERGENCE, result.message)
        self.stage("train_check", StageStatus.PASSED, result.message, started)


#: how many static rule violations a rejection reason lists (all of them are in the stage's evidence)
STATIC_SHOWN = 20


#: Rejections after which the training check still runs when asked for: the kernel is safe
#: to run, only wrong, and how wrong it trains is evidence worth having.
NUMERICAL_REJECTIONS = frozenset(
    {RejectionClass.MISMATCH, RejectionClass.NAN_OR_INF, RejectionClass.LOW_PRECISION_ACCUMULATION,
     RejectionClass.INPUT_DISTRIBUTION, RejectionClass.SHAPE_SPECIALISATION}
)


def run(request: ChildRequest, report_path: Path) -> ChildReport:
    from kgen.backends.registry import backend_info
    from kgen.evals.verifier.compile_pass import compiled_not_run

    evaluation = Evaluation(request, report_path)
    steps = (
        evaluation.static, evaluation.load, evaluation.correctness, evaluation.compile, evaluation.train,
        evaluation.timing,
    )
    stages = list(zip(STAGES, steps, strict=True))
    if evaluation.device.type == "cpu" and not backend_info(request.backend).runs_on_cpu:
        # kernels that cannot run here: compiled from the candidate's calls, "compiled, not run"
        stages = [("static", evaluation.static), ("load", evaluation.load),
                  ("compile", lambda: compiled_not_run(evaluation))]
    for name, step in stages:
        if request.timing_only and name not in TIMING_ONLY_STAGES:
            continue
        started = time.monotonic()
        try:
            step()
        except Rejected as exc:
            evaluation.report.rejection = exc.rejection
            evaluation.report.reason = str(exc)
            evaluation.stage(name, StageStatus.FAILED, str(exc), started, **exc.evidence)
            if name == "correctness" and exc.rejection in NUMERICAL_REJECTIONS and request.train_check:
                started = time.monotonic()
                try:
                    evaluation.train()
                except Rejected as train_exc:
                    evaluation.stage("train_check", StageStatus.FAILED, str(train_exc), started)
            break
        except Inconclusive as exc:
            evaluation.report.inconclusive = exc.cause
            evaluation.report.reason = str(exc)
            evaluation.stage(name, StageStatus.SKIPPED, f"inconclusive: {exc}", started)
            break
        except Exception as exc:
            from kgen.evals.checks.memory_report import is_out_of_memory

            if not is_out_of_memory(exc):
                raise
            # the candidate's own calls are judged inside `_call`: what reaches here is kgen's
            oom = evaluation.memory.whose_oom(exc, f"during {name}", by_candidate=False, held_before=None)
            evaluation.report.inconclusive, evaluation.report.reason = oom.cause, str(oom)
            evaluation.stage(name, StageStatus.SKIPPED, f"inconclusive: {oom}", started)
            break
    evaluation.report.finished = True
    evaluation.save()
    return evaluation.report


def main(argv: list[str] | None = None) -> int:
    from kgen.evals.sandbox.lifecycle import start_parent_watchdog

    start_parent_watchdog()  # a child whose kgen is gone must not run on, holding the GPU
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--wait":  # a spare started ahead (worker_pool.py): start up, then wait
        from kgen.evals.sandbox.worker_pool import wait_for_arguments

        argv = wait_for_arguments(argv[1:])
        if argv is None:
            return 0
    request = ChildRequest.model_validate_json(Path(argv[0]).read_text())
    run(request, Path(argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
