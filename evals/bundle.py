"""Evidence bundles: one verification written so that anyone can check it again.

A bundle (``bundle.json``) holds everything a verdict stands on: the kernel's source, the
problem file's text and name, the verifier's settings (seeds, size plan, policies, checks
asked for), kgen's and the libraries' versions, the device, and the whole result (verdict,
trials, errors, timings with their intervals). ``kgen verify BUNDLE`` re-runs the
verification from it alone (``kgen/cli/verify.py``) and asks :func:`agreement` whether the
new result agrees.

Tampering is detected, not prevented: each part of the bundle has a sha256 over its
canonical JSON (``digests``) and ``sha256`` covers them all, so an edit names the part it
touched; someone who recomputes every digest can forge a bundle, which only a re-run
(``kgen verify``) exposes. The digests are taken over the JSON as written and read back,
never over re-serialised models, so a bundle checks the same on any version of pydantic.

It sits above ``harness.py`` in ``evals/`` (beside ``batch.py``): its settings are the
``EvalOptions`` fields a re-run needs (:meth:`VerifierSettings.eval_options`), named once here.
"""

from __future__ import annotations

import hashlib
import json
import platform
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from kgen.backends.device import Device
from kgen.backends.registry import toolchain_versions
from kgen.core.version import __version__
from kgen.errors import KgenUsageError
from kgen.evals.harness import EvalOptions
from kgen.evals.result import EvalResult
from kgen.evals.verdict import Verdict

#: the file a bundle is written as, beside the kernel it is the evidence of
BUNDLE_FILE = "bundle.json"
BUNDLE_FORMAT = 1

#: each part of a bundle and the top-level fields it covers, in the order a refusal names them
PARTS: dict[str, tuple[str, ...]] = {
    "kernel source": ("kernel_file", "kernel_source"),
    "problem": ("problem", "problem_file", "problem_source"),
    "verifier settings": ("settings",),
    "environment": ("format", "kgen_version", "created", "libraries", "device_name"),
    "results": ("result", "timings"),
}


class BundleError(KgenUsageError):
    """A bundle that cannot be read, or whose content does not match its digests: bad input."""


class VerifierSettings(BaseModel):
    """What ``harness.evaluate`` needs to repeat the same verification: the seeds it drew, the
    size plan, the policies and the checks asked for. ``size_sets`` and ``distributions_run``
    are what the trials ran (the plan is made again from the problem and the device)."""

    backend: str
    device: Device
    targets: list[str] = Field(default_factory=list)
    seeds: list[int] = Field(default_factory=list)
    small_sizes: bool = False
    distributions: bool = True
    train_check: bool = False
    timed: bool = False
    precision: str
    torch_ops: str
    timeout_s: float
    size_sets: list[dict[str, int]] = Field(default_factory=list)
    distributions_run: list[str] = Field(default_factory=list)

    def eval_options(self, device: Device) -> EvalOptions:
        """The options of a re-run on ``device``: the same seeds, sizes, policies and checks;
        never timed (timing is not re-judged by a re-run: only correctness)."""
        return EvalOptions(
            device=device, backend=self.backend, targets=list(self.targets), seeds=list(self.seeds) or None,
            n_seeds=max(1, len(self.seeds)) if self.seeds else EvalOptions().n_seeds,
            small_sizes=self.small_sizes, distributions=self.distributions, train_check=self.train_check,
            bench=False, precision=self.precision, torch_ops=self.torch_ops, timeout_s=self.timeout_s,
        )


class Interval(BaseModel):
    """One timed implementation: its median and the p10-p90 interval around it (ms)."""

    median_ms: float | None = None
    p10_ms: float | None = None
    p90_ms: float | None = None


class EvidenceBundle(BaseModel):
    """One verification, self-contained (see the module docstring)."""

    format: int = BUNDLE_FORMAT
    kgen_version: str
    created: str
    kernel_file: str
    kernel_source: str
    problem: str
    problem_file: str
    problem_source: str
    settings: VerifierSettings
    #: installed versions of torch and the backend's toolchain (Triton, CuTe DSL's cutlass), and Python
    libraries: dict[str, str]
    #: the GPU model the verifier ran on, as the driver names it; "cpu" for a CPU run
    device_name: str
    result: EvalResult
    #: the timing stage's medians and intervals by implementation (candidate, eager, torch.compile)
    timings: dict[str, Interval] = Field(default_factory=dict)
    #: sha256 of each part's canonical JSON (``PARTS``)
    digests: dict[str, str] = Field(default_factory=dict)
    #: sha256 over every field above, the digests included
    sha256: str = ""

    @property
    def timed(self) -> bool:
        return bool(self.timings.get("candidate") and self.timings["candidate"].median_ms is not None)


