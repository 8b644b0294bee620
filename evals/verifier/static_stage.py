"""The static stage: the candidate's source read, parsed and judged by the static rules
(``evals/static_rules``) before any of it runs."""

from __future__ import annotations

import time

from kgen.evals.static_rules import check_candidate_source
from kgen.evals.verdict import Rejected, RejectionClass, StageStatus
from kgen.evals.verifier.context import VerifierContext, record_stage

#: how many static rule violations a rejection reason lists (all of them are in the stage's evidence)
STATIC_SHOWN = 20


class StaticStage:
    """Unreadable source or a syntax error is a load error; a violated rule rejects with every
    violation in the evidence. The harness self-test (the reference as the candidate) skips
    the rules that demand a kernel."""

    name = "static"

    def run(self, ctx: VerifierContext) -> None:
        started = time.monotonic()
        try:
            source = ctx.candidate_path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise Rejected(RejectionClass.LOAD_ERROR, f"cannot read the candidate: {exc}") from exc
        try:
            compile(source, str(ctx.candidate_path), "exec")
        except SyntaxError as exc:
            raise Rejected(
                RejectionClass.LOAD_ERROR, f"syntax error in {ctx.candidate_path.name} line {exc.lineno}: {exc.msg}"
            ) from exc
        if ctx.request.reference_self_test:
            record_stage(ctx, self.name, StageStatus.PASSED,
                         "self-test: the reference as the candidate, kernel rules off", started)
            return
        violations = check_candidate_source(source, ctx.candidate_path.name, ctx.request.policies)
        if violations:
            # Every violation, not the first only: a fix for one should not meet the next one later.
            shown = [f"{v.message} (rule {v.rule}, line {v.line})" for v in violations[:STATIC_SHOWN]]
            more = len(violations) - len(shown)
            raise Rejected(
                violations[0].rejection,
                "\n".join(shown) + (f"\n... and {more} more" if more else ""),
                evidence={"violations": [v.model_dump(mode="json") for v in violations]},
            )
        record_stage(ctx, self.name, StageStatus.PASSED, "no forbidden construct found", started)
