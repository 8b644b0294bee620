"""CuTe DSL candidates on the CPU: compiled for every target from their own calls, watched like
any call, and never "passed" (CuTe kernels cannot run without a GPU).

The correct candidates are written in three styles (a direct ``@cute.jit`` call; ``cute.compile``
in forward, then the executor; an executor compiled once in ``__init__`` from fake tensors); the planted-bad ones fail for their own reason, each with the message
the fix prompt gets."""

from pathlib import Path

import pytest

from kgen.evals.harness import EvalOptions, evaluate
from kgen.evals.verdict import InconclusiveCause, RejectionClass, Verdict

CUTE = Path(__file__).resolve().parents[2] / "fixtures" / "candidates" / "cute"
OPTIONS = EvalOptions(device="cpu", backend="cute", targets=["h100"], also_compile_for=["b200", "a100"],
                      n_seeds=1, distributions=False)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["softcap_direct_jit", "softcap_compiled_executor", "softcap_compiled_in_init"])
def test_a_correct_cute_candidate_is_compiled_for_every_target_and_not_run(name):
    result = evaluate("softcap", CUTE / f"{name}.py", OPTIONS)
    assert result.verdict is Verdict.INCONCLUSIVE and result.inconclusive is InconclusiveCause.COMPILED_NOT_RUN
    assert result.outcome == "compiled, not run" and not result.passed and result.exit_code == 3
    assert "need a GPU to run" in result.reason
    for target in ("h100", "b200", "a100"):
        assert result.compiles_for(target) is True, (target, result.kernels)
    built = [k for k in result.kernels if k.target == "h100"]
    assert built and all(k.registers and k.registers > 0 and k.shared_bytes is not None for k in built)
    assert [s.name for s in result.stages] == ["static", "load", "compile"]
    assert result.trials == [] and result.bench is None  # nothing ran, nothing was timed


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "rejection", "words"),
    [
        ("bad_softcap_torch_math", RejectionClass.NOT_A_KERNEL, "torch.tanh"),
        ("bad_softcap_no_launch", RejectionClass.NO_KERNEL_LAUNCH, "launched no cute kernel"),
        ("bad_softcap_shared_overflow", RejectionClass.COMPILE_ERROR, "shared memory per block; h100 allows"),
        ("bad_softcap_compile_error", RejectionClass.COMPILE_ERROR, "weakly congruent"),
    ],
)
def test_a_planted_bad_cute_candidate_is_rejected_on_the_cpu_for_its_own_reason(name, rejection, words):
    result = evaluate("softcap", CUTE / f"{name}.py", OPTIONS)
    assert (result.verdict, result.rejection) == (Verdict.REJECTED, rejection), result.reason
    assert words in result.reason
