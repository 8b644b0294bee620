"""The verifier's named policies: what a candidate is allowed to do, said in every verdict.

Two questions have more than one fair answer, and a silent answer to either
makes a verdict unreadable, so each is a named policy:

* **precision** — ``ieee`` (default): an fp32 problem is judged as IEEE fp32,
  and a kernel whose ``tl.dot`` rounds its inputs to TF32 fails with an error
  named TF32-shaped. ``tf32``: TF32 inputs to matrix products are admitted,
  with a tolerance that fits a 10-bit mantissa (:data:`TF32_REL_L2`).
* **torch ops** — ``strict``: every compute op runs in the candidate's own
  kernels (kgen's catalog default). ``library``: vendor matrix-multiply,
  convolution and attention calls (cuBLAS, cuDNN, flash attention through
  torch) are allowed and everything else must be in kernels; a little torch
  glue on small per-channel tensors is allowed up to :data:`GLUE_SHARE` of the
  elements the forward returns (each op charged the largest tensor it touches). ``library`` is the default for plain
  KernelBench files, whose level 2 and 3 are usually won that way.

A problem may declare either (``KGEN_PRECISION``, ``KGEN_TORCH_OPS``); a flag
overrides the problem. :func:`policies_for` is the one place the defaults live.
"""

from __future__ import annotations

from enum import Enum

from pydantic import BaseModel, ConfigDict

from kgen.errors import KgenUsageError

#: Normalised (rel-L2) bound for fp32 outputs under ``tf32``: TF32-rounded inputs to a matrix
#: product give ~5e-4 (2^-11 unit roundoff per input); a few times that, below bf16's 1e-2.
TF32_REL_L2 = 2e-3
#: Under ``library``: torch glue (ops that are not library calls) may touch at most this share
#: of the elements the forward returns, each op charged its largest tensor read or written...
GLUE_SHARE = 0.02
#: ...and never less than this many elements, so a bias on a one-feature trial stays glue...
GLUE_MIN_BUDGET = 1024
#: ...nor less than this many per-channel vectors (the candidate's largest 1-D parameter or
#: buffer), so glue on a bias or a norm weight stays glue whatever the channel count of a trial.
GLUE_CHANNEL_VECTORS = 2


def glue_budget(produced: int, channels: int) -> int:
    """The elements torch glue may touch under ``library``, for a forward that returned
    ``produced`` elements from a module whose largest 1-D parameter or buffer has ``channels``."""
    return max(int(GLUE_SHARE * produced), GLUE_MIN_BUDGET, GLUE_CHANNEL_VECTORS * channels)


class Precision(str, Enum):
    IEEE = "ieee"
    TF32 = "tf32"


class TorchOps(str, Enum):
    STRICT = "strict"
    LIBRARY = "library"


class Policies(BaseModel):
    """The policies one evaluation was judged under (recorded in its result)."""

    model_config = ConfigDict(frozen=True)

    precision: Precision = Precision.IEEE
    torch_ops: TorchOps = TorchOps.STRICT

    def describe(self) -> str:
        return f"precision {self.precision.value}, torch ops {self.torch_ops.value}"


class PolicyError(KgenUsageError):
    """A policy name that does not exist (a flag or a problem's declaration)."""


def parse_precision(value: str) -> Precision:
    try:
        return Precision(value.strip().lower())
    except ValueError as exc:
        raise PolicyError(
            f"unknown precision policy {value!r}: choose {', '.join(p.value for p in Precision)}"
        ) from exc


def parse_torch_ops(value: str) -> TorchOps:
    try:
        return TorchOps(value.strip().lower())
    except ValueError as exc:
        raise PolicyError(
            f"unknown torch ops policy {value!r}: choose {', '.join(p.value for p in TorchOps)}"
        ) from exc


def policies_for(
    declared_precision: str | None,
    declared_torch_ops: str | None,
    plain_kernelbench: bool,
    precision: str | None = None,
    torch_ops: str | None = None,
) -> Policies:
    """The policies for one evaluation: a flag, else the problem's declaration, else the default
    (``library`` torch ops for a plain KernelBench file, ``strict`` for kgen's own problems)."""
    chosen_precision = precision or declared_precision or Precision.IEEE.value
    default_ops = TorchOps.LIBRARY if plain_kernelbench else TorchOps.STRICT
    chosen_ops = torch_ops or declared_torch_ops or default_ops.value
    return Policies(precision=parse_precision(chosen_precision), torch_ops=parse_torch_ops(chosen_ops))
