"""Every form of size constant a problem file writes is seen, rebound, shrunk on the CPU and
kept consistent: tuples and lists, chains, unpackings, augmented and derived constants; and
what is not a size (negative, bool, float, string, KGEN_* metadata) is never keyed."""

import ast
import textwrap
from pathlib import Path

import pytest
import torch

from kgen.backends.device import Device
from kgen.evals.problem.format import CPU_SIZE_CAP, load_problem, read_problem
from kgen.evals.problem.size_constants import (
    base_name,
    read_size_constants,
    rebind,
    resolved_sizes,
    size_constants,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "problems"
#: Unmodified KernelBench files (ScalingIntelligence/KernelBench, commit 423217d9).
KERNELBENCH = sorted(FIXTURES.glob("kb_*.py"))

TAIL = """
class Model(nn.Module):
    def forward(self, x):
        return x

def get_inputs():
    return [torch.zeros(1)]

def get_init_inputs():
    return []
"""


def _sizes(body: str) -> dict[str, int]:
    return size_constants(ast.parse(textwrap.dedent(body)))


def _write(tmp_path, body: str, name="p.py"):
    path = tmp_path / name
    path.write_text("import torch\nimport torch.nn as nn\n" + textwrap.dedent(body) + TAIL)
    return path


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("batch_size = 16", {"batch_size": 16}),
        ("M = 1024 * 2", {"M": 2048}),
        ("N: int = 4096", {"N": 4096}),
        ("input_shape = (32768,)", {"input_shape[0]": 32768}),
        ("kernel_size = (3, 5)", {"kernel_size[0]": 3, "kernel_size[1]": 5}),
        ("input_shape = (8192 * 2,)", {"input_shape[0]": 16384}),
        ("dim = [1, 2]", {"dim[0]": 1, "dim[1]": 2}),
        ("height = width = 128", {"height": 128, "width": 128}),
        ("a = b = c = 7", {"a": 7, "b": 7, "c": 7}),
        ("depth, height, width = 24, 48, 48", {"depth": 24, "height": 48, "width": 48}),
        ("D, H, W = (16, 32, 32)", {"D": 16, "H": 32, "W": 32}),
        ("[H, W] = [8, 9]", {"H": 8, "W": 9}),
        ("N = 1024\nN *= 4", {"N": 4096}),
        ("N = 1024\nN = N * 4", {"N": 4096}),
        ("N = 64\nN <<= 2", {"N": 256}),
        ("M = 256\nK = M * 2", {"M": 256, "K": 512}),
        ("M = 256; K = M // 2", {"M": 256, "K": 128}),
        ("features, dim1, dim2 = 64, 256, 256\nnormalized_shape = (features, dim1, dim2)",
         {"features": 64, "dim1": 256, "dim2": 256,
          "normalized_shape[0]": 64, "normalized_shape[1]": 256, "normalized_shape[2]": 256}),
        ("batch_size = 8\ninput_shape = (4, 5)\nshape = (batch_size, *input_shape)",
         {"batch_size": 8, "input_shape[0]": 4, "input_shape[1]": 5, "shape[0]": 8, "shape[1]": 4, "shape[2]": 5}),
        ("input_shape = (4, 5)\nrows = input_shape[0] * 2", {"input_shape[0]": 4, "input_shape[1]": 5, "rows": 8}),
        ("shape = (2,) * 3", {"shape[0]": 2, "shape[1]": 2, "shape[2]": 2}),
    ],
)
def test_every_form_of_size_constant_is_seen(body, expected):
    assert _sizes(body) == expected


@pytest.mark.parametrize(
    "body",
    [
        "hardtanh_min = -1",
        "clamp_min = -10.0",
        "scale = 2.0",
        "eps = 1e-5",
        "flag = True",
        "reduction = 'mean'",
        "KGEN_PROBE = 4",
        "KGEN_SMALL_SIZES = {'N': 4}",
        "seed = torch.initial_seed()",
        "N = 4\nN = 4.0",  # rebound to a float: no longer a constant
        "N = 4\nfor i in range(3):\n    N = N + i",  # changed in a loop: not a constant
        "shape = (*unknown, 4)",
    ],
)
def test_what_is_not_a_size_is_never_keyed(body):
    assert _sizes(body) == {}


def test_a_tuple_keys_only_its_size_elements_and_keeps_their_places():
    assert _sizes("view = (-1, 2.0, 64, 'x')") == {"view[2]": 64}


def test_derived_constants_are_marked_and_free_ones_are_not():
    found = {c.key: c.derived for c in read_size_constants(ast.parse(textwrap.dedent("""
        in_channels = 128
        groups = in_channels
        bias_shape = (in_channels, 1, 1)
        N = 1024
        N *= 4
        M = 2 ** 10
    """)))}
    assert found == {"in_channels": False, "groups": True, "bias_shape[0]": True, "bias_shape[1]": False,
                     "bias_shape[2]": False, "N": False, "M": False}


