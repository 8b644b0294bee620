"""The whole parameter space of a kernel's knobs: what an exhaustive sweep times, and what a
search is compared with (``scripts/search_vs_sweep.py``)."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import pytest

from kgen.agent.search.mutation import (
    apply_values,
    find_tunables,
    mutate,
    parameter_space,
    space_size,
)
from kgen.backends.targets import resolve_target

H100 = resolve_target("h100")
MI300X = resolve_target("mi300x")
DETUNED = Path(__file__).resolve().parents[3] / "scripts" / "detuned_seeds"


def _seed(name: str) -> str:
    """A kernel whose tunable space the tests know (tests/fixtures/search_kernels/README.md)."""
    return (Path(__file__).resolve().parents[2] / "fixtures" / "search_kernels" / f"{name}.py").read_text()


def _current(source: str, target=H100) -> dict[str, int | str]:
    return {t.name: t.value for t in find_tunables(source, target)}


def test_rmsnorm_backward_space_is_the_product_of_its_three_knobs():
    source = _seed("rmsnorm_backward")
    space = parameter_space(source, H100)
    # programs per SM 1..8, num_warps 1..16 (five powers of two), sum_block 64..1024 (five)
    assert len(space) == space_size(source, H100) == 8 * 5 * 5 == 200
    assert len({tuple(sorted(p.items())) for p in space}) == 200  # no point twice
    names = [t.name for t in find_tunables(source, H100)]
    assert all(list(point) == names for point in space)
    assert space == parameter_space(source, H100)  # deterministic order


def test_every_point_applies_parses_and_reads_back_as_its_own_values():
    source = _seed("rmsnorm_backward")
    for point in parameter_space(source, H100):
        variant = apply_values(source, point, H100)
        ast.parse(variant)
        assert _current(variant) == point


def test_the_parents_own_values_are_a_point_when_they_are_among_the_choices():
    source = _seed("rmsnorm_backward")
    current = _current(source)
    # num_warps is an expression in the seed: its value there is not one of the choices
    assert not isinstance(current["num_warps@_rmsnorm_bwd_rows"], int)
    literal = apply_values(source, {"num_warps@_rmsnorm_bwd_rows": 16}, H100)
    assert _current(literal) in parameter_space(literal, H100)
    gelu = _seed("gelu")
    assert _current(gelu) in parameter_space(gelu, H100)


def test_variants_mutate_proposes_are_points_of_the_space():
    import random

    source = apply_values(_seed("rmsnorm_backward"), {"num_warps@_rmsnorm_bwd_rows": 4}, H100)
    space = parameter_space(source, H100)
    for variant in mutate(source, H100, n=12, rng=random.Random(1)):
        assert _current(variant.source) in space


def test_a_matmul_tiling_that_overflows_shared_memory_is_left_out():
    source = _seed("gemm_bias_gelu")
    tunables = find_tunables(source, H100)
    full = math.prod(len(t.choices) for t in tunables)
    space = parameter_space(source, H100)
    assert 0 < len(space) < full
    huge = {"block_m": 512, "block_n": 1024, "block_k": 256, "GROUP_M@_gemm_bias_gelu": 8,
            "num_warps@_gemm_bias_gelu": 8, "num_stages@_gemm_bias_gelu": 5}
    assert set(huge) == {t.name for t in tunables}
    assert huge not in space
    # 5 stages of 512x256 + 256x1024 bf16 tiles: 3.75 MiB against 228 KiB of shared memory
    small = {**huge, "block_m": 64, "block_n": 64, "block_k": 32, "num_stages@_gemm_bias_gelu": 2}
    assert small in space
    for point in space[:: max(1, len(space) // 50)]:
        stages = point["num_stages@_gemm_bias_gelu"]
        shared = stages * (point["block_m"] * point["block_k"] + point["block_k"] * point["block_n"]) * 2
        assert shared <= H100.shared_memory_per_sm_kb * 1024


def test_the_target_sets_the_choices():
    source = _seed("rmsnorm_backward")
    # AMD: num_warps 1..8 (four choices) instead of 1..16
    assert space_size(source, MI300X) == 8 * 4 * 5


def test_source_without_knobs_or_that_does_not_parse_has_an_empty_space():
    assert parameter_space("x = 1\n", H100) == []
    assert space_size("def broken(:\n", H100) == 0


@pytest.mark.parametrize("name, size", [("rmsnorm_backward", 40), ("layernorm_forward", 40), ("softmax", 75)])
def test_the_detuned_benchmark_seeds_have_small_spaces_that_hold_the_seed(name, size):
    source = (DETUNED / f"{name}.py").read_text()
    tunables = find_tunables(source, H100)
    assert 2 <= len(tunables) <= 4
    space = parameter_space(source, H100)
    assert len(space) == size
    assert _current(source) in space  # the de-tuned start is one of the swept points
    assert any(t.kind == "num_warps" and t.value == 1 for t in tunables)
