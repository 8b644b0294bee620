"""What the prompt templates are given, and one render function per task.

The templates in ``prompts/`` only format; every decision about what goes in a
prompt is made here, in typed models: which examples and guidance notes fit,
how a verifier result reads to a model that must fix it, which figures of a
measured parent matter. A template that asks for a field these models do not
carry fails at render time (``StrictUndefined``), never by omission.

Prompt size. A prompt must leave the model room to think and answer, so each
task prompt is kept near :data:`PROMPT_CHAR_BUDGET` characters (about 10k
tokens at ~4 characters a token, under a 12k-token ceiling):

* the parts that cannot be cut come first: the reference source, the parent or
  rejected candidate source(s) (each capped at :data:`MAX_SOURCE_CHARS`, cut at
  a line with a marker; real problems and kernels are far shorter), the
  measurements and the rejection;
* guidance notes next: at most :data:`MAX_GUIDANCE` notes of at most
  :data:`MAX_GUIDANCE_CHARS` each, in the order given (most relevant first);
* examples last: at most :data:`MAX_EXAMPLES` kernels of at most
  :data:`MAX_EXAMPLE_CHARS` each, in the order given, dropped once what is left
  of the budget is under :data:`MIN_EXAMPLE_CHARS`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from kgen.agent.candidates import first_line, kernel_lines
from kgen.agent.llm.templates import render_template
from kgen.backends.registry import UnknownBackendError, backend_info
from kgen.backends.targets import resolve_target
from kgen.evals.problem.catalog import resolve_problem
from kgen.evals.problem.format import sizes_text
from kgen.evals.result import EvalResult
from kgen.evals.verdict import StageStatus, Trial

if TYPE_CHECKING:
    from kgen.agent.candidates import CandidateIdentity
    from kgen.backends.targets import HardwareTarget
    from kgen.evals.problem.format import ProblemInfo

#: Characters a whole task prompt aims to stay under (~10k tokens).
PROMPT_CHAR_BUDGET = 40_000
#: Longest reference / parent / candidate source shown whole.
MAX_SOURCE_CHARS = 16_000
MAX_EXAMPLES = 3
MAX_EXAMPLE_CHARS = 8_000
#: An example cut shorter than this teaches little: drop it instead.
MIN_EXAMPLE_CHARS = 1_500
MAX_GUIDANCE = 6
MAX_GUIDANCE_CHARS = 1_500
#: Room the templates' own prose takes, counted against the budget.
TEMPLATE_OVERHEAD_CHARS = 6_000
#: Caps on the verifier's words in a fix prompt: the reason and the evidence summary.
MAX_REASON_CHARS = 400
MAX_EVIDENCE_CHARS = 600
#: Caps on the static rules' violations in a fix prompt: each one's line, and all of them
#: together; past the total the rest are counted and named by rule and line, never dropped
#: silently (a fix for the first violation alone meets the second one next generation).
MAX_VIOLATION_CHARS = 300
MAX_VIOLATIONS_CHARS = 6_000

class PromptModel(BaseModel):
    model_config = ConfigDict(frozen=True)


class PromptTarget(PromptModel):
    """The hardware figures a kernel author sizes tiles and grids by."""

    name: str
    display_name: str
    vendor: str
    architecture: str
    compiler_target: str
    sm_count: int
    warp_size: int
    memory_gb: float
    memory_bandwidth_tbs: float
    bf16_tflops: float | None
    fp32_tflops: float
    shared_memory_per_sm_kb: int
    l2_mb: float

    @classmethod
    def from_target(cls, target: HardwareTarget) -> PromptTarget:
        return cls(
            name=target.name,
            display_name=target.display_name,
            vendor=target.vendor,
            architecture=target.architecture,
            compiler_target=target.compiler_target,
            sm_count=target.sm_count,
            warp_size=target.warp_size,
            memory_gb=target.memory_gb,
            memory_bandwidth_tbs=target.memory_bandwidth_tbs,
            bf16_tflops=target.bf16_tflops,
            fp32_tflops=target.fp32_tflops,
            shared_memory_per_sm_kb=target.shared_memory_per_sm_kb,
            l2_mb=target.l2_mb,
        )


class PromptExample(PromptModel):
    """A verified kernel from the knowledge base, shown as a worked example."""

    source: str
    problem: str
    backend: str
    target: str
    #: what the kernel is and how it works, in a sentence or two ("" if unknown)
    description: str = ""
    #: its measured timing in one line, e.g. "0.152 ms on h100, 1.9x vs torch.compile" ("" if never timed)
    summary: str = ""


class PromptGuidance(PromptModel):
    """One optimisation note from the knowledge base."""

    title: str
    text: str


class Measurements(PromptModel):
    """What was measured for a verified kernel; None where it was not (no GPU, no byte model)."""

    time_ms: float | None = None
    eager_ms: float | None = None
    compile_ms: float | None = None
    speedup_eager: float | None = None
    speedup_compile: float | None = None
    #: baselines ("eager", "torch.compile") whose timing interval overlaps the kernel's: the
    #: ratio is noise, not a speedup, and the prompt says "≈ same speed"
    same_speed_as: list[str] = Field(default_factory=list)
    pct_sol: float | None = None
    achieved_tbs: float | None = None
    achieved_tflops: float | None = None
    #: the roofline floor and what bounds it ("memory" / "compute")
    floor_ms: float | None = None
    bound: str | None = None
    device: str | None = None
    #: one line per compiled kernel: registers, spills, shared memory, warps, stages
    kernels: list[str] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _speedups_from_times(cls, data: Any) -> Any:
        """Speedups follow from the times when only the times are given."""
        if isinstance(data, dict):
            data = dict(data)
            kernel_ms = data.get("time_ms")
            for speedup, baseline in (("speedup_eager", "eager_ms"), ("speedup_compile", "compile_ms")):
                if data.get(speedup) is None:
                    data[speedup] = _ratio(data.get(baseline), kernel_ms)
        return data

    @property
    def timed(self) -> bool:
        return self.time_ms is not None


class ParentKernel(PromptModel):
    """A verified kernel the model is asked to improve or to cross with another."""

    source: str
    measurements: Measurements = Field(default_factory=Measurements)
    #: what it does differently (a docstring line, a note from the search) ("" if none)
    description: str = ""


class Rejection(PromptModel):
    """The verifier's verdict on a candidate, short enough to put in a prompt."""

    rejection_class: str
    reason: str
    #: a compact summary of the evidence (failing outputs, crash output, compile errors)
    evidence: str = ""
    #: every static-rule violation, one line each (the last may count those past the cap)
    violations: list[str] = Field(default_factory=list)