def test_base_name_of_an_element_key():
    assert base_name("input_shape[0]") == "input_shape" and base_name("batch_size") == "batch_size"


@pytest.mark.parametrize(
    ("body", "rebound", "expected"),
    [
        # a chain splits: the other name keeps its value
        ("height = width = 256", {"height": 8}, {"height": 8, "width": 256}),
        ("depth, height, width = 24, 48, 48", {"width": 5}, {"depth": 24, "height": 48, "width": 5}),
        # an augmented constant holds the rebound value, whatever it is multiplied by
        ("N = 1024\nN *= 4", {"N": 9}, {"N": 9}),
        # rebinding the base: derived ones follow; rebinding a derived one overrides it
        ("M = 256\nK = M * 2", {"M": 8}, {"M": 8, "K": 16}),
        ("M = 256\nK = M * 2", {"K": 7}, {"M": 256, "K": 7}),
        ("M = 256\nK = M * 2", {"M": 8, "K": 7}, {"M": 8, "K": 7}),
        ("input_shape = (32768,)", {"input_shape[0]": 128}, {"input_shape[0]": 128}),
        ("kernel_size = (3, 5)", {"kernel_size[1]": 7}, {"kernel_size[0]": 3, "kernel_size[1]": 7}),
        ("C = 64\nbias_shape = (C, 1, 1)", {"C": 3}, {"C": 3, "bias_shape[0]": 3, "bias_shape[1]": 1, "bias_shape[2]": 1}),
        ("B = 8\ninput_shape = (4,)\nshape = (B, *input_shape)", {"input_shape[0]": 2},
         {"B": 8, "input_shape[0]": 2, "shape[0]": 8, "shape[1]": 2}),
        ("n = 3\nshape = (2,) * n", {"n": 4}, {"n": 4, "shape[0]": 2, "shape[1]": 2, "shape[2]": 2, "shape[3]": 2}),
        ("mixed = (-1, 2.0, 64)", {"mixed[2]": 5}, {"mixed[2]": 5}),
    ],
)
def test_rebinding_each_form(body, rebound, expected):
    tree = ast.parse(textwrap.dedent(body))
    assert resolved_sizes(tree, rebound) == expected


def test_rebinding_keeps_lists_lists_and_other_elements_as_written():
    tree = ast.parse("dims = [0, 2]\nmixed = (-1, 2.5, 64)\n")
    namespace: dict = {}
    exec(compile(rebind(tree, {"dims[1]": 3, "mixed[2]": 5}), "<p>", "exec"), namespace)
    assert namespace["dims"] == [0, 3] and namespace["mixed"] == (-1, 2.5, 5)


def test_rebinding_leaves_the_parsed_tree_alone():
    tree = ast.parse("N = 4\n")
    rebind(tree, {"N": 2})
    assert ast.unparse(tree) == "N = 4"


def test_cpu_sizes_shrink_tuple_elements_chains_and_unpackings(tmp_path):
    info = read_problem(_write(tmp_path, """
        batch_size = 32768
        input_shape = (32768,)
        height = width = 512
        D, H, W = 16, 300, 64
        N = 1024
        N *= 4
        dim = 1
    """))
    assert info.cpu_sizes() == {"batch_size": 128, "input_shape[0]": 128, "height": 128, "width": 128,
                                "D": 16, "H": 75, "W": 64, "N": 128, "dim": 1}


def test_cpu_sizes_keep_derived_relations(tmp_path):
    info = read_problem(_write(tmp_path, """
        M = 256
        K = M * 2
        in_channels = 512
        groups = in_channels
        num_classes = 4096
        input_shape = (num_classes,)
        bias_shape = (in_channels, 1, 1)
    """))
    cpu = info.cpu_sizes()
    assert cpu["M"] == 128 and cpu["K"] == 256  # K = 2 * M holds, though K is above the cap
    assert cpu["groups"] == cpu["in_channels"] == 128  # depthwise stays depthwise
    assert cpu["input_shape[0]"] == cpu["num_classes"] == 128
    assert (cpu["bias_shape[0]"], cpu["bias_shape[1]"], cpu["bias_shape[2]"]) == (128, 1, 1)
    assert info.derived_sizes == ["K", "groups", "input_shape[0]", "bias_shape[0]"]
    assert load_problem(info.path, cpu).sizes == cpu


def test_small_sizes_naming_a_base_make_derived_ones_follow(tmp_path):
    info = read_problem(_write(tmp_path, """
        M = 256
        K = M * 2
        KGEN_SMALL_SIZES = {"M": 5}
    """))
    assert info.cpu_sizes() == {"M": 5, "K": 10}


