"""The prompts a model sees: every task template rendered from real problems, targets and
verifier results, with the sections a kernel author needs, and nothing left dangling."""

import re
from pathlib import Path

import jinja2
import pydantic
import pytest

from kgen.agent.candidates import kernel_lines
from kgen.agent.llm.prompt_context import (
    MAX_EVIDENCE_CHARS,
    MAX_EXAMPLES,
    MAX_REASON_CHARS,
    PROMPT_CHAR_BUDGET,
    Measurements,
    ParentKernel,
    PromptExample,
    PromptGuidance,
    PromptTarget,
    Rejection,
    TaskContext,
    measurements_from_result,
    rejection_from_result,
    render_crossover,
    render_fix,
    render_generate,
    render_improve,
    render_system,
)
from kgen.agent.llm.templates import render_template
from kgen.backends.base import KernelReport
from kgen.backends.targets import resolve_target
from kgen.evals.problem.catalog import resolve_problem
from kgen.evals.problem.format import load_problem
from kgen.evals.result import EvalResult
from kgen.evals.timing.measure import TimingResult
from kgen.evals.timing.sol import speed_of_light, with_measurement
from kgen.evals.verdict import (
    OutputComparison,
    RejectionClass,
    StageResult,
    StageStatus,
    Trial,
    Verdict,
)

PROBLEM = resolve_problem("rmsnorm_backward")
H100 = resolve_target("h100")
MI300X = resolve_target("mi300x")
# kernels whose tunable spaces the tests know (tests/fixtures/search_kernels/README.md)
SEED_SOURCE = (Path(__file__).resolve().parents[2] / "fixtures" / "search_kernels" / "rmsnorm_backward.py").read_text()
SOFTMAX_SOURCE = (Path(__file__).resolve().parents[2] / "fixtures" / "search_kernels" / "softmax.py").read_text()

GUIDANCE = PromptGuidance(
    title="Column reductions across rows",
    text="Accumulate per-program partials in fp32 and reduce them in a second small kernel.",
)
EXAMPLE = PromptExample(
    source=SEED_SOURCE,
    problem="rmsnorm_backward",
    backend="triton",
    target="h100",
    description="dx per row in registers; dweight from fp32 per-program partials",
    summary="0.1521 ms on h100, 1.87x vs torch.compile",
)


def context(target=H100, **update) -> TaskContext:
    ctx = TaskContext.from_problem(
        PROBLEM, "triton", target, dtypes=["bf16"], examples=[EXAMPLE], guidance=[GUIDANCE]
    )
    return ctx.model_copy(update=update)


def timing(median_ms: float) -> dict:
    return TimingResult(
        median_ms=median_ms, mean_ms=median_ms * 1.01, min_ms=median_ms * 0.98, p10_ms=median_ms * 0.99,
        p90_ms=median_ms * 1.02, trials=200, warmup=3, input_sets=3, l2_flush_bytes=256 << 20,
        device_name="NVIDIA H100 80GB HBM3",
    ).model_dump()


def verified_gpu_result(kernel_ms: float = 0.2) -> EvalResult:
    """A passed result with the bench dict the verifier writes on a GPU."""
    import torch

    problem = load_problem(PROBLEM.path)
    eager_ms, compile_ms = 0.61, 0.31
    sol = speed_of_light(problem.bytes_moved(), problem.flops(), H100, torch.bfloat16)
    sol = with_measurement(sol, kernel_ms, baseline_ms=eager_ms)
    return EvalResult(
        problem=PROBLEM.name, problem_path=str(PROBLEM.path), candidate="cand.py", backend="triton",
        device="cuda", targets=["h100"], verdict=Verdict.PASSED, reason="verified against the fp64 reference",
        stages=[StageResult(name="timing", status=StageStatus.PASSED, message="median 0.2 ms")],
        kernels=[
            KernelReport(kernel="_rmsnorm_bwd_rows", target="h100", ok=True, registers=64, spills=0,
                         shared_bytes=4096, num_warps=16, num_stages=3),
            KernelReport(kernel="_sum_partials", target="h100", ok=True, registers=24, spills=0,
                         shared_bytes=0, num_warps=4, num_stages=3),
        ],
        bench={
            "device_name": "NVIDIA H100 80GB HBM3",
            "sizes": problem.sizes,
            "measurements": {"candidate": timing(kernel_ms), "eager": timing(eager_ms),
                             "torch.compile": timing(compile_ms)},
            "errors": {},
            "sol": sol.model_dump(),
        },
    )