class TaskContext(PromptModel):
    """Everything every task prompt shows: the problem, the backend, the target, the knowledge."""

    problem_name: str
    problem_description: str = ""
    problem_source: str
    #: a name from ``kgen.backends.registry``
    backend: str
    target: PromptTarget
    #: input dtypes the kernel must handle, e.g. ["bf16"] (empty: whatever the reference uses)
    dtypes: list[str] = Field(default_factory=list)
    #: most relevant first; trimmed to the prompt budget at render time
    examples: list[PromptExample] = Field(default_factory=list)
    guidance: list[PromptGuidance] = Field(default_factory=list)

    @field_validator("backend", mode="before")
    @classmethod
    def _known_backend(cls, value: Any) -> Any:
        try:
            return backend_info(value).name if isinstance(value, str) else value
        except UnknownBackendError as exc:
            raise ValueError(str(exc)) from exc

    @classmethod
    def from_problem(
        cls,
        problem: ProblemInfo,
        backend: str,
        target: HardwareTarget | PromptTarget,
        *,
        dtypes: Sequence[str] = (),
        examples: Sequence[PromptExample] = (),
        guidance: Sequence[PromptGuidance] = (),
    ) -> TaskContext:
        """The context for a catalog (or KernelBench) problem: its source is read from its file."""
        prompt_target = target if isinstance(target, PromptTarget) else PromptTarget.from_target(target)
        return cls(
            problem_name=problem.name,
            problem_description=problem.description,
            problem_source=Path(problem.path).read_text(),
            backend=backend,
            target=prompt_target,
            dtypes=list(dtypes),
            examples=list(examples),
            guidance=list(guidance),
        )


