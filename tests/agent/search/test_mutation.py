"""Offline mutation of the seed kernels' knobs: found on the tree, rewritten in place, still correct."""

from __future__ import annotations

import ast
import random
from pathlib import Path

import pytest

from kgen.agent.search.mutation import (
    apply_values,
    choices_for,
    describe_tunables,
    find_tunables,
    mutate,
    source_key,
)
from kgen.backends.targets import resolve_target
from kgen.knowledge_base import SEED_KERNELS_DIR

SEEDS = sorted((SEED_KERNELS_DIR / "triton").glob("*.py"))
H100 = resolve_target("h100")
MI300X = resolve_target("mi300x")


def _seed(name: str) -> str:
    """A kernel whose tunable space the tests know (tests/fixtures/search_kernels/README.md);
    ``SEEDS``, the shipped ones, are checked for what every kernel must have."""
    return (Path(__file__).resolve().parents[2] / "fixtures" / "search_kernels" / f"{name}.py").read_text()


def _by_name(source: str, target=H100):
    return {t.name: t for t in find_tunables(source, target)}


def test_all_nine_seed_kernels_are_covered():
    assert len(SEEDS) >= 9


@pytest.mark.parametrize("path", SEEDS, ids=lambda p: p.stem)
@pytest.mark.parametrize("target", [H100, MI300X], ids=lambda t: t.name)
def test_every_seed_kernel_has_knobs_and_distinct_parsing_variants(path, target):
    source = path.read_text()
    assert find_tunables(source, target), path.name
    variants = mutate(source, target, n=4, rng=random.Random(7))
    assert len(variants) >= 2
    keys = {v.key for v in variants}
    assert len(keys) == len(variants)  # distinct
    assert source_key(source) not in keys  # never the parent
    for variant in variants:
        ast.parse(variant.source)
        assert variant.source != source
        assert variant.changes and 1 <= len(variant.changes) <= 2
        assert "\n" not in variant.description
        for name, (old, new) in variant.changes.items():
            assert f"{name} {old} -> {new}" in variant.description
            assert old != new


def test_rmsnorm_backward_exposes_warps_sum_block_and_programs_per_sm():
    tunables = _by_name(_seed("rmsnorm_backward"))
    warps = tunables["num_warps@_rmsnorm_bwd_rows"]
    assert warps.kind == "num_warps"
    assert warps.value == "min(max(block_cols // 256, 1), 16)"
    assert tunables["sum_block"].value == 256
    assert tunables["sum_block"].kind == "block"
    assert 512 in tunables["sum_block"].choices and 64 in tunables["sum_block"].choices
    factor = tunables["programs_per_sm@_program_count"]
    assert factor.value == 2
    assert factor.choices == list(range(1, 9))


def test_a_change_rewrites_only_its_span_and_keeps_comments():
    source = _seed("rmsnorm_backward")
    new = apply_values(
        source, {"sum_block": 512, "programs_per_sm@_program_count": 4, "num_warps@_rmsnorm_bwd_rows": 8}
    )
    changed = [
        (old, line) for old, line in zip(source.splitlines(), new.splitlines(), strict=True) if old != line
    ]
    assert [line.strip() for _, line in changed] == [
        "return 4 * torch.cuda.get_device_properties(device).multi_processor_count",
        "BLOCK_COLS=block_cols, num_warps=8,",
        "sum_block = 512",
    ]
    # the sum block moves at its binding, so the grid that divides by it moves with it
    assert "_sum_partials[(triton.cdiv(n_cols, sum_block),)](" in new


@pytest.mark.parametrize("name", ["rmsnorm_backward", "rmsnorm_forward", "layernorm_forward", "softmax"])
def test_a_whole_row_block_is_never_mutated(name):
    source = _seed(name)
    row_block_line = next(
        i + 1 for i, line in enumerate(source.splitlines()) if "triton.next_power_of_2(n_cols)" in line
    )
    for tunable in find_tunables(source, H100):
        assert all(span.lineno != row_block_line for span in tunable.spans), tunable.name
        assert tunable.name != "block_cols"
    for variant in mutate(source, H100, n=30, rng=random.Random(1)):
        assert "block_cols = triton.next_power_of_2(n_cols)" in variant.source
        assert "BLOCK_COLS=block_cols" in variant.source


def test_amd_limits_warps_and_stages_where_h100_allows_more():
    gemm = _seed("gemm_bias_gelu")
    on_h100, on_mi300x = _by_name(gemm, H100), _by_name(gemm, MI300X)
    assert on_h100["num_warps@_gemm_bias_gelu"].choices == [1, 2, 4, 8, 16]
    assert on_mi300x["num_warps@_gemm_bias_gelu"].choices == [1, 2, 4, 8]
    assert max(on_h100["num_stages@_gemm_bias_gelu"].choices) == 5
    assert max(on_mi300x["num_stages@_gemm_bias_gelu"].choices) == 2
    for variant in mutate(gemm, MI300X, n=40, rng=random.Random(3)):
        for name, (_, new) in variant.changes.items():
            if name.startswith("num_warps"):
                assert int(new) <= 8