def rejected_result(reason: str | None = None) -> EvalResult:
    """A candidate right on normal inputs and wrong on inputs that expose a bf16 accumulator."""
    reason = reason or (
        "right on normal inputs, wrong on zipf inputs built to expose low-precision accumulation: "
        "output 1 differs from the fp64 reference: rel-L2 error 0.214 (tolerance 0.0156)"
    )

    def comparison(index: int, error: float, passed: bool) -> OutputComparison:
        return OutputComparison(
            index=index, shape=[2048, 16], dtype="bfloat16", rel_l2_error=error, max_abs_error=error * 10,
            worst_index=[0, 7], mismatched_fraction=0.0 if passed else 0.4375, tolerance_rel_l2=0.0156,
            passed=passed,
        )

    return EvalResult(
        problem=PROBLEM.name, problem_path=str(PROBLEM.path), candidate="cand.py", backend="triton",
        device="cpu", targets=["h100"], verdict=Verdict.REJECTED,
        rejection=RejectionClass.LOW_PRECISION_ACCUMULATION, reason=reason,
        stages=[
            StageResult(name="static", status=StageStatus.PASSED, message="no forbidden construct found"),
            StageResult(name="load", status=StageStatus.PASSED, message="ModelNew found"),
            StageResult(name="correctness", status=StageStatus.FAILED, message=reason),
        ],
        trials=[
            Trial(seed=11, sizes={"ROWS": 37, "HIDDEN": 96}, outputs=[comparison(0, 1e-3, True)], passed=True),
            Trial(seed=12, sizes={"ROWS": 2048, "HIDDEN": 16}, distribution="zipf",
                  outputs=[comparison(0, 1e-3, True), comparison(1, 0.214, False)]),
        ],
    )


