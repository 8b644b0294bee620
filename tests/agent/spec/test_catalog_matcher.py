"""Request sentence -> KernelSpec by the catalog matcher: phrasings, direction, targets,
backends, sizes and problem files, each read as a person means it or refused with a reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from kgen.agent.spec.catalog_matcher import parse_request
from kgen.agent.spec.kernel_spec import SpecError
from kgen.agent.spec.request_scan import request_direction, requested_backends
from kgen.evals.problem.catalog import catalog

RELU_FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "problems" / "relu_kernelbench.py"

# (request, problem, backend, targets, dtypes, shapes)
PHRASINGS = [
    ("Triton RMSNorm backward for H100", "rmsnorm_backward", "triton", ["h100"], [], {}),
    ("rms norm bwd on h200", "rmsnorm_backward", "triton", ["h200"], [], {}),
    ("backward of rmsnorm for a100", "rmsnorm_backward", "triton", ["a100"], [], {}),
    ("rmsnorm grad, bf16, B200", "rmsnorm_backward", "triton", ["b200"], ["bfloat16"], {}),
    ("RMSNorm for H100", "rmsnorm_forward", "triton", ["h100"], [], {}),
    ("layernorm fwd in bf16 for H100 and MI300X", "layernorm_forward", "triton", ["h100", "mi300x"], ["bfloat16"], {}),
    ("layer norm forward on hopper", "layernorm_forward", "triton", ["h100"], [], {}),
    ("gradient of layer norm for gfx942", "layernorm_backward", "triton", ["mi300x"], [], {}),
    ("LayerNorm-bwd fp16 on H100 PCIe", "layernorm_backward", "triton", ["h100-pcie"], ["float16"], {}),
    ("cross entropy loss for l40s", "cross_entropy_forward", "triton", ["l40s"], [], {}),
    ("cross entropy backward for a100 in fp32", "cross_entropy_backward", "triton", ["a100"], ["float32"], {}),
    ("ce bwd on blackwell", "cross_entropy_backward", "triton", ["b200"], [], {}),
    ("swiglu for h100", "swiglu", "triton", ["h100"], [], {}),
    ("silu and mul on MI300X", "swiglu", "triton", ["mi300x"], [], {}),
    ("softmax on h100 4096x8192", "softmax", "triton", ["h100"], [], {"ROWS": 4096, "COLS": 8192}),
    ("CuTe DSL softmax for B200", "softmax", "cute", ["b200"], [], {}),
    ("cutlass rmsnorm forward on h100", "rmsnorm_forward", "cute", ["h100"], [], {}),
    ("Write me a fast CuTeDSL RMSNorm kernel for H200 in half precision", "rmsnorm_forward", "cute", ["h200"], ["float16"], {}),
    ("embedding rmsnorm backward for h100", "fused_embedding_rmsnorm_backward", "triton", ["h100"], [], {}),
    ("fused embedding + rmsnorm bwd, h100", "fused_embedding_rmsnorm_backward", "triton", ["h100"], [], {}),
    ("nn.Embedding backward bf16 vocab 128256 dim 4096 on h100", "embedding_backward", "triton", ["h100"], ["bfloat16"], {"VOCAB": 128256, "DIM": 4096}),
    ("rotary embedding for h100", "rope_forward", "triton", ["h100"], [], {}),
    ("flash attention head dim 64 seq 4096 on h100", "causal_attention_forward", "triton", ["h100"], [], {"HEAD_DIM": 64, "SEQ": 4096}),
    ("matmul + bias + gelu on a100 with M=128 N=256 K=512", "gemm_bias_gelu", "triton", ["a100"], [], {"M": 128, "N": 256, "K": 512}),
    ("gelu tanh bf16 for sm_90a", "gelu", "triton", ["h100"], ["bfloat16"], {}),
    ("prefix sum on cuda:80", "cumsum", "triton", ["a100"], [], {}),
    ("row sum for nvidia h100 sxm5", "row_sum", "triton", ["h100"], [], {}),
    ("logit softcap on blackwell and hopper", "softcap", "triton", ["b200", "h100"], [], {}),
    ("causal conv1d kernel size 3 for h100", "conv1d", "triton", ["h100"], [], {"KERNEL_SIZE": 3}),
    ("rmsnorm hidden size of 8192 with 4096 tokens on 8 H100s", "rmsnorm_forward", "triton", ["h100"], [], {"HIDDEN": 8192, "ROWS": 4096}),
    ("rmsnrom backward for h100", "rmsnorm_backward", "triton", ["h100"], [], {}),
]


@pytest.mark.parametrize(("text", "problem", "backend", "targets", "dtypes", "shapes"), PHRASINGS, ids=[p[0] for p in PHRASINGS])
def test_matcher_reads_phrasings(text, problem, backend, targets, dtypes, shapes):
    spec = parse_request(text)
    assert (spec.problem, spec.backend, spec.targets, spec.dtypes, spec.shapes) == (
        problem, backend, targets, dtypes, shapes,
    )
    assert spec.source == "matcher" and spec.request == text
    assert spec.operation == next(i.description for i in catalog() if i.name == problem)


def test_every_catalog_name_and_alias_reads_as_its_own_problem():
    wrong = {}
    for info in catalog():
        for typed in (info.name, *info.aliases):
            got = parse_request(typed).problem
            if got != info.name:
                wrong[typed] = got
    assert not wrong


def test_a_backward_request_never_gets_a_forward_problem():
    with pytest.raises(SpecError, match=r"gelu is forward only"):
        parse_request("gelu backward for h100")
    # the best words belong to a forward-only problem: not the backward that matches fewer words
    with pytest.raises(SpecError, match=r"rope_forward is forward only"):
        parse_request("rotary embedding backward")


def test_a_forward_request_never_gets_a_backward_problem():
    with pytest.raises(SpecError, match=r"fused_embedding_rmsnorm_backward is backward only"):
        parse_request("embedding rmsnorm forward on h100")


def test_no_direction_prefers_forward_and_notes_a_backward_only_match():
    assert parse_request("cross entropy").problem == "cross_entropy_forward"
    spec = parse_request("embedding for h100")
    assert spec.problem == "embedding_backward"
    assert any("only as a backward" in note for note in spec.notes)


def test_both_directions_at_once_is_an_error():
    with pytest.raises(SpecError, match="both a forward and a backward"):
        parse_request("softmax forward and backward")
    assert request_direction("rmsnorm grad") == "backward"
    assert request_direction("rmsnorm") is None


def test_empty_request_is_an_error():
    for text in ("", "   "):
        with pytest.raises(SpecError, match="^empty request"):
            parse_request(text)


def test_nonsense_request_names_nearest_problems_and_the_ways_out():
    with pytest.raises(SpecError) as info:
        parse_request("make me a sandwich")
    message = str(info.value)
    assert message.startswith("no catalog problem matches 'make me a sandwich'; nearest: ")
    assert "--problem FILE" in message and "configure a model" in message
    assert "\n" not in message


def test_request_with_no_operation_says_so():
    with pytest.raises(SpecError, match="names no operation"):
        parse_request("triton kernel for h100")


@pytest.mark.parametrize("gpu", ["h900", "V100", "mi250x", "rtx 4090", "sm_75"])
def test_unknown_target_is_an_error_listing_known_targets(gpu):
    with pytest.raises(SpecError) as info:
        parse_request(f"rmsnorm backward for {gpu}")
    assert str(info.value).startswith(f"unknown hardware target '{gpu}'; known: h100, h100-pcie")


def test_unknown_backend_is_an_error():
    with pytest.raises(SpecError, match="unknown backend .cuda.; known: cute, triton"):
        parse_request("CUDA rmsnorm for h100")
    with pytest.raises(SpecError, match="unknown backend .cuda."):
        requested_backends("triton and CUDA softmax")


@pytest.mark.parametrize("text", ["RMSNorm backward for H100, both backends",
                                  "Triton and CuTe RMSNorm backward for H100"])
def test_a_request_for_several_backends_still_reads_as_one_problem(text):
    spec = parse_request(text)
    assert (spec.problem, spec.targets) == ("rmsnorm_backward", ["h100"])
    assert any("run of its own" in note for note in spec.notes), spec.notes


def test_default_target_is_used_and_noted():
    spec = parse_request("softmax")
    assert spec.targets == ["h100"] and "no target named: using h100" in spec.notes
    local = parse_request("softmax", default_target="AMD Instinct MI300X")
    assert local.targets == ["mi300x"] and "no target named: using mi300x" in local.notes
    named = parse_request("softmax on b200", default_target="mi300x")
    assert named.targets == ["b200"] and not any("no target" in n for n in named.notes)
    with pytest.raises(SpecError, match="unknown hardware target 'h900'"):
        parse_request("softmax", default_target="h900")


def test_shape_hints_that_do_not_fit_are_ignored_with_a_note():
    gemm = parse_request("gemm bias gelu 1024x2048x4096 on h100")
    assert gemm.shapes == {} and any("M, N, K order is ambiguous" in n for n in gemm.notes)
    norm = parse_request("rmsnorm 4096x8192x2 vocab 1000 on h100")
    assert norm.shapes == {}
    assert any("3 numbers, but rmsnorm_forward has 2 sizes" in n for n in norm.notes)
    assert any("ignored 'vocab 1000'" in n for n in norm.notes)
    stray = parse_request("rmsnorm backward 4096 on h100")
    assert stray.shapes == {} and any("ignored the number(s) 4096" in n for n in stray.notes)


def test_unused_words_are_noted_so_a_near_miss_is_visible():
    spec = parse_request("rmsnorm with dropout on h100")
    assert spec.problem == "rmsnorm_forward"
    assert "words not used to choose rmsnorm_forward: dropout" in spec.notes
    # the words a request uses to say the fused seam now name it
    assert parse_request("rmsnorm with residual add on h100").problem == "fused_add_rmsnorm_forward"


def test_problem_file_supplies_the_operation(tmp_path):
    spec = parse_request("cute for h200 with dim=1024", problem_file=str(RELU_FIXTURE))
    assert spec.source == "problem_file" and Path(spec.problem) == RELU_FIXTURE
    assert (spec.backend, spec.targets, spec.shapes) == ("cute", ["h200"], {"dim": 1024})
    assert parse_request("", problem_file=str(RELU_FIXTURE)).targets == ["h100"]
    broken = tmp_path / "broken.py"
    broken.write_text("import torch\n\ndef get_inputs(:\n")
    with pytest.raises(SpecError, match="syntax error"):
        parse_request("for h100", problem_file=str(broken))
    with pytest.raises(SpecError, match="not found"):
        parse_request("for h100", problem_file=str(tmp_path / "missing.py"))


def test_a_number_in_the_problem_files_name_is_not_a_stray_size():
    """`kgen solve` names each run after its KernelBench file ("19_ReLU"): that 19 is a name."""
    from pathlib import Path

    level1 = Path(__file__).resolve().parents[2] / "fixtures" / "suite_level1" / "19_ReLU.py"
    spec = parse_request("19_ReLU", default_target="h100", problem_file=str(level1))
    assert not any("ignored the number" in note for note in spec.notes)
    spec = parse_request("19_ReLU at 4096", default_target="h100", problem_file=str(level1))
    assert any("ignored the number(s) 4096" in note for note in spec.notes)
