"""How much device memory verifying a problem takes, known before anything is allocated.

KernelBench's level-1 sizes were enlarged until single inputs are gigabytes (ReLU: 4096 x
393216 fp32, 6.4 GB). kgen's checks hold more than the problem itself — a pristine copy of
the inputs for the mutation check, the candidate's outputs from two calls, the reference in
the problem's dtypes and in fp64 — and with everything on the device a 6.4 GB input took
~72 GB of an 80 GB H100. So the plan comes first, from meta tensors (shapes and dtypes, no
storage): the problem's inputs, outputs and parameters, what each way of running the checks
would hold on the device, and the choice between them for the memory the device has free.

Two ways to run the reference (:class:`ReferencePlacement`):

* ``device``: the reference and its fp64 twin run beside the candidate (fast; the default
  whenever it fits);
* ``host``: the reference runs on the host in fp64, the pristine input copy is kept on the
  host, and each comparison brings the candidate's output to the host; the device then holds
  only the inputs, the candidate's copy of them and its outputs (about 2x the inputs plus 3x
  the outputs: under the 3x-of-inputs-plus-outputs target).

Where even ``host`` does not fit, kgen cannot judge the problem on this device: the verdict is
``inconclusive (harness_oom)`` before the candidate runs, never a rejection.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, computed_field

from kgen.evals.problem.format import load_problem

#: The peak kgen aims for, as a multiple of the problem's inputs + outputs.
TARGET_PEAK_RATIO = 3.0
#: Share of the device's free memory a plan may use: the allocator's fragmentation, the
#: CUDA context's own growth and the candidate's scratch buffers need the rest.
DEVICE_HEADROOM = 0.8
#: A device peak under this is kept on the device whatever its multiple of the problem: the
#: target matters where the multiple threatens the device, not for a 1 MB problem's 20 MB.
SMALL_PEAK_BYTES = 8 * 10**9
#: On a GPU, the input distributions other than ``normal`` (drawn on the host) run at sizes
#: holding at most this many bytes of inputs + outputs (``DeviceMemory.distribution_sizes``).
DISTRIBUTION_BYTES = 512 * 2**20
#: A CPU run's memory note: there is no device allocator to measure (``peak_bytes`` stays None).
NOT_MEASURED = "device peak not measured on the CPU"


class ReferencePlacement(str, Enum):
    DEVICE = "device"
    HOST = "host"


class MemoryPlan(BaseModel):
    """A problem's memory at one set of sizes, from meta tensors."""

    sizes: dict[str, int] = Field(default_factory=dict)
    inputs_bytes: int = 0
    #: None: the reference's forward could not run on meta tensors (an op without a meta kernel)
    outputs_bytes: int | None = None
    parameters_bytes: int = 0
    #: bytes of the inputs and outputs were they fp64 (the reference's twin), floating point only
    inputs_fp64_bytes: int = 0
    outputs_fp64_bytes: int | None = None
    #: why the plan is partial ("" when complete)
    note: str = ""

    @property
    def problem_bytes(self) -> int:
        """The problem's own footprint: its inputs and outputs (the ≤ 3x target's unit)."""
        return self.inputs_bytes + (self.outputs_bytes or 0)

    def device_peak(self, placement: ReferencePlacement) -> int:
        """What kgen's checks hold on the device at once, by placement.

        ``device``: the inputs, the candidate's copy and the pristine copy (3 I), parameters of
        reference and candidate and the fp64 twin's, the candidate's outputs of two calls plus
        the last trial's kept for the stale-output check (3 O), the reference's outputs (O),
        the fp64 inputs and outputs (I64 + O64), and one fp64 output of comparison scratch;
        the call sequence's six outputs (their copies on the host) hold less than that.
        ``host``: the inputs and the candidate's copy (2 I), parameters twice, the outputs of
        two calls and the last trial's (3 O); the ghost check holds as much (a real run's, a
        ghost run's and the tensors its launches were handed, the first run's moved to the host),
        and the call sequence too (the last two calls' outputs beside the current, ``kept_outputs.py``).
        """
        i, o, p = self.inputs_bytes, self.outputs_bytes or 0, self.parameters_bytes
        o64 = self.outputs_fp64_bytes or 0
        if placement is ReferencePlacement.DEVICE:
            return 3 * i + 3 * p + 4 * o + self.inputs_fp64_bytes + 2 * o64
        return 2 * i + 2 * p + 3 * o

    def host_peak(self, placement: ReferencePlacement) -> int:
        """What the host holds for the checks: nothing much with a device reference; with a host
        reference, the pristine inputs, the fp64 inputs, parameters and outputs, and one output
        brought over for comparison with its fp64 difference."""
        if placement is ReferencePlacement.DEVICE:
            return 0
        i, o, o64 = self.inputs_bytes, self.outputs_bytes or 0, self.outputs_fp64_bytes or 0
        return i + self.inputs_fp64_bytes + 2 * self.parameters_bytes + 2 * o + 3 * o64