def seeds_of(result: EvalResult) -> list[int]:
    """The seeds a verification ran: a passing correctness stage records them all; otherwise
    those its trials got to (a rejection stops at the first failing trial)."""
    stage = result.stage("correctness")
    if stage is not None and stage.evidence.get("seeds"):
        return [int(s) for s in stage.evidence["seeds"]]
    return list(dict.fromkeys(t.seed for t in result.trials))


def _seeds(result: EvalResult, options: EvalOptions) -> list[int]:
    """The seeds to repeat: the options' own where the caller fixed them (`kgen eval --bundle`
    draws them first, so a rejection's bundle holds every one), else :func:`seeds_of`; none
    (a static rejection) lets a re-run draw fresh ones, as the first did."""
    return list(options.seeds) if options.seeds else seeds_of(result)


def settings_of(result: EvalResult, options: EvalOptions) -> VerifierSettings:
    """The settings ``result`` was verified under (``options`` as the harness was given them)."""
    sizes: list[dict[str, int]] = []
    for trial in result.trials:
        if trial.sizes not in sizes:
            sizes.append(dict(trial.sizes))
    return VerifierSettings(
        backend=result.backend, device=result.device, targets=list(result.targets), seeds=_seeds(result, options),
        small_sizes=options.small_sizes, distributions=options.distributions, train_check=options.train_check,
        timed=options.bench, precision=result.policies.precision.value, torch_ops=result.policies.torch_ops.value,
        timeout_s=options.timeout_s, size_sets=sizes,
        distributions_run=list(dict.fromkeys(t.distribution for t in result.trials)),
    )


def _timings(result: EvalResult) -> dict[str, Interval]:
    if result.bench is None:
        return {}
    return {name: Interval(median_ms=m.median_ms, p10_ms=m.p10_ms, p90_ms=m.p90_ms)
            for name, m in result.bench.measurements.items() if m.median_ms is not None}


def build_bundle(result: EvalResult, options: EvalOptions, kernel_source: str, problem_source: str,
                 kernel_file: str, problem_file: str, *,
                 libraries: dict[str, str] | None = None) -> EvidenceBundle:
    """The bundle of one finished verification, its digests filled in. ``libraries``: the
    versions the verification ran with where it ran elsewhere and recorded them ({} where it
    recorded none); by default this process's own, which is where it ran."""
    device_name = result.device_name or (result.bench.device_name if result.bench else "") or str(result.device)
    if libraries is None:
        libraries = {**toolchain_versions(result.backend), "python": platform.python_version()}
    bundle = EvidenceBundle(
        kgen_version=result.kgen_version or __version__,
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        kernel_file=Path(kernel_file).name, kernel_source=kernel_source, problem=result.problem,
        problem_file=Path(problem_file).name, problem_source=problem_source,
        settings=settings_of(result, options), libraries=libraries, device_name=device_name,
        result=result, timings=_timings(result),
    )
    data = json.loads(bundle.model_dump_json())
    digests = part_digests(data)
    return bundle.model_copy(update={"digests": digests, "sha256": whole_digest({**data, "digests": digests})})


def bundle_for_files(result: EvalResult, options: EvalOptions, kernel: Path, problem: Path) -> EvidenceBundle:
    """:func:`build_bundle` reading the kernel's and the problem's files."""
    return build_bundle(result, options, kernel.read_text(encoding="utf-8"), problem.read_text(encoding="utf-8"),
                        kernel.name, problem.name)


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def part_digests(data: dict[str, Any]) -> dict[str, str]:
    """sha256 of each part's fields as they stand in the JSON (a field absent counts as null)."""
    return {part: hashlib.sha256(_canonical({f: data.get(f) for f in fields})).hexdigest()
            for part, fields in PARTS.items()}


def whole_digest(data: dict[str, Any]) -> str:
    """sha256 over every field but ``sha256`` itself."""
    return hashlib.sha256(_canonical({k: v for k, v in data.items() if k != "sha256"})).hexdigest()


def bundle_file(path: Path) -> Path:
    """The file ``path`` names: itself when it ends in ``.json``, else ``bundle.json`` in that folder."""
    return path if path.suffix == ".json" and not path.is_dir() else path / BUNDLE_FILE


