"""The race check: the candidate again on the same inputs under other launch conditions.

On the CPU the interpreter runs a kernel's programs one after another: nothing to perturb,
so the check is skipped and the correctness stage says so. On a GPU (tests marked ``gpu``)
the planted races are named ``race_condition``, and correct kernels whose atomics reorder
float sums, persistent and autotuned ones, pass.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from redteam_cases import redteam_cases

from kgen.evals.harness import EvalOptions, evaluate
from kgen.evals.verifier.correctness_stage import CorrectnessStage
from kgen.evals.verifier.load_stage import LoadStage
from kgen.evals.verifier.race_check import SKIPPED_ON_CPU, run_race_check
from kgen.evals.verifier.trial_parts import problem_at

CUDA = torch.cuda.is_available()
CANDIDATES = Path(__file__).resolve().parents[2] / "fixtures" / "candidates"
RT4_GPU = [c for c in redteam_cases() if c.id.startswith("rt4_gpu")]


def test_on_the_cpu_it_is_skipped_and_the_correctness_stage_says_so(open_verifier):
    ctx = open_verifier(CANDIDATES / "rt4_gpu_split_sum_race.py", "row_sum")
    LoadStage().run(ctx)
    result = run_race_check(ctx, problem_at(ctx, ctx.request.size_sets[0]), 7)
    assert result.skipped == SKIPPED_ON_CPU and result.runs == 0
    CorrectnessStage().run(ctx)  # the race passes in the interpreter: programs run in order
    stage = ctx.report.stages[-1]
    assert stage.name == "correctness" and SKIPPED_ON_CPU in stage.message
    assert stage.evidence["race_check"]["skipped"] == SKIPPED_ON_CPU


def test_the_gpu_fixtures_declare_both_verdicts_where_they_differ():
    by_id = {c.id: c for c in RT4_GPU}
    assert by_id["rt4_gpu_split_sum_race"].expect_on("cuda") == "race_condition"
    assert by_id["rt4_gpu_split_sum_race"].expect_on("cpu") == "passed"
    assert by_id["rt4_gpu_atomic_split_sum_ok"].expect_on("cpu") == "passed" == by_id["rt4_gpu_atomic_split_sum_ok"].expect


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("case", RT4_GPU, ids=lambda c: c.id)
def test_on_a_gpu_each_rt4_fixture_gets_its_verdict(case):
    """Full default sizes for the races (a split sum of 16384 x 4096 has eight chunks per row
    racing); the cheats on the KernelBench ReLU (6.4 GB at full size) at its small sizes."""
    small = Path(case.problem).stem == "relu_kernelbench"
    result = evaluate(case.problem, case.candidate,
                      EvalOptions(device="cuda", n_seeds=2, timeout_s=600, small_sizes=small))
    assert result.outcome == case.expect_on("cuda"), result.reason
    if result.passed:
        race = result.stage("correctness").evidence["race_check"]
        assert race["runs"] >= 7 and not race["skipped"] and race["seconds"] < 30, race