class MemoryDecision(BaseModel):
    placement: ReferencePlacement
    #: the predicted device peak for that placement, and the memory it was judged against
    predicted_peak_bytes: int
    budget_bytes: int | None
    fits: bool
    why: str


class MemoryReport(BaseModel):
    device: str = "cpu"
    #: the problem's inputs and outputs at the largest sizes verified (from the plan)
    inputs_bytes: int = 0
    outputs_bytes: int | None = None
    #: the device's peak over the whole evaluation; None on a CPU run (not measured)
    peak_bytes: int | None = None
    #: free device memory when the verifier started
    free_bytes_at_start: int | None = None
    #: where the fp64 reference ran, per size set ("device" or "host"), and why
    placements: dict[str, str] = Field(default_factory=dict)
    #: each stage's own device peak: the whole run's peak alone does not say which check held it
    stage_peaks: dict[str, int] = Field(default_factory=dict)
    #: "sizes (which checks)" -> the smaller sizes those checks ran at instead of the sizes
    #: named (``DeviceMemory.scaled``, ``DeviceMemory.distribution_sizes``); the notes say why
    scaled_sizes: dict[str, dict[str, int]] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)

    @property
    def problem_bytes(self) -> int:
        return self.inputs_bytes + (self.outputs_bytes or 0)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def peak_ratio(self) -> float | None:
        """Peak over inputs + outputs (None when either is unknown)."""
        if self.peak_bytes is None or not self.problem_bytes:
            return None
        return self.peak_bytes / self.problem_bytes

    def describe(self) -> str:
        if self.peak_bytes is None:
            return NOT_MEASURED
        ratio = self.peak_ratio
        return (f"device peak {self.peak_bytes / 1e9:.2f} GB"
                + (f" ({ratio:.2f}x the problem's inputs + outputs)" if ratio is not None else ""))


def _bytes(value: Any) -> int:
    import torch

    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (list, tuple)):
        return sum(_bytes(v) for v in value)
    if isinstance(value, dict):
        return sum(_bytes(v) for v in value.values())
    return 0


def _fp64_bytes(value: Any) -> int:
    import torch

    if isinstance(value, torch.Tensor):
        return value.numel() * 8 if value.is_floating_point() else _bytes(value)
    if isinstance(value, (list, tuple)):
        return sum(_fp64_bytes(v) for v in value)
    if isinstance(value, dict):
        return sum(_fp64_bytes(v) for v in value.values())
    return 0


def _recurrent_outputs(module: Any):
    """A stand-in forward for a recurrent layer on meta tensors: its outputs' shapes follow from
    its configuration, while its own forward unrolls every time step in Python (6-15 s for
    KernelBench's LSTMs). ``None`` for an input it does not describe (a packed sequence)."""
    import torch

    def forward(x: Any, hx: Any = None):
        if not isinstance(x, torch.Tensor) or x.dim() not in (2, 3):
            return None
        batched = x.dim() == 3
        length, batch = (x.shape[1], x.shape[0]) if module.batch_first else (x.shape[0], x.shape[1])
        if not batched:
            length, batch = x.shape[0], None
        directions = 2 if module.bidirectional else 1
        out_size = getattr(module, "proj_size", 0) or module.hidden_size
        out_shape = (batch, length) if module.batch_first else (length, batch)
        out_shape = (*((length,) if not batched else out_shape), directions * out_size)
        state = (directions * module.num_layers, *((batch,) if batched else ()))

        def empty(*shape: int):
            return torch.empty(shape, dtype=x.dtype, device="meta")

        output = empty(*out_shape)
        if module.mode == "LSTM":
            return output, (empty(*state, out_size), empty(*state, module.hidden_size))
        return output, empty(*state, module.hidden_size)

    return forward


def _shape_only_recurrences(model: Any) -> None:
    """Gives each recurrent layer of ``model`` (a meta copy the plan owns) the shape-only
    forward of :func:`_recurrent_outputs`, falling back to its own where that cannot say."""
    import torch

    for module in model.modules():
        if isinstance(module, torch.nn.RNNBase):
            quick, own = _recurrent_outputs(module), module.forward

            def forward(*args: Any, _quick=quick, _own=own, **kwargs: Any):
                result = _quick(*args, **kwargs)
                return _own(*args, **kwargs) if result is None else result

            module.forward = forward


def warm_meta() -> None:
    """A small forward and backward on meta tensors: a process's first one loads torch's meta
    kernels and decompositions (about 1 s, 5 s on a busy host), which a verifier started ahead
    of need (``worker_pool.py``) pays while it waits instead of inside a timed evaluation."""
    import torch

    with torch.device("meta"):
        x = torch.randn(8, 8, requires_grad=True)
        w = torch.randn(8, requires_grad=True)
        (torch.softmax(x @ x.T, -1) * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w).sum().backward()


