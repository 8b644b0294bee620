"""Outputs tiled by torch copies from a kernel's result: named, and under ``strict`` rejected.

The ghost check's first real call follows copied values into the outputs
(``checks/copy_provenance.py``). An output at least :data:`MAX_COPIED_SHARE` of whose
elements are extra copies of values computed in the call (a kernel computed one row, torch's
``expand(...).contiguous()``, ``out[1:] = out[:1]``, ``repeat`` or ``cat([h, h])`` filled the
rest) was mostly written by torch's data movement, not by a kernel. Under the ``strict``
torch-ops policy (every output written by the candidate's kernels) that is ``not_a_kernel``;
under ``library`` it is noted in the report, never held against the candidate. A copy that
moves each computed value once (``out.copy_(scratch)``, ``.t().contiguous()``) repeats
nothing and is not counted.
"""

from __future__ import annotations

from kgen.evals.checks.copy_provenance import ReplicatedOutput
from kgen.evals.problem.policies import TorchOps
from kgen.evals.verdict import Rejected, RejectionClass
from kgen.evals.verifier.context import VerifierContext

#: Share of an output's elements that may be extra copies of computed values: half, the share
#: of ``torch.cat([h, h])`` (``R`` copies of one row give ``1 - 1/R``).
MAX_COPIED_SHARE = 0.5


def check_copied_tiles(ctx: VerifierContext, replicated: list[ReplicatedOutput], what: str) -> None:
    """Reject (``strict``) or note (other policies) outputs tiled by copies."""
    tiled = [r for r in replicated if r.share >= MAX_COPIED_SHARE]
    if not tiled:
        return
    text = "; ".join(r.describe() for r in tiled)
    policy = ctx.request.policies.torch_ops
    if policy is TorchOps.STRICT:
        raise Rejected(
            RejectionClass.NOT_A_KERNEL,
            f"{text}: a tile done by copies (torch ops policy strict: the kernels must write the outputs; "
            f"at most {MAX_COPIED_SHARE:.0%} of an output may repeat computed values) ({what})",
            {"replicated_outputs": [r.model_dump() for r in tiled]},
        )
    note = f"{text}: a tile done by copies, allowed under torch ops policy {policy.value} ({what})"
    if note not in ctx.report.notes:
        ctx.report.notes.append(note)
