"""Memory-lean verification: the checks that keep kgen's own device memory near the problem's.

Comparison chunk by chunk must judge exactly as a whole-tensor comparison does (the same
verdict, counts and worst element; norms to fp64 rounding), whatever the chunk boundaries cut
through. Out-of-memory errors are told from other errors by what raised them, and whose they
are by where they were raised. The memory report carries its figures (the peak ratio, each
stage's peak) into the serialised result, and says so when a CPU run measured nothing.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from kgen.evals.checks import compare
from kgen.evals.checks.compare import compare_output, outside_tolerance
from kgen.evals.checks.memory_report import DeviceMemory, is_out_of_memory
from kgen.evals.problem.memory_plan import NOT_MEASURED, MemoryReport, ReferencePlacement
from kgen.evals.verdict import InconclusiveCause

RELU = Path(__file__).resolve().parents[2] / "fixtures" / "problems" / "relu_kernelbench.py"
KERNELBENCH_RELU = Path(__file__).resolve().parents[2] / "fixtures" / "kernelbench" / "level1" / "19_ReLU.py"
#: small enough that every case below spans several chunks, and no case's length is a multiple of it
SMALL_CHUNK = 1000
N = 4099


def _ref(n: int = N, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _with(t: torch.Tensor, index: int, value: float) -> torch.Tensor:
    t = t.clone()
    t.view(-1)[index] = value
    return t


def _cases() -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """(output, fp64 reference): failures of different kinds and correct-but-unusual outputs."""
    ref = _ref()
    inf_ref = _with(ref, 1500, float("inf"))
    grid = _ref(63 * 65, seed=3).reshape(63, 65)
    return {
        # correct
        "exact fp32": (ref.float(), ref),
        "bf16 output of bf16 rounding": (ref.bfloat16(), ref),
        "zero reference, zero output (0/0)": (torch.zeros(N), torch.zeros(N, dtype=torch.float64)),
        "infinite reference matched": (inf_ref.float(), inf_ref),
        "empty": (torch.empty(0), torch.empty(0, dtype=torch.float64)),
        "2-D, small error across chunk edges": ((grid * (1 + 1e-7)).float(), grid),
        # wrong
        "one wrong element in the ragged last chunk": (_with(ref.float(), N - 2, 40.0), ref),
        "one wrong element on a chunk boundary": (_with(ref.float(), SMALL_CHUNK, -7.0), ref),
        "NaN in a middle chunk": (_with(ref.float(), 2500, float("nan")), ref),
        "infinite reference missed": (_with(inf_ref.float(), 1500, 3.0), inf_ref),
        "systematic scale": ((ref * 1.001).float(), ref),
        "fp32 output computed in bf16": (ref.bfloat16().float(), ref),
        "2-D, worst element in the last row": (_with(grid.float(), 63 * 65 - 1, 9.0), grid),
        "+inf where the reference is finite": (_with(ref.float(), 10, float("inf")), ref),
        "-inf in the last chunk": (_with(ref.float(), N - 1, float("-inf")), ref),
        "NaN where the reference is infinite": (_with(inf_ref.float(), 1500, float("nan")), inf_ref),
    }


CASES = _cases()


@pytest.mark.parametrize("name", sorted(CASES))
def test_chunked_comparison_judges_as_one_chunk_does(monkeypatch, name):
    out, ref64 = CASES[name]
    native = ref64.to(out.dtype)
    whole = compare_output(0, out, ref64, native)  # COMPARE_CHUNK far above every case: one chunk
    monkeypatch.setattr(compare, "COMPARE_CHUNK", SMALL_CHUNK)
    chunked = compare_output(0, out, ref64, native)
    exact = ("passed", "mismatched_count", "nonfinite_count", "worst_index", "max_abs_error", "mismatched_fraction")
    assert {k: getattr(chunked, k) for k in exact} == {k: getattr(whole, k) for k in exact}, name
    for norm in ("rel_l2_error", "reference_dtype_rel_l2_error"):
        a, b = getattr(chunked, norm), getattr(whole, norm)
        assert a == b or math.isclose(a, b, rel_tol=1e-12), (name, norm, a, b)
    # the elementwise bound counted chunk by chunk is the whole-tensor mask's count
    assert chunked.mismatched_count == int(outside_tolerance(out, ref64).sum()), name


def test_the_cases_cover_both_verdicts():
    verdicts = {name: compare_output(0, out, ref64).passed for name, (out, ref64) in CASES.items()}
    assert sum(verdicts.values()) == 6 and len(verdicts) - sum(verdicts.values()) == 10, verdicts


def _oom(size: int) -> BaseException:
    try:
        torch.empty(size, dtype=torch.uint8)
    except BaseException as exc:  # noqa: BLE001 - the allocator's real failure is the case
        return exc
    raise AssertionError("the allocation succeeded")


@pytest.mark.parametrize(
    ("exc", "oom"),
    [
        (_oom(2**50), True),  # the host allocator: a RuntimeError, "can't allocate memory"
        (_oom(2**62), True),
        (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 12.00 GiB"), True),
        (torch.AcceleratorError("CUDA error: out of memory"), True),
        (MemoryError(), True),
        (RuntimeError("The size of tensor a (3) must match the size of tensor b (4)"), False),
        (RuntimeError("CUDA error: an illegal memory access was encountered"), False),
        (ValueError("pretend: out of memory"), False),
        (IndexError("index 5 is out of bounds"), False),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else str(v),
)
def test_out_of_memory_is_told_by_what_raised_it(exc, oom):
    assert is_out_of_memory(exc) is oom, repr(exc)


def test_shared_memory_out_of_resources_is_not_out_of_memory():
    """A kernel's block too large for shared memory is the candidate's error, not an OOM."""
    from triton.runtime.errors import OutOfResources

    assert not is_out_of_memory(OutOfResources(200000, 101376, "shared memory"))


def _memory() -> DeviceMemory:
    return DeviceMemory(torch, torch.device("cpu"), str(RELU))


def test_whose_oom_follows_where_it_was_raised_and_what_kgen_held():
    memory = _memory()
    memory.report.inputs_bytes = memory.report.outputs_bytes = 10**9
    exc = _oom(2**50)
    candidate = memory.whose_oom(exc, "seed 0", by_candidate=True, held_before=None)
    within_plan = memory.whose_oom(exc, "seed 0", by_candidate=True, held_before=5 * 10**9)
    over_plan = memory.whose_oom(exc, "seed 0", by_candidate=True, held_before=7 * 10**9)
    own = memory.whose_oom(exc, "during correctness", by_candidate=False, held_before=None)
    assert candidate.cause is within_plan.cause is InconclusiveCause.CANDIDATE_OOM
    assert "candidate's own allocation" in str(candidate) and "kgen held 5.00 GB" in str(within_plan)
    # kgen already held more than 3x the problem when the candidate asked: kgen's fault
    assert over_plan.cause is own.cause is InconclusiveCause.HARNESS_OOM
    assert "not the candidate's fault" in str(own) and "can't allocate memory" in str(own)


def test_a_cpu_run_says_its_peak_was_not_measured():
    memory = _memory()
    assert memory.placement({"batch_size": 16, "dim": 1024}) is ReferencePlacement.DEVICE
    memory.stage_ended("correctness")
    report = memory.finish()
    assert report.peak_bytes is None and report.peak_ratio is None and report.stage_peaks == {}
    assert NOT_MEASURED in report.notes and report.describe() == NOT_MEASURED


def test_the_peak_ratio_is_part_of_the_serialised_report():
    report = MemoryReport(device="cuda:0", inputs_bytes=6 * 10**9, outputs_bytes=6 * 10**9,
                          peak_bytes=30 * 10**9, stage_peaks={"correctness": 30 * 10**9, "timing": 13 * 10**9})
    dumped = report.model_dump(mode="json")
    assert dumped["peak_ratio"] == 2.5 and dumped["stage_peaks"]["timing"] == 13 * 10**9
    again = MemoryReport.model_validate_json(report.model_dump_json())  # a stored result loads back
    assert again == report and again.peak_ratio == 2.5
    assert "2.50x" in again.describe()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="measures the device allocator")
def test_each_stage_peak_is_its_own_and_the_run_peak_is_their_maximum():
    device = torch.device("cuda")
    memory = DeviceMemory(torch, device, str(RELU))
    big = torch.empty(256 << 20, dtype=torch.uint8, device=device)
    del big
    memory.stage_ended("correctness")
    small = torch.empty(16 << 20, dtype=torch.uint8, device=device)
    memory.stage_ended("timing")
    report = memory.finish()
    del small
    assert report.stage_peaks["correctness"] >= 256 << 20
    assert 16 << 20 <= report.stage_peaks["timing"] < report.stage_peaks["correctness"]
    assert report.peak_bytes == report.stage_peaks["correctness"]
    assert NOT_MEASURED not in report.notes


def _changed(t: torch.Tensor, index: tuple[int, ...], value: float) -> torch.Tensor:
    t = t.clone()
    t[index] = value
    return t


def _slab_cases() -> dict[str, tuple[torch.Tensor, torch.Tensor, bool]]:
    """(before, after, same): changes a mutation check must see wherever the slabs cut, and
    equal tensors it must not flag, in layouts the inputs come in."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(37, 11, 3, generator=g)  # 33 elements a row: slabs of 3 rows at a 100-element chunk
    strided = torch.randn(40, 29, generator=g).t()  # a transposed view: not contiguous
    with_nan = _changed(x, (20, 0, 0), float("nan"))
    ints = torch.randint(0, 9, (51, 7), generator=g)
    return {
        "equal": (x, x.clone(), True),
        "equal, NaN in both": (with_nan, with_nan.clone(), True),
        "equal, strided": (strided, strided.clone(), True),
        "equal, integers": (ints, ints.clone(), True),
        "last row of the ragged last slab": (x, _changed(x, (36, 10, 2), 1.5), False),
        "first row of a middle slab": (x, _changed(x, (3, 0, 0), 1.5), False),
        "a NaN written": (x, with_nan, False),
        "sign of zero only": (torch.zeros(37, 11, 3), _changed(torch.zeros(37, 11, 3), (30, 5, 1), -0.0), False),
        "one ulp": (x, _changed(x, (12, 4, 1), float(torch.nextafter(x[12, 4, 1], torch.tensor(9.0)))), False),
        "strided, last column": (strided, _changed(strided, (28, 39), 2.0), False),
        "integers, one element": (ints, _changed(ints, (50, 6), 9), False),
    }


