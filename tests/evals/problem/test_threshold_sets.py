"""Threshold size sets: one set just past each threshold the plan does not cross, on the dim the
threshold was traced to, the other constants small, bounded and capped."""

import textwrap

from kgen.backends.device import Device
from kgen.evals.problem.catalog import resolve_problem
from kgen.evals.problem.format import read_problem
from kgen.evals.problem.size_sets import GENERATED, verification_size_plan
from kgen.evals.problem.size_threshold import SizeThreshold, ThresholdAxis
from kgen.evals.problem.threshold_sets import (
    CPU_LONG_CAP,
    CPU_PROGRAM_CAP,
    MAX_THRESHOLD_SETS,
    OTHER_AXES,
    past_threshold,
    past_threshold_in_programs,
    threshold_size_sets,
)

COLS = ThresholdAxis(input=0, dim=-1)
ROWS = ThresholdAxis(input=0, dim=0)


def threshold(value: int, *axes: ThresholdAxis) -> SizeThreshold:
    return SizeThreshold(value=value, line=7, text=f"n > {value}", axes=axes)


def sets_for(name: str, *thresholds: SizeThreshold, device: Device = Device.CPU):
    info = resolve_problem(name)
    plan = verification_size_plan(info, device)
    return plan, threshold_size_sets(info, plan, list(thresholds), device)


def test_past_threshold_is_odd_and_well_past():
    assert past_threshold(8192) == 12287
    assert past_threshold(16) == 23
    for value in (16, 17, 100, 4096, 10000, 1 << 18):
        past = past_threshold(value)
        assert past % 2 == 1 and value < past <= value + value // 2 + 1


def test_a_column_threshold_moves_the_columns_and_shrinks_the_rest():
    plan, sets = sets_for("softmax", threshold(8192, COLS))
    assert [s.sizes for s in sets] == [{"ROWS": OTHER_AXES, "COLS": past_threshold(8192)}]
    assert sets[0].origin == "threshold" and "threshold" in GENERATED and sets[0].generated
    assert "line 7" in sets[0].note and "8192" in sets[0].note
    assert all(s.origin != "threshold" for s in plan)


def test_a_row_threshold_moves_the_rows():
    _, sets = sets_for("softmax", threshold(2048, ROWS))
    assert [s.sizes for s in sets] == [{"ROWS": past_threshold_in_programs(2048), "COLS": OTHER_AXES}]
    assert 2048 < past_threshold_in_programs(2048) <= 2048 + 20  # rows are interpreter programs


def test_thresholds_the_plan_crosses_give_no_set():
    # the CPU plan takes the columns to 4097 and the rows to 1025 already; 64 and 96 are crossed too
    _, sets = sets_for("softmax", threshold(4096, COLS), threshold(1024, ROWS), threshold(64, COLS), threshold(96))
    assert sets == []


def test_an_unknown_axis_tries_each_uncrossed_constant_long_first():
    _, sets = sets_for("softmax", threshold(4100))
    assert [s.sizes for s in sets] == [
        {"ROWS": OTHER_AXES, "COLS": past_threshold(4100)},
        {"ROWS": past_threshold_in_programs(4100), "COLS": OTHER_AXES},
    ]
    # rows past 8192 are past the CPU's program cap: only the columns, a GPU run looks at the rows
    _, sets = sets_for("softmax", threshold(8192))
    assert [s.sizes for s in sets] == [{"ROWS": OTHER_AXES, "COLS": past_threshold(8192)}]


def test_a_product_threshold_counts_the_other_dims():
    _, sets = sets_for("gelu", threshold(1 << 18, ThresholdAxis(input=0, product=True)))
    # one long axis, the others at 1: the element count is the odd, tail-heavy value itself
    assert [s.sizes for s in sets] == [{"TOKENS": 1, "FFN_DIM": past_threshold(1 << 18)}]


def test_sets_are_bounded_and_capped_on_the_cpu():
    many = [threshold(v, COLS) for v in range(5000, 200000, 7000)]
    _, sets = sets_for("softmax", *many, threshold(CPU_LONG_CAP, COLS), threshold(CPU_PROGRAM_CAP, ROWS))
    assert len(sets) == MAX_THRESHOLD_SETS
    assert all(s.sizes["COLS"] <= CPU_LONG_CAP and s.sizes["ROWS"] <= CPU_PROGRAM_CAP for s in sets)
    # the nearest thresholds first
    assert [s.sizes["COLS"] for s in sets] == sorted(s.sizes["COLS"] for s in sets)
    assert sets[0].sizes["COLS"] == past_threshold(5000)


def test_on_a_gpu_the_defaults_stay_first_and_only_uncrossed_thresholds_add_sets():
    plan, sets = sets_for("softmax", threshold(8192, COLS), threshold(65536, COLS), device=Device.CUDA)
    assert plan[0].origin == "default"
    # the defaults (8192 columns) and the extra set (32003) cross 8192; 65536 is past them all
    assert [s.sizes for s in sets] == [{"ROWS": OTHER_AXES, "COLS": past_threshold(65536)}]


def test_a_dim_that_is_a_multiple_of_its_constant(tmp_path):
    path = tmp_path / "doubled.py"
    path.write_text(textwrap.dedent("""
        import torch
        import torch.nn as nn
        B = 64
        HALF = 512
        KGEN_SMALL_SIZES = {"B": 5, "HALF": 40}

        class Model(nn.Module):
            def forward(self, x):
                return x * 2

        def get_inputs():
            return [torch.randn(B, 2 * HALF)]

        def get_init_inputs():
            return []
        """))
    info = read_problem(path)
    plan = verification_size_plan(info, Device.CPU)
    (size_set,) = threshold_size_sets(info, plan, [threshold(8192, COLS)], Device.CPU)
    assert 2 * size_set.sizes["HALF"] > 8192
    assert 2 * size_set.sizes["HALF"] <= past_threshold(8192) + 2
    assert size_set.sizes["B"] == OTHER_AXES


def test_nothing_found_nothing_added():
    plan, sets = sets_for("rmsnorm_forward")
    assert sets == [] and plan
