"""Per-dtype tolerances, judged against an fp64 reference.

The candidate's output is compared with the reference computed in float64 on
upcast inputs, so the error measured is the candidate's own, not the sum of
two low-precision computations. Two tests must both pass:

* **normalised error** ``||out - ref||_2 / ||ref||_2`` at most ``rel_l2``.
  An output that is correct up to rounding into its dtype sits near
  ``eps / (2 * sqrt(3))`` (uniform rounding error): 2.3e-3 for bf16,
  2.8e-4 for fp16, 3.4e-8 for fp32. The bounds leave a few times that for
  fp32 accumulation of long reductions, and stay well below what computing
  in a lower precision gives (bf16 math on fp32 outputs: ~2e-3 > 1e-4;
  bf16 accumulation of thousands of terms: ~1e-2 and more).
* **elementwise** ``|out - ref| <= rtol * |ref| + atol * rms(ref)``: the
  absolute part is scaled by the output's RMS, so the test means the same
  for outputs of magnitude 1e-3 and 1e3. It catches a few wildly wrong
  elements that the L2 norm would average away (a partial write, one bad
  row), while ``rtol`` of a few ulps allows rounding at every element.

NaN or Inf in the output where the reference is finite never passes.

Under the ``tf32`` precision policy (``evals/problem/policies.py``) fp32 outputs are judged
with :data:`TF32_FP32`: TF32 keeps 10 mantissa bits (unit roundoff 4.9e-4), so a
matrix product of TF32-rounded inputs lands near 5e-4 normalised error; the bound
leaves a few times that and stays below bf16's.
"""

from __future__ import annotations

import torch
from pydantic import BaseModel

from kgen.evals.problem.policies import TF32_REL_L2, Precision


class Tolerance(BaseModel):
    rel_l2: float
    rtol: float
    atol: float  # multiple of rms(reference)


TOLERANCES: dict[torch.dtype, Tolerance] = {
    torch.float64: Tolerance(rel_l2=1e-10, rtol=1e-8, atol=1e-9),
    torch.float32: Tolerance(rel_l2=1e-4, rtol=1e-3, atol=1e-4),
    torch.bfloat16: Tolerance(rel_l2=1e-2, rtol=3.2e-2, atol=1e-2),
    torch.float16: Tolerance(rel_l2=2e-3, rtol=4e-3, atol=2e-3),
}

#: fp32 outputs under the tf32 precision policy (``TF32_REL_L2`` of evals/problem/policies.py).
TF32_FP32 = Tolerance(rel_l2=TF32_REL_L2, rtol=1e-2, atol=4e-3)

#: Integer and boolean outputs must match exactly.
EXACT = Tolerance(rel_l2=0.0, rtol=0.0, atol=0.0)


def tolerance_for(dtype: torch.dtype, precision: Precision = Precision.IEEE) -> Tolerance:
    if dtype == torch.float32 and precision is Precision.TF32:
        return TF32_FP32
    if dtype in TOLERANCES:
        return TOLERANCES[dtype]
    if dtype.is_floating_point:  # fp8 and other narrow floats: judge as bf16 would be too strict
        return Tolerance(rel_l2=6e-2, rtol=1.25e-1, atol=6e-2)
    return EXACT
