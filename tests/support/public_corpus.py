"""The corpus of public LLM-written KernelBench solutions, judged by hand (tests/fixtures/public).

Each manifest entry names a KernelBench problem file and a candidate, both copied
unmodified from public repositories, with a hand judgement ("correct" or "wrong")
and the weakest policies under which a correct one is correct (``needs``). What
kgen must say follows from that (:meth:`Entry.acceptable`): a correct kernel
passes, or on the CPU may be ``inconclusive`` with a reason, never rejected; a
wrong one never passes; a kernel correct only with TF32 matrix inputs is rejected
with the TF32 named under the default ``ieee`` precision, and passes under
``--precision tf32``. Shared by tests/evals/test_public_solutions.py and
scripts/public_solutions.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "fixtures" / "public"
#: the unmodified KernelBench problem files the corpus's solutions were written for
KERNELBENCH = ROOT / "tests" / "fixtures" / "kernelbench"


@dataclass(frozen=True)
class Entry:
    id: str
    level: int
    problem: Path
    candidate: Path
    judgement: str  # "correct" | "wrong"
    precision: str  # the precision policy a correct kernel needs ("ieee" | "tf32")
    torch_ops: str  # the torch ops policy a correct kernel needs ("strict" | "library")
    model_family: str
    source: str
    why: str
    #: a disagreement with kgen that is known and not yet closed (the test expects it to fail)
    known_gap: str = ""
    #: why the CPU cannot judge it (sizes fixed inside ``get_inputs()``): its inconclusive verdict there
    #: does not count against the one-in-ten target
    cpu_limit: str = ""

    @property
    def correct(self) -> bool:
        return self.judgement == "correct"

    def runs(self) -> list[str | None]:
        """The precision policies to judge it under: the default, and tf32 when it needs it."""
        return [None, "tf32"] if self.correct and self.precision == "tf32" else [None]

    def acceptable(self, outcome: str, reason: str, precision: str | None, device: str) -> bool:
        """Whether kgen's ``outcome`` (EvalResult.outcome) agrees with the judgement."""
        if not self.correct:
            return outcome != "passed"
        if self.precision == "tf32" and precision is None:
            return outcome == "numerical_mismatch" and "TF32" in reason
        if outcome == "passed":
            return True
        return device == "cpu" and outcome.startswith("inconclusive") and bool(reason)


def entries() -> list[Entry]:
    found = []
    for manifest in sorted(CORPUS.glob("*.json")):
        for raw in json.loads(manifest.read_text()):
            needs = raw.get("needs") or {}
            source = raw.get("source") or {}
            found.append(
                Entry(
                    id=raw["id"],
                    level=int(raw["level"]),
                    problem=KERNELBENCH / raw["problem"],
                    candidate=CORPUS / "candidates" / raw["candidate"],
                    judgement=raw["judgement"],
                    precision=needs.get("precision", "ieee"),
                    torch_ops=needs.get("torch_ops", "library"),
                    model_family=raw.get("model_family", "unknown"),
                    source=f"{source.get('repo', '?')}/{source.get('path', '?')}",
                    why=raw.get("why", ""),
                    known_gap=raw.get("kgen_known_gap", ""),
                    cpu_limit=raw.get("cpu_limit", ""),
                )
            )
    return found