# ----------------------------------------------------------------------------------------
# Fitting the prompt budget
# ----------------------------------------------------------------------------------------


def cap_source(source: str, limit: int = MAX_SOURCE_CHARS) -> str:
    """``source`` cut at a line boundary under ``limit`` characters, saying how much was cut."""
    if len(source) <= limit:
        return source
    kept = source[:limit].rsplit("\n", 1)[0]
    dropped = source[len(kept):].count("\n")
    return f"{kept}\n# ... ({dropped} more lines not shown)\n"


def _clip(text: str, limit: int, one_line: bool = False) -> str:
    """``text`` under ``limit`` characters; ``one_line`` folds it onto one line first."""
    text = " ".join(text.split()) if one_line else text.strip()
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


def _fit(ctx: TaskContext, fixed_chars: int) -> TaskContext:
    """``ctx`` with sources capped and guidance and examples trimmed to the budget (module doc)."""
    problem_source = cap_source(ctx.problem_source)
    room = PROMPT_CHAR_BUDGET - TEMPLATE_OVERHEAD_CHARS - fixed_chars - len(problem_source)
    guidance: list[PromptGuidance] = []
    for note in ctx.guidance[:MAX_GUIDANCE]:
        note = note.model_copy(update={"text": _clip(note.text, MAX_GUIDANCE_CHARS)})
        cost = len(note.title) + len(note.text)
        if cost > room:
            break
        guidance.append(note)
        room -= cost
    examples: list[PromptExample] = []
    for example in ctx.examples[:MAX_EXAMPLES]:
        limit = min(MAX_EXAMPLE_CHARS, room - len(example.description) - len(example.summary))
        if limit < MIN_EXAMPLE_CHARS:
            break
        example = example.model_copy(update={"source": cap_source(example.source, limit)})
        examples.append(example)
        room -= len(example.source) + len(example.description) + len(example.summary)
    return ctx.model_copy(
        update={"problem_source": problem_source, "guidance": guidance, "examples": examples}
    )


def _capped_parent(parent: ParentKernel) -> ParentKernel:
    return parent.model_copy(update={"source": cap_source(parent.source)})


def _parent_chars(parent: ParentKernel) -> int:
    return len(parent.source) + len(parent.description) + 80 * (len(parent.measurements.kernels) + 8)


# ----------------------------------------------------------------------------------------
# Rendering
# ----------------------------------------------------------------------------------------


def _render(name: str, **context: Any) -> str:
    """A template's text, ending in exactly one newline."""
    return render_template(name, **context).rstrip() + "\n"


def render_system(backend: str) -> str:
    """The system prompt: the role, the candidate contract and the verifier's hard rules. The
    backend's own advice is ``prompts/backend_<name>.j2``; its label and the modules a
    candidate may import come from the registry, so a new backend edits no template here."""

    try:
        info = backend_info(backend)
    except UnknownBackendError as exc:
        raise ValueError(f"no prompts for backend {backend!r}: {exc}") from exc
    return _render("system", backend=info.name, label=info.label,
                   candidate_imports=list(info.candidate_imports))


def render_generate(ctx: TaskContext) -> str:
    """Ask for a new kernel for the problem on the target."""
    return _render("generate", ctx=_fit(ctx, 0))


def render_improve(ctx: TaskContext, parent: ParentKernel) -> str:
    """Ask for a faster variant of a verified parent, saying what it changes."""
    parent = _capped_parent(parent)
    return _render("improve", ctx=_fit(ctx, _parent_chars(parent)), parent=parent)


def render_fix(ctx: TaskContext, candidate_source: str, rejection: Rejection) -> str:
    """Ask for a corrected version of a rejected candidate, given the verifier's verdict."""
    source = cap_source(candidate_source)
    fixed = (len(source) + len(rejection.reason) + len(rejection.evidence)
             + sum(len(line) for line in rejection.violations))
    return _render("fix", ctx=_fit(ctx, fixed), candidate_source=source, rejection=rejection)


def render_crossover(ctx: TaskContext, a: ParentKernel, b: ParentKernel) -> str:
    """Ask for one kernel that combines the strengths of two verified parents."""
    a, b = _capped_parent(a), _capped_parent(b)
    return _render("crossover", ctx=_fit(ctx, _parent_chars(a) + _parent_chars(b)), a=a, b=b)


