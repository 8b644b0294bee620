"""Full-size verifications that passed, kept in ``$KGEN_HOME`` so they are not repeated.

At a run's end the winner is verified again at full sizes on the GPU; on an H100 that took
73 s of a 258 s run, and a kernel that wins again (the knowledge base's known kernel,
re-measured in generation 0 and never beaten) was verified exactly so in an earlier run. A
record says: this code passed these checks here. Its key is everything the verdict depends
on — the candidate's code (``knowledge_base/code_hash.py``: comments do not count), the
problem file's bytes, the size plan, the policies, the checks asked for, the backend, the
GPU model, and the kgen, torch and toolchain versions — so any change verifies again.

Only a passing verification on the GPU model of the key is written; a rejection or an
inconclusive one never is (the next run must judge again). A record that cannot be read, or
whose key is not the one asked for, is ignored, never trusted.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, ValidationError

from kgen.backends.device import Device
from kgen.backends.registry import toolchain_versions
from kgen.core.config import kgen_home
from kgen.core.version import __version__
from kgen.evals.harness import EvalOptions
from kgen.evals.harness import size_plan as harness_size_plan
from kgen.evals.problem.catalog import resolve_problem
from kgen.evals.result import EvalResult, ReusedVerification
from kgen.evals.timing.baseline_cache import file_digest
from kgen.knowledge_base.code_hash import normalised_code_hash

#: the folder of ``$KGEN_HOME`` the records live in, one JSON file per key
RECORDS_FOLDER = "verified"
#: on a CPU run the verifier's device has no model name: the records say "cpu"
CPU_DEVICE_NAME = "cpu"


class VerificationKey(BaseModel):
    """What a verdict depends on; two verifications with equal keys judge the same thing."""

    code_hash: str
    problem_digest: str
    #: every size set verified at, in order, as ``harness.evaluate`` builds the plan
    size_plan: list[dict[str, int]]
    policies: str
    #: the checks asked for beyond the size plan
    n_seeds: int
    distributions: bool
    train_check: bool
    targets: list[str]
    backend: str
    #: the GPU model ("NVIDIA H100 80GB HBM3"), or "cpu"
    device_name: str
    kgen_version: str
    #: torch's and the backend's toolchains' versions (triton, cutlass)
    toolchains: dict[str, str]

    def digest(self) -> str:
        return hashlib.sha256(self.model_dump_json().encode()).hexdigest()[:32]


class VerificationRecord(BaseModel):
    """A passing verification: its key, when and in which run, and the result as it was."""

    key: VerificationKey
    verified_at: datetime
    run_id: str
    result: EvalResult


def records_dir() -> Path:
    return kgen_home() / RECORDS_FOLDER


def size_plan(problem: str | Path, source: str, options: EvalOptions, device: Device) -> list[dict[str, int]]:
    """The size sets ``harness.evaluate`` verifies ``source`` at under ``options``: the plan for
    the device (the small one where ``small_sizes`` or on a CPU), then the sets just past the
    thresholds the code branches on (``harness.size_plan``, the one place that makes it)."""
    size_device = Device.CPU if options.small_sizes else device
    return [dict(s.sizes) for s in harness_size_plan(resolve_problem(problem), source, size_device)]


def verification_key(problem: str | Path, source: str, options: EvalOptions, device: Device,
                     device_name: str | None) -> VerificationKey | None:
    """The key of verifying ``source`` under ``options`` on ``device``; None when the GPU model
    is not known (no record can then stand for this verification)."""
    if device.is_gpu and not device_name:
        return None
    info = resolve_problem(problem)
    return VerificationKey(
        code_hash=normalised_code_hash(source),
        problem_digest=file_digest(info.path),
        size_plan=size_plan(problem, source, options, device),
        policies=info.policies(options.precision, options.torch_ops).describe(),
        n_seeds=len(options.seeds) if options.seeds else options.n_seeds,
        distributions=options.distributions,
        train_check=options.train_check,
        targets=sorted(options.targets),
        backend=options.backend,
        device_name=device_name if device.is_gpu and device_name else CPU_DEVICE_NAME,
        kgen_version=__version__,
        toolchains=toolchain_versions(options.backend),
    )


def find_record(key: VerificationKey, folder: Path | None = None) -> VerificationRecord | None:
    """The passing record kept for ``key``; None when there is none, or it cannot be read, or
    it is not for this key or not a pass (each of those verifies again)."""
    path = (folder or records_dir()) / f"{key.digest()}.json"
    try:
        record = VerificationRecord.model_validate_json(path.read_bytes())
    except (OSError, ValidationError, ValueError):
        return None
    if record.key != key or not record.result.passed:
        return None
    return record


def ran_on(result: EvalResult) -> str:
    """The device name a result says it was verified on (the verifier's own word, or the
    timing's on results from before the verifier named it)."""
    if not result.device.is_gpu:
        return CPU_DEVICE_NAME
    return result.device_name or (result.bench.device_name if result.bench is not None else "") or ""


def save_record(key: VerificationKey, result: EvalResult, run_id: str, folder: Path | None = None,
                now: datetime | None = None) -> Path | None:
    """Keep ``result`` under ``key`` when it is a pass on the key's device; the file written, or
    None when nothing was (a failed or inconclusive verification, a reused one, another GPU).
    The file is replaced whole: a reader never sees half a record."""
    if not result.passed or result.reused_verification is not None or ran_on(result) != key.device_name:
        return None
    folder = folder or records_dir()
    folder.mkdir(parents=True, exist_ok=True)
    record = VerificationRecord(key=key, verified_at=now or datetime.now(UTC), run_id=run_id, result=result)
    path = folder / f"{key.digest()}.json"
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    tmp.write_text(json.dumps(record.model_dump(mode="json"), indent=1))
    os.replace(tmp, path)
    return path


def reused_result(record: VerificationRecord) -> EvalResult:
    """The recorded pass, saying it is one: ``reused_verification`` set, the reason naming where
    and when it was verified; it took no time now."""
    reused = ReusedVerification(device_name=record.key.device_name, verified_at=record.verified_at,
                                run_id=record.run_id, seconds=record.result.seconds)
    return record.result.model_copy(deep=True, update={
        "reused_verification": reused, "reason": reused.describe(), "seconds": 0.0, "prestarted": False,
    })