SLAB_CASES = _slab_cases()


@pytest.mark.parametrize("name", sorted(SLAB_CASES))
def test_the_mutation_check_compares_every_element_slab_by_slab(monkeypatch, name):
    from kgen.evals.checks import candidate_call
    before, after, same = SLAB_CASES[name]
    whole = candidate_call.same_values(before, after)
    monkeypatch.setattr(candidate_call, "FINGERPRINT_CHUNK", 100)
    assert candidate_call.same_values(before, after) is whole is same, name
    assert candidate_call.same_values(after, before) is same, name


class _Fresh:
    """Right: a new output every call."""

    def __call__(self, x):
        return [x * 2]


class _TwoBuffersInTurn:
    def __init__(self):
        self.buffers, self.calls = [None, None], 0

    def __call__(self, x):
        k, self.calls = self.calls % 2, self.calls + 1
        if self.buffers[k] is None:
            self.buffers[k] = torch.empty_like(x)
        return [torch.mul(x, 2, out=self.buffers[k])]


class _Persistent:
    def __init__(self):
        self.out = None

    def __call__(self, x):
        self.out = torch.empty_like(x) if self.out is None else self.out
        return [torch.mul(x, 2, out=self.out)]


class _ScribblesOnTheLastResult:
    """Returns a fresh output, but keeps the last one and zeroes its tail on the next call."""

    def __init__(self):
        self.last = None

    def __call__(self, x):
        if self.last is not None:
            self.last[-1:] = 0
        self.last = x * 2
        return [self.last]


