"""The compile stage on a real context: every kernel built for the targets, without their GPUs.

Triton cross-compiles from the launches a forward makes at the problem's default sizes
(recorded on storage-less meta tensors); a CuTe DSL candidate on the CPU is compiled from
its own calls and stops at "compiled, not run".
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kgen.agent.search.mutation import apply_values
from kgen.backends.targets import resolve_target
from kgen.evals.problem.catalog import resolve_problem
from kgen.evals.verdict import InconclusiveCause, Rejected, RejectionClass, StageStatus
from kgen.evals.verifier.compile_stage import CompiledNotRunStage, CompileStage
from kgen.evals.verifier.load_stage import LoadStage
from kgen.knowledge_base import SEED_KERNELS_DIR

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
CANDIDATES = FIXTURES / "candidates"
CUTE = CANDIDATES / "cute"
RELU_DEFAULTS = {"batch_size": 4096, "dim": 393216}


@pytest.fixture(scope="module")
def deep_pipeline_gemm(tmp_path_factory) -> Path:
    """A GEMM whose pipelined tiles need 144 KB of shared memory per block: H100 has room, L40S not."""
    seed = (SEED_KERNELS_DIR / "triton" / "gemm_bias_gelu.py").read_text()
    path = tmp_path_factory.mktemp("gemm") / "gemm_stages4.py"
    path.write_text(apply_values(seed, {"num_stages@_gemm_bias_gelu": 4}, resolve_target("h100")))
    return path


def _loaded(open_verifier, candidate: Path, problem=None, **request):
    ctx = open_verifier(candidate, **({"problem": problem} if problem else {}), **request)
    LoadStage().run(ctx)
    return ctx


def test_without_targets_there_is_nothing_to_compile(open_verifier):
    ctx = _loaded(open_verifier, CANDIDATES / "relu_kernelbench_solution.py")
    CompileStage().run(ctx)
    assert [s.name for s in ctx.report.stages] == ["load"] and ctx.report.kernels == []


def test_kernels_are_built_at_the_default_sizes_without_allocating_them(open_verifier):
    ctx = _loaded(open_verifier, CANDIDATES / "relu_kernelbench_solution.py", targets=["h100"],
                  compile_sizes=RELU_DEFAULTS)
    CompileStage().run(ctx)
    stage = ctx.report.stages[-1]
    assert (stage.name, stage.status) == ("compile", StageStatus.PASSED)
    assert stage.message.endswith("kernel build(s) for h100 at sizes batch_size=4096, dim=393216")
    assert ctx.report.kernels and all(k.ok and k.target == "h100" for k in ctx.report.kernels)


@pytest.mark.slow
def test_a_target_compiled_for_too_records_its_misfit_and_an_asked_target_rejects(open_verifier, deep_pipeline_gemm):
    defaults = dict(resolve_problem("gemm_bias_gelu").sizes)
    ctx = _loaded(open_verifier, deep_pipeline_gemm, "gemm_bias_gelu", targets=["h100"], also_compile_for=["l40s"],
                  compile_sizes=defaults)
    CompileStage().run(ctx)
    stage = ctx.report.stages[-1]
    assert stage.status is StageStatus.PASSED and "does not compile for l40s" in stage.message
    assert {k.target for k in ctx.report.kernels} == {"h100", "l40s"}

    asked = _loaded(open_verifier, deep_pipeline_gemm, "gemm_bias_gelu", targets=["l40s"], compile_sizes=defaults)
    with pytest.raises(Rejected, match="does not compile for l40s") as caught:
        CompileStage().run(asked)
    assert caught.value.rejection is RejectionClass.COMPILE_ERROR
    assert "out of resources" in caught.value.evidence["compile_error"]


@pytest.fixture
def cute_process(monkeypatch):
    """The CuTe backend prepares the process through the environment: put it back after."""
    for name in ("CUTE_DSL_DISABLE_FILE_CACHING", "CUTE_DSL_ARCH"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.slow
def test_a_cute_kernel_on_the_cpu_is_compiled_for_every_target_and_not_run(open_verifier, cute_process):
    ctx = _loaded(open_verifier, CUTE / "softcap_direct_jit.py", "softcap", backend="cute", targets=["h100"])
    CompiledNotRunStage().run(ctx)
    stage = ctx.report.stages[-1]
    assert (stage.name, stage.status) == ("compile", StageStatus.PASSED)
    assert ctx.report.inconclusive is InconclusiveCause.COMPILED_NOT_RUN
    assert ctx.report.reason.startswith("compiled, not run:") and "need a GPU to run" in ctx.report.reason
    assert ctx.report.kernels and all(k.ok for k in ctx.report.kernels if k.target == "h100")
    assert ctx.report.trials == []


@pytest.mark.slow
def test_a_cute_forward_that_launches_nothing_is_rejected(open_verifier, cute_process):
    ctx = _loaded(open_verifier, CUTE / "bad_softcap_no_launch.py", "softcap", backend="cute", targets=["h100"])
    with pytest.raises(Rejected, match="launched no cute kernel") as caught:
        CompiledNotRunStage().run(ctx)
    assert caught.value.rejection is RejectionClass.NO_KERNEL_LAUNCH