def assert_no_dangling_headings(text: str) -> None:
    """Every section heading has content before the next heading; no runs of blank lines."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("## "):
            following = next((x for x in lines[i + 1:] if x.strip()), "")
            assert following and not following.startswith("## "), f"heading {line!r} has no content"
    assert "\n\n\n\n" not in text
    assert not re.search(r"\{\{|\{%|%\}|\}\}", text), "template syntax leaked"


# ----------------------------------------------------------------------------------------
# System prompt
# ----------------------------------------------------------------------------------------


def test_system_prompt_states_the_contract_and_the_hard_rules():
    text = render_system("triton")
    for phrase in (
        "class ModelNew(nn.Module)", "same arguments as `Model.__init__`", "tuple order", "torch.empty",
        "write every element", "fp32", "mask every load and store", "No state across calls",
        "No `try` / `except`", "No streams", "threads", "files, network", "@triton.jit",
        "exactly one fenced ```python block",
    ):
        assert phrase in text, phrase
    assert "cute" not in text.lower()


def test_system_prompt_for_cute_speaks_of_cute():
    text = render_system("CuTe")
    assert "@cute.kernel" in text and "CuTe DSL" in text
    assert "@triton.jit" not in text


def test_system_prompt_for_an_unknown_backend_is_an_error():
    with pytest.raises(ValueError, match="no prompts for backend"):
        render_system("cuda-c")


# ----------------------------------------------------------------------------------------
# Generate
# ----------------------------------------------------------------------------------------


def test_generate_shows_problem_target_guidance_and_examples():
    text = render_generate(context())
    assert PROBLEM.path.read_text().rstrip() in text  # the reference, whole
    assert PROBLEM.description in text
    assert "Input dtypes to support: bf16" in text
    # H100 SXM figures
    for figure in ("NVIDIA H100 SXM", "Hopper", "132 streaming multiprocessors", "warp size 32",
                   "3.35 TB/s", "989.4 TFLOP/s", "228 KB"):
        assert figure in text, figure
    assert "wavefront" not in text
    assert f"### {GUIDANCE.title}" in text and GUIDANCE.text in text
    assert SEED_SOURCE.rstrip() in text
    assert EXAMPLE.description in text and EXAMPLE.summary in text
    assert text.count("```python\n") == 2  # the reference and one example
    assert_no_dangling_headings(text)


def test_generate_for_mi300x_shows_its_figures():
    text = render_generate(context(MI300X))
    for figure in ("AMD Instinct MI300X", "CDNA 3", "hip:gfx942", "304 compute units", "warp size 64",
                   "wavefront", "5.3 TB/s", "1307.4 TFLOP/s", "64 KB"):
        assert figure in text, figure
    assert "all 304 CUs" in text


def test_empty_sections_vanish_without_leftover_headings():
    bare = context(examples=[], guidance=[], dtypes=[], problem_description="")
    text = render_generate(bare)
    assert "## Optimisation notes" not in text
    assert "## Verified kernels" not in text
    assert "Input dtypes" not in text
    assert "## Problem" in text and "## Target hardware" in text
    assert_no_dangling_headings(text)
    # an example without description or timing shows its source and no empty labels
    plain = PromptExample(source=SOFTMAX_SOURCE, problem="softmax", backend="triton", target="h100")
    text = render_generate(bare.model_copy(update={"examples": [plain]}))
    assert "what it is:" not in text and "measured:" not in text
    assert SOFTMAX_SOURCE.rstrip() in text


def test_examples_are_capped_in_number_and_size_to_keep_the_prompt_small():
    long_source = SEED_SOURCE + "\n".join(f"# filler line {i} " + "x" * 60 for i in range(400))
    examples = [
        EXAMPLE.model_copy(update={"source": long_source, "problem": f"problem_{i}"}) for i in range(10)
    ]
    text = render_generate(context(examples=examples))
    shown = re.findall(r"### Example \d+: `(problem_\d+)`", text)
    assert shown == [f"problem_{i}" for i in range(len(shown))]  # most relevant first, in order
    assert 1 <= len(shown) <= MAX_EXAMPLES
    assert "more lines not shown" in text
    assert len(text) < PROMPT_CHAR_BUDGET


# ----------------------------------------------------------------------------------------
# Improve
# ----------------------------------------------------------------------------------------


def test_measurements_from_a_gpu_result_carry_times_speedups_and_sol():
    m = measurements_from_result(verified_gpu_result(0.2))
    assert m.time_ms == pytest.approx(0.2)
    assert m.eager_ms == pytest.approx(0.61) and m.compile_ms == pytest.approx(0.31)
    assert m.speedup_eager == pytest.approx(3.05) and m.speedup_compile == pytest.approx(1.55)
    assert m.bound == "memory"
    assert m.pct_sol == pytest.approx(m.floor_ms / 0.2 * 100)
    assert m.achieved_tbs == pytest.approx(load_problem(PROBLEM.path).bytes_moved() / 0.2e-3 / 1e12)
    assert m.kernels[0] == (
        "_rmsnorm_bwd_rows on h100: 64 registers/thread, 0 spills, 4 KB shared memory, 16 warps, 3 stages"
    )


def test_improve_shows_the_parent_with_its_measurements():
    result = verified_gpu_result(0.2)
    parent = ParentKernel(source=SEED_SOURCE, measurements=measurements_from_result(result),
                          description="two kernels: rows, then a sum over fp32 partials")
    text = render_improve(context(), parent)
    m = parent.measurements
    assert SEED_SOURCE.rstrip() in text
    assert "two kernels: rows, then a sum over fp32 partials" in text
    assert "0.2000 ms on NVIDIA H100 80GB HBM3" in text
    assert "speedup vs PyTorch eager: 3.05x" in text
    assert "speedup vs torch.compile: 1.55x" in text
    assert f"{m.pct_sol:.0f}% of SOL" in text and "memory-bound" in text
    assert f"{m.achieved_tbs:.2f} TB/s" in text
    assert "_sum_partials on h100: 24 registers/thread" in text
    assert "what you change" in text
    assert PROBLEM.path.read_text().rstrip() in text and "3.35 TB/s" in text
    assert_no_dangling_headings(text)


def test_a_speedup_within_the_timing_noise_is_shown_as_same_speed():
    result = verified_gpu_result(0.2)
    # torch.compile at 0.204 ms: its interval overlaps the kernel's (0.198-0.204 ms)
    result.bench.measurements["torch.compile"] = result.bench.measurements["torch.compile"].model_copy(
        update={"median_ms": 0.204, "p10_ms": 0.2, "p90_ms": 0.21})
    m = measurements_from_result(result)
    assert m.same_speed_as == ["torch.compile"]
    text = render_improve(context(), ParentKernel(source=SEED_SOURCE, measurements=m, description="seed"))
    assert "speedup vs torch.compile: 1.02x (torch.compile 0.2040 ms): ≈ same speed" in text
    assert "speedup vs PyTorch eager: 3.05x (eager 0.6100 ms)\n" in text


def test_improve_a_parent_verified_on_cpu_says_it_was_not_timed():
    cpu = rejected_result().model_copy(update={
        "verdict": Verdict.PASSED, "rejection": None, "bench": None, "trials": [],
        "kernels": [KernelReport(kernel="_rmsnorm_bwd_rows", target="h100", ok=True, registers=40, spills=2)],
    })
    m = measurements_from_result(cpu)
    assert m == Measurements(kernels=["_rmsnorm_bwd_rows on h100: 40 registers/thread, 2 spills"])
    text = render_improve(context(), ParentKernel(source=SEED_SOURCE, measurements=m))
    assert "not timed" in text
    assert "speedup" not in text and "% of SOL" not in text
    assert "40 registers/thread, 2 spills" in text


def test_speedups_follow_from_times_when_not_given():
    m = Measurements(time_ms=0.5, eager_ms=1.0, compile_ms=0.25)
    assert m.speedup_eager == pytest.approx(2.0) and m.speedup_compile == pytest.approx(0.5)


# ----------------------------------------------------------------------------------------
# Fix
# ----------------------------------------------------------------------------------------


def test_rejection_from_result_names_class_reason_and_evidence():
    rejection = rejection_from_result(rejected_result())
    assert rejection.rejection_class == "low_precision_accumulation"
    assert "wrong on zipf inputs" in rejection.reason
    assert "failed at stage correctness" in rejection.evidence
    assert "1 trial(s) passed before it (normal inputs; sizes ROWS=37, HIDDEN=96)" in rejection.evidence
    assert "zipf inputs, sizes ROWS=2048, HIDDEN=16" in rejection.evidence
    assert "output 1 (bfloat16 [2048, 16]) rel-L2 0.214 vs tolerance 0.0156" in rejection.evidence
    assert "output 0 (" not in rejection.evidence  # only the outputs that failed


def test_rejection_is_capped_to_a_few_hundred_characters():
    long_reason = "forward raised RuntimeError: " + "triton compilation failed " * 100
    rejection = rejection_from_result(rejected_result(long_reason))
    assert len(rejection.reason) <= MAX_REASON_CHARS and rejection.reason.endswith("...")
    assert len(rejection.evidence) <= MAX_EVIDENCE_CHARS


def test_rejection_of_a_crash_carries_the_last_output_lines():
    crashed = rejected_result().model_copy(update={
        "rejection": RejectionClass.CRASH, "reason": "the candidate's process died by SIGSEGV during correctness",
        "trials": [],
        "stages": [StageResult(
            name="correctness", status=StageStatus.FAILED, message="died",
            evidence={"stderr_tail": "Traceback...\n\nRuntimeError: illegal memory access\n", "stdout_bytes": 0},
        )],
    })
    rejection = rejection_from_result(crashed)
    assert rejection.rejection_class == "crash"
    assert "illegal memory access" in rejection.evidence
    assert "stdout" not in rejection.evidence


def test_compile_failures_appear_in_the_evidence():
    failed = rejected_result().model_copy(update={
        "rejection": RejectionClass.COMPILE_ERROR, "trials": [],
        "kernels": [KernelReport(kernel="_k", target="mi300x", ok=False, error="out of LDS\nmore detail")],
    })
    assert "kernel _k does not compile for mi300x: out of LDS" in rejection_from_result(failed).evidence


def test_a_passed_result_has_no_rejection():
    with pytest.raises(ValueError, match="passed verification"):
        rejection_from_result(verified_gpu_result())


def test_fix_shows_the_candidate_and_the_verifier_verdict():
    broken = SEED_SOURCE.replace("dw_acc = tl.zeros([BLOCK_COLS], dtype=tl.float32)",
                                 "dw_acc = tl.zeros([BLOCK_COLS], dtype=tl.bfloat16)")
    rejection = rejection_from_result(rejected_result())
    text = render_fix(context(examples=[]), broken, rejection)
    assert broken.rstrip() in text
    assert "rejection class: `low_precision_accumulation`" in text
    assert "accumulate in fp32" in text  # the class's hint
    assert rejection.reason in text and rejection.evidence in text
    assert "naming the bug and the fix" in text
    assert_no_dangling_headings(text)


def test_fix_without_evidence_or_known_class_omits_those_lines():
    text = render_fix(context(), SEED_SOURCE, Rejection(rejection_class="rejected", reason="it broke"))
    assert "- reason: it broke" in text
    assert "- evidence:" not in text and "what this class usually means" not in text


# ----------------------------------------------------------------------------------------
# Crossover
# ----------------------------------------------------------------------------------------


def test_crossover_shows_both_parents_with_their_measurements():
    a = ParentKernel(source=SEED_SOURCE, measurements=measurements_from_result(verified_gpu_result(0.2)),
                     description="two-kernel design")
    b_source = SEED_SOURCE.replace("return 2 * torch", "return 4 * torch")
    b = ParentKernel(source=b_source, measurements=measurements_from_result(verified_gpu_result(0.25)))
    text = render_crossover(context(guidance=[]), a, b)
    assert text.index("## Parent A") < text.index("0.2000 ms") < text.index("## Parent B") < text.index("0.2500 ms")
    assert SEED_SOURCE.rstrip() in text and b_source.rstrip() in text
    assert "which parts come from A, which from B" in text
    assert "## Optimisation notes" not in text
    assert_no_dangling_headings(text)


# ----------------------------------------------------------------------------------------
# Strictness
# ----------------------------------------------------------------------------------------


def test_a_missing_template_field_raises():
    with pytest.raises(jinja2.UndefinedError):
        render_template("improve", ctx=context())  # no parent
    with pytest.raises(jinja2.UndefinedError):
        render_template("fix", ctx=context(), candidate_source=SEED_SOURCE)  # no rejection


def test_a_context_without_the_reference_source_is_invalid():
    with pytest.raises(pydantic.ValidationError, match="problem_source"):
        TaskContext(problem_name="x", backend="triton", target=PromptTarget.from_target(H100))
    with pytest.raises(pydantic.ValidationError):
        context().model_validate({**context().model_dump(), "backend": "cuda-c"})


def test_kernel_lines_report_a_kernel_that_does_not_compile():
    lines = kernel_lines([KernelReport(kernel="_k", target="mi300x", ok=False, error="LDS overflow\ntrace")])
    assert lines == ["_k on mi300x: does not compile (LDS overflow)"]