# ----------------------------------------------------------------------------------------
# From evaluation results
# ----------------------------------------------------------------------------------------


def rejection_from_result(result: EvalResult) -> Rejection:
    """The verifier's verdict in a few hundred characters: the class, the reason, the evidence
    a model needs to find its bug (which outputs were wrong and by how much, what passed
    before the failure, the crash output, the compile errors)."""
    if result.passed:
        raise ValueError(f"candidate {result.candidate} passed verification: there is no rejection to fix")
    failed = next((s for s in reversed(result.stages) if s.status is StageStatus.FAILED), None)
    reason = result.reason or (failed.message if failed else "") or "rejected without a stated reason"
    violations = violation_lines(failed.evidence.get("violations") if failed else None)
    if violations:
        # the reason is the same list folded onto one line and cut at MAX_REASON_CHARS:
        # the violations go whole, one per line, instead
        count = len(failed.evidence["violations"])
        reason = f"the static rules found {count} violation(s) in the source, listed below"
    evidence: list[str] = [f"judged under {result.policies.describe()}"]
    if failed is not None:
        evidence.append(f"failed at stage {failed.name}")
        evidence.extend(_stage_evidence(failed.evidence))
    evidence.extend(_trial_evidence(result.trials))
    evidence.extend(
        f"kernel {k.kernel} does not compile for {k.target}: {first_line(k.error or 'unknown error')}"
        for k in result.kernels if not k.ok
    )
    check = result.train_check or {}
    if check.get("applicable") and check.get("passed") is False and check.get("message"):
        evidence.append(f"training check: {check['message']}")
    rejection_class = result.outcome
    return Rejection(
        rejection_class=rejection_class,
        reason=_clip(reason, MAX_REASON_CHARS, one_line=True),
        evidence=_clip("; ".join(evidence), MAX_EVIDENCE_CHARS, one_line=True),
        violations=violations,
    )


def violation_lines(violations: Any) -> list[str]:
    """One line per static-rule violation recorded on a failed stage (``evidence["violations"]``,
    each a dumped ``RuleViolation``): its message with rule and line, each under
    :data:`MAX_VIOLATION_CHARS`, all under :data:`MAX_VIOLATIONS_CHARS`; the ones past the
    total are counted in a last line that names their rules and lines."""
    if not isinstance(violations, list):
        return []
    lines: list[str] = []
    used = 0
    for number, violation in enumerate(violations):
        if not isinstance(violation, dict):
            continue
        line = _clip(f"{violation.get('message', '')} (rule {violation.get('rule', '?')}, "
                     f"line {violation.get('line', '?')})", MAX_VIOLATION_CHARS, one_line=True)
        if used + len(line) > MAX_VIOLATIONS_CHARS:
            lines.append(_unshown_violations([v for v in violations[number:] if isinstance(v, dict)]))
            break
        lines.append(line)
        used += len(line)
    return lines


def _unshown_violations(rest: list[dict[str, Any]]) -> str:
    """The violations past the cap in one line: how many, and each rule's lines as ranges
    (``monkey-patch at lines 51-200``), so the model still knows where every one is."""
    by_rule: dict[str, list[int]] = {}
    for violation in rest:
        line = violation.get("line")
        by_rule.setdefault(str(violation.get("rule", "?")), []).append(line if isinstance(line, int) else 0)
    where = "; ".join(f"{rule} at line(s) {_ranges(sorted(set(numbers)))}" for rule, numbers in by_rule.items())
    return f"{len(rest)} more violation(s) not shown for length: {where}"


def _ranges(numbers: list[int]) -> str:
    """``[3, 4, 5, 9]`` -> ``"3-5, 9"``."""
    spans: list[str] = []
    start = previous = numbers[0]
    for number in [*numbers[1:], None]:
        if number is not None and number == previous + 1:
            previous = number
            continue
        spans.append(str(start) if start == previous else f"{start}-{previous}")
        if number is not None:
            start = previous = number
    return ", ".join(spans)