def test_matmul_variants_fit_the_targets_shared_memory():
    """The seed's 128x256x64 tiles at 3 stages need 144 KB: fine on an H100 (228 KB),
    too much for an MI300X's 64 KB LDS, so every MI300X variant must shrink them."""
    gemm = _seed("gemm_bias_gelu")
    for target in (H100, MI300X):
        for variant in mutate(gemm, target, n=40, rng=random.Random(5)):
            values = {t.name: t.value for t in find_tunables(variant.source, target)}
            stages = values["num_stages@_gemm_bias_gelu"]
            m, n, k = values["block_m"], values["block_n"], values["block_k"]
            assert stages * (m * k + k * n) * 2 <= target.shared_memory_per_sm_kb * 1024, variant.description


def test_block_choices_are_powers_of_two_around_the_current_value():
    tunables = _by_name(_seed("gelu"))
    assert tunables["block"].choices == [256, 512, 1024, 2048, 4096]
    assert tunables["num_warps@_gelu_tanh_fwd"].value == 4
    assert choices_for(tunables["block"], None) == [256, 512, 1024, 2048, 4096]


def test_variants_are_deterministic_for_a_seed_and_exclude_skips_known_ones():
    source = _seed("gemm_bias_gelu")
    first = mutate(source, H100, n=6, rng=random.Random(42))
    again = mutate(source, H100, n=6, rng=random.Random(42))
    assert [v.source for v in first] == [v.source for v in again]
    assert len(first) == 6
    other_seed = mutate(source, H100, n=6, rng=random.Random(43))
    assert [v.key for v in other_seed] != [v.key for v in first]

    seen = {v.key for v in first}
    fresh = mutate(source, H100, n=6, rng=random.Random(42), exclude=seen)
    assert len(fresh) == 6
    assert not seen & {v.key for v in fresh}


def test_most_moves_change_one_knob_and_some_change_two():
    variants = mutate(_seed("gemm_bias_gelu"), H100, n=16, rng=random.Random(0))
    sizes = [len(v.changes) for v in variants]
    assert len(sizes) == 16
    assert sizes.count(1) > 2 * sizes.count(2) > 0


def test_a_kernel_with_few_choices_stops_when_they_run_out():
    source = _seed("layernorm_forward")  # one knob, num_warps: 5 values on an H100
    variants = mutate(source, H100, n=50, rng=random.Random(0))
    assert sorted(v.changes["num_warps@_layernorm_fwd_row"][1] for v in variants) == [
        "1", "16", "2", "4", "8",
    ]


def test_source_without_knobs_gives_nothing_not_an_error():
    plain = "import torch\n\n\ndef f(x):\n    return x * 2\n"
    assert find_tunables(plain, H100) == []
    assert mutate(plain, H100, n=5, rng=random.Random(0)) == []
    assert "no tunable" in describe_tunables(plain, H100)
    assert find_tunables("def broken(:\n", H100) == []


def test_a_literal_block_written_in_grid_and_launch_moves_in_both():
    source = (
        "def launch(x, n):\n"
        "    k[(triton.cdiv(n, 1024),)](x, n, BLOCK=1024, num_warps=4)  # één\n"
        "    k2[(triton.cdiv(n, 64), triton.cdiv(n, 64))](x, BLOCK_M=64, BLOCK_N=64)\n"
    )
    tunables = _by_name(source)
    assert "BLOCK_M@k2" not in tunables  # which grid literal is whose: ambiguous, left alone
    new = apply_values(source, {"BLOCK@k": 256})
    assert "k[(triton.cdiv(n, 256),)](x, n, BLOCK=256, num_warps=4)  # één" in new


def test_describe_lists_each_knob_with_value_and_choices():
    text = describe_tunables(_seed("gemm_bias_gelu"), MI300X)
    assert "num_warps@_gemm_bias_gelu = 8" in text
    assert "try 1, 2, 4, 8)" in text
    assert "block_m = 128" in text


@pytest.mark.slow
def test_two_rmsnorm_backward_variants_still_pass_verification(tmp_path: Path):
    from kgen.evals.harness import EvalOptions, evaluate

    source = _seed("rmsnorm_backward")
    variants = mutate(source, H100, n=20, rng=random.Random(11))
    # the sum block runs on the CPU too (the program count only on a GPU): test one that moves it
    moves_sum_block = next(v for v in variants if "sum_block" in v.changes)
    other = next(v for v in variants if v is not moves_sum_block)
    options = EvalOptions(device="cpu", small_sizes=True, n_seeds=1, distributions=False)
    for i, variant in enumerate((moves_sum_block, other)):
        path = tmp_path / f"rmsnorm_backward_variant{i}.py"
        path.write_text(variant.source)
        result = evaluate("rmsnorm_backward", path, options)
        assert result.passed, f"{variant.description}: {result.rejection} {result.reason}"