class _ReturnsItsInput:
    """The reference's own view of the input (skipped: it changes with the input by design)."""

    def __call__(self, x):
        return [x.view(-1), x * 2]


KEEP_CASES = {"fresh": (_Fresh, None), "two buffers in turn": (_TwoBuffersInTurn, 0),
              "persistent buffer": (_Persistent, 0), "scribbles on the kept result": (_ScribblesOnTheLastResult, 0),
              "returns a view of its input": (_ReturnsItsInput, None)}


@pytest.mark.parametrize("hold_all", [True, False], ids=["all held", "older ones weak"])
@pytest.mark.parametrize("name", sorted(KEEP_CASES))
def test_kept_outputs_see_every_overwrite_held_or_weakly_kept(name, hold_all):
    from kgen.evals.checks.kept_outputs import KeptOutputs

    make, first_changed_call = KEEP_CASES[name]
    candidate, kept = make(), KeptOutputs(torch.device("cpu"), hold_all=hold_all)
    x = torch.arange(1.0, 9.0)
    for call in range(4):
        x.add_(1.0)
        kept.add(f"call {call}", candidate(x), skip={0} if make is _ReturnsItsInput else set())
    expected = None if first_changed_call is None else (f"call {first_changed_call}", 0)
    assert kept.first_changed() == expected, name