def plan_memory(path: str | Path, sizes: dict[str, int] | None = None) -> MemoryPlan:
    """The plan at ``sizes`` (default: the problem's own), with nothing allocated.

    ``get_inputs()``, ``Model(*get_init_inputs())`` and the forward run under
    ``torch.device("meta")``: factory calls then make meta tensors. A problem that builds
    inputs another way (a host tensor it converts, a numpy array) still yields its real
    tensors' sizes; a forward that cannot run on meta leaves ``outputs_bytes`` unknown.
    """
    import torch

    problem = load_problem(path, sizes)
    plan = MemoryPlan(sizes=dict(problem.sizes))
    with torch.device("meta"):
        inputs = problem.get_inputs()
        plan.inputs_bytes, plan.inputs_fp64_bytes = _bytes(inputs), _fp64_bytes(inputs)
        try:
            model = problem.model_class(*problem.get_init_inputs())
        except Exception:  # noqa: BLE001 - the problem's own code (an .item() while building)
            model = None
    if model is None:
        # Built for real on the host (its parameters are small next to the inputs), then moved to meta.
        try:
            model = problem.model_class(*problem.get_init_inputs()).to("meta")
        except Exception as exc:  # noqa: BLE001
            plan.note = f"Model(*get_init_inputs()) does not build ({type(exc).__name__}: {str(exc)[:120]})"
            return plan
    with torch.device("meta"):
        if isinstance(model, torch.nn.Module):
            plan.parameters_bytes = sum(_bytes(t) for t in [*model.parameters(), *model.buffers()])
            _shape_only_recurrences(model)
        meta_inputs = [x.to("meta") if isinstance(x, torch.Tensor) else x for x in inputs]
        try:
            with torch.no_grad():
                outputs = model(*meta_inputs)
        except Exception as exc:  # noqa: BLE001 - an op without a meta kernel, a data-dependent shape
            plan.note = f"the forward does not run on meta tensors ({type(exc).__name__}: {str(exc)[:120]})"
            return plan
    plan.outputs_bytes, plan.outputs_fp64_bytes = _bytes(outputs), _fp64_bytes(outputs)
    return plan


def choose_placement(plan: MemoryPlan, free_bytes: int | None) -> MemoryDecision:
    """``device`` when its predicted peak fits :data:`DEVICE_HEADROOM` of the free memory and
    stays within :data:`TARGET_PEAK_RATIO` of the problem (or under :data:`SMALL_PEAK_BYTES`, or
    under half the usable memory), else ``host`` (fits or not: the caller turns a plan that does not fit into harness_oom).
    No budget (a CPU run): ``device``, which on the CPU is the host anyway.

    A reference that fits the device only at many times the problem (KernelBench's 8.7 GB sum
    reduction: 43 GB predicted, 78 GB measured) goes to the host too, where that brings the
    peak within the target: one trial pays for it, and the other checks run at sizes that fit
    (``DeviceMemory.scaled``)."""
    device_peak = plan.device_peak(ReferencePlacement.DEVICE)
    if free_bytes is None:
        return MemoryDecision(placement=ReferencePlacement.DEVICE, predicted_peak_bytes=device_peak,
                              budget_bytes=None, fits=True, why="no device budget (CPU run)")
    budget = int(DEVICE_HEADROOM * free_bytes)
    target = max(TARGET_PEAK_RATIO * plan.problem_bytes, SMALL_PEAK_BYTES)
    host_peak = plan.device_peak(ReferencePlacement.HOST)
    # Past the target and over half the usable memory, the prediction's own error is the risk
    # (1.8x under for the sum reduction, from checks the plan does not model): the host, where
    # that brings the peak within the target (large weights count either way).
    if device_peak <= budget and (device_peak <= max(target, budget / 2) or host_peak > min(budget, target)):
        return MemoryDecision(placement=ReferencePlacement.DEVICE, predicted_peak_bytes=device_peak,
                              budget_bytes=budget, fits=True,
                              why=f"reference on the device: {_gb(device_peak)} predicted of {_gb(budget)} usable")
    reason = (f"{_gb(device_peak)} would be needed, {_gb(budget)} usable" if device_peak > budget else
              f"{_gb(device_peak)} would be {device_peak / max(plan.problem_bytes, 1):.1f}x the problem's "
              f"inputs + outputs, past the {TARGET_PEAK_RATIO:g}x target")
    return MemoryDecision(
        placement=ReferencePlacement.HOST, predicted_peak_bytes=host_peak, budget_bytes=budget,
        fits=host_peak <= budget,
        why=f"reference on the host: with it on the device {reason}; on the host {_gb(host_peak)}",
    )


def _gb(n: int) -> str:
    return f"{n / 1e9:.1f} GB"