def test_halving_keeps_powers_of_two_relations(tmp_path):
    info = read_problem(_write(tmp_path, """
        channels = 768
        groups = 3
        kernel_size = (1024, 3)
    """))
    cpu = info.cpu_sizes()
    assert cpu == {"channels": 96, "groups": 3, "kernel_size[0]": 128, "kernel_size[1]": 3}
    assert cpu["channels"] % cpu["groups"] == 0


def test_a_problem_loads_with_its_tuple_element_rebound(tmp_path):
    path = tmp_path / "cumsum.py"
    path.write_text(textwrap.dedent("""
        import torch
        import torch.nn as nn

        class Model(nn.Module):
            def __init__(self, dim):
                super().__init__()
                self.dim = dim

            def forward(self, x):
                return torch.cumsum(x, dim=self.dim)

        batch_size = 32768
        input_shape = (32768,)
        dim = 1

        def get_inputs():
            return [torch.rand(batch_size, *input_shape)]

        def get_init_inputs():
            return [dim]
    """))
    info = read_problem(path)
    problem = load_problem(path, info.cpu_sizes())
    assert problem.get_inputs()[0].shape == (128, 128)
    assert problem.sizes == {"batch_size": 128, "input_shape[0]": 128, "dim": 1}


@pytest.mark.parametrize("path", KERNELBENCH, ids=lambda p: p.stem)
def test_kernelbench_files_load_at_their_cpu_sizes(path):
    info = read_problem(path)
    cpu = info.cpu_sizes()
    assert all(v <= CPU_SIZE_CAP for k, v in cpu.items() if k not in info.derived_sizes)
    problem = load_problem(path, cpu)
    assert problem.sizes == cpu
    torch.manual_seed(0)
    inputs = problem.get_inputs()
    assert inputs and all(torch.is_tensor(x) for x in inputs)


def test_kernelbench_forms_are_read():
    sizes = {p.stem: read_problem(p).sizes for p in KERNELBENCH}
    assert sizes["kb_89_cumsum"] == {"batch_size": 32768, "input_shape[0]": 32768, "dim": 1}
    assert sizes["kb_10_convtranspose2d_maxpool_hardtanh"]["height"] == 256  # height = width = 256
    assert sizes["kb_10_convtranspose2d_maxpool_hardtanh"]["width"] == 256
    assert "hardtanh_min" not in sizes["kb_10_convtranspose2d_maxpool_hardtanh"]  # -1
    assert {k: sizes["kb_100_convtranspose3d_clamp_min_divide"][k] for k in ("depth", "height", "width")} == {
        "depth": 24, "height": 48, "width": 48}  # depth, height, width = 24, 48, 48
    assert "min_value" not in sizes["kb_100_convtranspose3d_clamp_min_divide"]  # -1.0
    assert read_problem(FIXTURES / "kb_85_conv_depthwise_2d.py").derived_sizes == ["groups"]
    tuples = sizes["kb_75_conv_transposed_2d_tuples"]
    assert (tuples["kernel_size[0]"], tuples["kernel_size[1]"], tuples["dilation[1]"]) == (3, 5, 1)


def test_kernelbench_cumsum_long_axis_is_shrunk_on_the_cpu():
    """The 32768-long scanned axis lives in a tuple; unseen, it kept a correct kernel past its time limit."""
    info = read_problem(FIXTURES / "kb_89_cumsum.py")
    problem = load_problem(info.path, info.cpu_sizes())
    assert problem.get_inputs()[0].shape == (128, 128)


def test_problems_show_table_lists_each_element_with_its_values():
    from rich.console import Console

    from kgen.cli.size_table import size_table
    from kgen.evals.problem.size_sets import cpu_small_set, verification_size_plan

    info = read_problem(FIXTURES / "kb_26_convtranspose3d_add_hardswish.py")
    plans = {"cuda": verification_size_plan(info, Device.CUDA)}
    console = Console(width=200, record=True)
    console.print(size_table(info, plans))
    lines = console.export_text().splitlines()
    row = next(line for line in lines if line.split()[:1] == ["bias_shape"])
    assert "(64, 1, 1, 1, 1)" in row
    cpu = cpu_small_set(info)  # the CPU column: the small set a CPU verification uses
    assert any(line.split()[:3] == ["[0]", "64", str(cpu["bias_shape[0]"])] and "derived" in line for line in lines)
    assert any(line.split()[:1] == ["[4]"] and "broadcast" in line for line in lines)
    batch = next(line for line in lines if line.split()[:1] == ["batch_size"])
    assert batch.split()[1:3] == ["128", str(cpu["batch_size"])] and "129" in batch