def test_without_room_only_the_last_calls_outputs_stay_held():
    import weakref

    from kgen.evals.checks.kept_outputs import HELD_CALLS, KeptOutputs

    candidate, kept = _Fresh(), KeptOutputs(torch.device("cpu"), hold_all=False)
    refs = []
    for _ in range(5):
        out = candidate(torch.randn(16))
        refs.append(weakref.ref(out[0]))
        kept.add("call", out)
        del out
    alive = [r() is not None for r in refs]
    assert alive == [False] * (5 - HELD_CALLS) + [True] * HELD_CALLS
    assert kept.first_changed() is None


def _as_if_on(free_bytes: int, path: Path) -> DeviceMemory:
    """A device memory book that plans as a GPU with ``free_bytes`` free would (nothing is
    allocated by planning, so the decisions can be checked here)."""
    memory = DeviceMemory(torch, torch.device("cpu"), str(path))
    memory.on_gpu = True
    memory.report.free_bytes_at_start = free_bytes
    memory.report.notes.clear()
    return memory


def test_a_problem_whose_reference_needs_the_host_runs_one_full_trial_and_the_rest_smaller():
    from kgen.evals.problem.format import read_problem
    from kgen.evals.problem.memory_plan import (
        DISTRIBUTION_BYTES,
        TARGET_PEAK_RATIO,
        choose_placement,
        plan_memory,
    )

    path = KERNELBENCH_RELU
    info = read_problem(path)
    memory = _as_if_on(79 * 10**9, path)
    full = dict(info.sizes)
    scaled = memory.scaled(info, full)
    assert scaled is not None and scaled["dim"] == full["dim"] and scaled["batch_size"] < full["batch_size"]
    decision = choose_placement(plan_memory(path, scaled), 79 * 10**9)
    assert decision.placement.value == "device"
    # within the target against the full problem's own inputs + outputs
    assert decision.predicted_peak_bytes <= TARGET_PEAK_RATIO * plan_memory(path).problem_bytes
    drawn = memory.distribution_sizes(info, scaled)
    assert drawn is not None and drawn["dim"] == full["dim"]
    assert plan_memory(path, drawn).problem_bytes <= DISTRIBUTION_BYTES
    assert len(memory.report.scaled_sizes) == 2 and len(memory.report.notes) >= 2
    assert any("ghost check" in note for note in memory.report.notes)
    # small sizes: nothing scaled
    small = _as_if_on(79 * 10**9, path)
    assert small.scaled(info, {"batch_size": 64, "dim": 4096}) is None
    assert small.distribution_sizes(info, {"batch_size": 64, "dim": 4096}) is None
    # and a CPU run never scales
    assert _memory().scaled(info, full) is None