def write_bundle(bundle: EvidenceBundle, path: Path) -> Path:
    """Write ``bundle`` to ``path`` (:func:`bundle_file`); the file written."""
    target = bundle_file(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(bundle.model_dump_json(indent=1) + "\n", encoding="utf-8")
    return target


def tampered_parts(data: dict[str, Any]) -> list[str]:
    """What in a bundle's JSON does not match its digests, in words; empty: it is as written."""
    recorded = data.get("digests")
    if not isinstance(recorded, dict):
        return ["its digests are missing"]
    found = part_digests(data)
    wrong = [part for part in PARTS if recorded.get(part) != found[part]]
    if wrong:
        return wrong
    if data.get("sha256") != whole_digest(data):
        return ["the bundle's sha256 (it matches none of its content)"]
    return []


def read_bundle(path: Path) -> EvidenceBundle:
    """The bundle at ``path`` (a folder: its ``bundle.json``), checked against its digests.
    Anything unreadable or edited is a ``BundleError`` that says, in one line, what."""
    file = bundle_file(path)
    if not file.is_file():
        raise BundleError(f"bundle not found: {path}")
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise BundleError(f"{file} is not a bundle: {str(exc).splitlines()[0]}") from exc
    if not isinstance(data, dict) or "sha256" not in data:
        raise BundleError(f"{file} is not a bundle: no sha256 field")
    wrong = tampered_parts(data)
    if wrong:
        raise BundleError(f"{file} was changed after it was written ({', '.join(wrong)}: not what its sha256 "
                          "recorded); refusing to verify")
    try:
        return EvidenceBundle.model_validate(data)
    except ValidationError as exc:
        raise BundleError(f"{file} is not a bundle kgen can read: {str(exc).splitlines()[0]}") from exc


class Agreement(BaseModel):
    """Whether a re-run agrees with a bundle: ``word`` is "agrees", "disagrees" or
    "inconclusive" (the re-run reached no verdict: a harness fault, not the kernel's)."""

    word: str
    reasons: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """`kgen verify` exits 0 agrees, 1 disagrees, 3 inconclusive (2 is bad input)."""
        return {"agrees": 0, "disagrees": 1}.get(self.word, 3)


def _max_error(result: EvalResult) -> float | None:
    errors = [o.rel_l2_error for t in result.trials for o in t.outputs]
    return max(errors) if errors else None


def _tolerance(result: EvalResult) -> float | None:
    tolerances = [o.tolerance_rel_l2 for t in result.trials for o in t.outputs]
    return min(tolerances) if tolerances else None


def agreement(bundle: EvidenceBundle, again: EvalResult) -> Agreement:
    """The one rule of agreement: the same verdict; for a rejection the same class; for a pass,
    every error of the re-run within the recorded tolerance. Timing is never re-judged here."""
    recorded = bundle.result
    notes = _notes(bundle, again)
    if again.verdict is Verdict.INCONCLUSIVE and recorded.verdict is not Verdict.INCONCLUSIVE:
        return Agreement(word="inconclusive", notes=notes,
                         reasons=[f"the re-run reached no verdict ({again.outcome}): {again.reason}"])
    if again.verdict is not recorded.verdict or again.rejection is not recorded.rejection \
            or again.inconclusive is not recorded.inconclusive:
        return Agreement(word="disagrees", notes=notes,
                         reasons=[f"recorded {recorded.outcome}, re-run {again.outcome}"
                                  + (f": {again.reason}" if again.reason else "")])
    reasons = [f"same verdict: {again.outcome}"]
    if again.passed:
        error, tolerance = _max_error(again), _tolerance(recorded)
        if error is not None and tolerance is not None and error > tolerance:
            return Agreement(word="disagrees", notes=notes, reasons=[
                f"worst rel-L2 error {error:.3g} is outside the recorded tolerance {tolerance:.3g}"])
        if error is not None:
            recorded_error = _max_error(recorded)
            reasons.append(f"worst rel-L2 error {error:.3g} (recorded "
                           f"{'-' if recorded_error is None else f'{recorded_error:.3g}'}, tolerance "
                           f"{'-' if tolerance is None else f'{tolerance:.3g}'})")
    return Agreement(word="agrees", reasons=reasons, notes=notes)


def _notes(bundle: EvidenceBundle, again: EvalResult) -> list[str]:
    """What a reader should know about the comparison that decides nothing."""
    notes: list[str] = []
    if again.device is not bundle.settings.device:
        notes.append(f"recorded on {bundle.device_name}, re-run on {again.device_name or again.device}: "
                     "correctness only, at this device's size plan")
    if bundle.timed:
        candidate = bundle.timings["candidate"]
        notes.append(f"timing not re-judged (only correctness is): recorded {candidate.median_ms:.4g} ms "
                     f"[p10 {_ms(candidate.p10_ms)}, p90 {_ms(candidate.p90_ms)}] on {bundle.device_name}")
    return notes


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"