def _stage_evidence(evidence: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    for key, value in evidence.items():
        if key == "stderr_tail" and isinstance(value, str) and value.strip():
            tail = [line.strip() for line in value.strip().splitlines() if line.strip()][-3:]
            lines.append("last output: " + " | ".join(tail))
        elif isinstance(value, (int, float, str, bool)) and key != "stdout_bytes" and str(value):
            lines.append(f"{key.replace('_', ' ')}: {value}")
    return lines


def _trial_evidence(trials: list[Trial]) -> list[str]:
    if not trials:
        return []
    passed = [t for t in trials if t.passed]
    lines: list[str] = []
    if passed:
        distributions = sorted({t.distribution for t in passed})
        sizes = list(dict.fromkeys(sizes_text(t.sizes) for t in passed))
        lines.append(
            f"{len(passed)} trial(s) passed before it ({', '.join(distributions)} inputs; "
            f"sizes {' / '.join(sizes)})"
        )
    last = trials[-1]
    if not last.passed:
        wrong = [o for o in last.outputs if not o.passed]
        what = f"failing trial: seed {last.seed}, {last.distribution} inputs, sizes {sizes_text(last.sizes)}"
        if wrong:
            what += ": " + "; ".join(
                f"output {o.index} ({o.dtype} {o.shape}) rel-L2 {o.rel_l2_error:.3g} vs tolerance "
                f"{o.tolerance_rel_l2:.3g}, {o.mismatched_count} element(s) outside the elementwise bound"
                + (f", {o.nonfinite_count} NaN/Inf" if o.nonfinite_count else "")
                + (f", worst at {tuple(o.worst_index)}" if o.worst_index else "")
                for o in wrong
            )
        lines.append(what)
    return lines


def measurements_from_result(result: EvalResult) -> Measurements:
    """The parent's figures from a verified result: times and speedups from the bench the
    verifier ran (none on a CPU run: nothing is invented), and the compiled kernels' resources."""
    kernels = kernel_lines(result.kernels)
    bench = result.bench
    if bench is None:
        return Measurements(kernels=kernels)
    return Measurements(
        time_ms=bench.median("candidate"),
        eager_ms=bench.median("eager"),
        compile_ms=bench.median("torch.compile"),
        same_speed_as=[name for name in ("eager", "torch.compile")
                       if (speedup := bench.speedup(name)) is not None and not speedup.claimed],
        pct_sol=bench.sol_value("pct_of_sol"),
        achieved_tbs=bench.sol_value("achieved_tbs"),
        achieved_tflops=bench.sol_value("achieved_tflops"),
        floor_ms=bench.sol_value("floor_ms"),
        bound=bench.sol_value("bound"),
        device=bench.device_name or None,
        kernels=kernels,
    )


def _ratio(baseline_ms: float | None, kernel_ms: float | None) -> float | None:
    if baseline_ms is None or not kernel_ms:
        return None
    return baseline_ms / kernel_ms


def task_prompt(task: CandidateIdentity, *, problem: str, backend: str, dtype: str,
                examples: Sequence[PromptExample], guidance: Sequence[PromptGuidance],
                descriptions: dict[str, str], read_source: Callable[[str], str],
                load_eval: Callable[[str], EvalResult | None]) -> str:
    """The user prompt of one model task: the problem, examples and guidance, and per operator
    its parents with their measurements (``improve``, ``crossover``) or the rejected source
    with the verifier's evidence (``fix``)."""

    ctx = TaskContext.from_problem(
        resolve_problem(problem), backend, resolve_target(task.target), dtypes=[dtype],
        examples=examples, guidance=guidance,
    )

    def parent(candidate_id: str) -> ParentKernel:
        result = load_eval(candidate_id)
        return ParentKernel(
            source=read_source(candidate_id),
            measurements=measurements_from_result(result) if result else Measurements(),
            description=descriptions.get(candidate_id, ""),
        )

    if task.kind == "improve":
        return render_improve(ctx, parent(task.parent_ids[0]))
    if task.kind == "crossover":
        return render_crossover(ctx, parent(task.parent_ids[0]), parent(task.parent_ids[1]))
    if task.kind == "fix":
        bad = task.parent_ids[0]
        result = load_eval(bad)
        if result is None:
            return render_generate(ctx)
        return render_fix(ctx, read_source(bad), rejection_from_result(result))
    return render_generate(ctx)
