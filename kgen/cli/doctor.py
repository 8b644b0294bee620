"""`kgen doctor`: what this machine and configuration give kgen, and what a run will do here.

Doctor is what a person runs when something is off, so it must never be the
thing that breaks: every probe catches its own failure and turns it into a
line of the report. It never prints an API key, only whether one is present
and where it came from.

Unless told to stay offline, doctor also asks each configured model's endpoint whether a run
can use it (``kgen.cli.doctor_endpoints``). A configured model that cannot be used (a
malformed name, no key, unreachable, key rejected, model not served) is an issue and makes
``exit_status`` 1; a broken configuration is bad usage (exit 2).
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

import typer
from pydantic import BaseModel, Field

from kgen.agent.llm.models import ModelSpecError, parse_model
from kgen.agent.llm.providers import choose_api_key
from kgen.api import api_keys
from kgen.backends.registry import (
    UnknownBackendError,
    backend_info,
    missing_requirement,
    target_problem,
)
from kgen.backends.targets import DEFAULT_TARGET, UnknownTargetError, resolve_target
from kgen.cli.doctor_endpoints import (
    ENDPOINT_DEADLINE_S,
    EndpointCheck,
    check_models,
    one_line,
    safe,
)
from kgen.cli.option_flags import with_run_option_flags
from kgen.cli.terminal import console, fail_usage, print_table
from kgen.core.settings import Settings, config_file_path, load_settings
from kgen.core.text import counted
from kgen.core.version import __version__
from kgen.errors import KgenUsageError

if TYPE_CHECKING:
    from rich.console import Console

T = TypeVar("T")

#: distribution names whose versions matter to kgen, in the order the report lists them
PACKAGES: tuple[str, ...] = (
    "torch", "triton", "nvidia-cutlass-dsl", "chromadb", "langgraph", "openai", "anthropic",
)
#: provider -> the environment variable its SDK reads, and the settings field that can hold a key
PROVIDER_KEYS: dict[str, tuple[str, str]] = {
    "openai": ("OPENAI_API_KEY", "openai_api_key"),
    "anthropic": ("ANTHROPIC_API_KEY", "anthropic_api_key"),
}
_PROVIDER_NAMES = {"openai": "an OpenAI", "anthropic": "an Anthropic"}
KeyStatus = Literal["yes (env)", "yes (config)", "yes (flag)", "no"]
#: when no target is configured and no GPU names one
FALLBACK_TARGET = DEFAULT_TARGET
#: doctor's exit status when a configured model cannot be used (0 otherwise)
EXIT_MODEL_UNUSABLE = 1


class GpuInfo(BaseModel):
    available: bool = False
    name: str | None = None
    #: the CUDA version torch was built with (torch.version.cuda)
    cuda_version: str | None = None
    #: the NVIDIA driver's version, from nvidia-smi when it is installed
    driver_version: str | None = None
    #: the kgen hardware target the device name resolves to
    target: str | None = None


class KnowledgeBaseInfo(BaseModel):
    location: str
    mode: str | None = None
    #: the embedding function the store was built with
    embedding: str | None = None
    exists: bool | None = None
    kernels: int | None = None
    guidance: int | None = None
    problems: int | None = None
    error: str | None = None


class Diagnosis(BaseModel):
    """Everything `kgen doctor` found; the JSON form of its report. Holds no secrets."""

    python: str
    kgen_version: str
    os: str
    config_file: str
    config_file_exists: bool
    gpu: GpuInfo
    #: distribution name -> installed version, None when not installed
    packages: dict[str, str | None]
    #: provider -> whether a key is available to it, and from where
    provider_keys: dict[str, KeyStatus]
    models: list[str]
    backend: str
    device: str
    targets: list[str]
    knowledge_base: KnowledgeBaseInfo
    #: "what `kgen "..."` will do here", one sentence per line
    plan: list[str]
    #: probes that failed and configuration that will not work, one line each
    issues: list[str] = Field(default_factory=list)
    #: one per configured model: its endpoint's answer, or why it was not asked
    endpoints: list[EndpointCheck] = Field(default_factory=list)
    #: the configured models a run cannot use (as configured); non-empty: exit status 1
    unusable_models: list[str] = Field(default_factory=list)


def exit_status(d: Diagnosis) -> int:
    """`kgen doctor`'s exit status: ``EXIT_MODEL_UNUSABLE`` when a configured model cannot be
    used (malformed, no key, unreachable, key rejected, not served), else 0."""
    return EXIT_MODEL_UNUSABLE if d.unusable_models else 0


@with_run_option_flags("models")
def doctor_command(
    *,
    json_output: Annotated[bool, typer.Option("--json", help="Print the diagnosis as JSON.")] = False,
    offline: Annotated[bool, typer.Option(
        "--offline", help="Contact no model endpoint: check keys and configuration only.")] = False,
    **options: Any,
) -> None:
    """Check this machine and configuration: GPU, packages, API keys, knowledge base, and what a run will do.

    -m/--model checks the models a run given the same flags would ask, instead of the configured ones.

    Each configured model's endpoint is asked for its models list (or one token) within 5 s, all at once: reachable or not, key accepted or rejected, model served, latency. --offline skips that.

    Exit status: 0; 1 when a configured model cannot be used (malformed, no key, unreachable, key rejected, model not served); 2 for a broken configuration.
    """

    try:
        settings = load_settings(options)  # -m given: those models, as `kgen run -m` takes them
    except KgenUsageError as exc:
        fail_usage(exc.message)
    diagnosis = collect_diagnosis(settings, offline=offline)
    if json_output:
        print(diagnosis.model_dump_json(indent=2))
    else:
        render_diagnosis(diagnosis, console)
    raise typer.Exit(exit_status(diagnosis))


def collect_diagnosis(
    settings: Settings, *, offline: bool = False, endpoint_deadline_s: float = ENDPOINT_DEADLINE_S,
) -> Diagnosis:
    """Probe the machine and the configuration; never raises for what it finds.

    Unless ``offline``, each configured model's endpoint is asked (see the module docstring),
    within ``endpoint_deadline_s`` seconds for all of them together.
    """

    issues: list[str] = []
    config_file = config_file_path()
    gpu = _probe("GPU", lambda: _gpu_info(issues), issues, GpuInfo())
    packages = {name: _package_version(name) for name in PACKAGES}
    keys = {provider: key_status(settings, provider) for provider in PROVIDER_KEYS}
    knowledge_base = _probe(
        "knowledge base", lambda: _knowledge_base_info(settings.kb_location), issues,
        KnowledgeBaseInfo(location=safe(lambda: settings.kb_location, "?")),
    )
    if knowledge_base.error:
        issues.append(f"knowledge base: {knowledge_base.error}")
    targets = _probe("targets", lambda: _run_targets(settings, gpu), issues, [FALLBACK_TARGET])
    diagnosis = Diagnosis(
        python=f"{platform.python_implementation()} {platform.python_version()}",
        kgen_version=safe(_kgen_version, "unknown"),
        os=safe(platform.platform, "unknown"),
        config_file=str(config_file),
        config_file_exists=safe(config_file.is_file, False),
        gpu=gpu,
        packages=packages,
        provider_keys=keys,
        models=list(settings.models),
        backend=settings.backend,
        device=settings.device,
        targets=targets,
        knowledge_base=knowledge_base,
        plan=[],
        issues=issues,
    )
    diagnosis.plan = _probe("plan", lambda: _plan(settings, diagnosis), diagnosis.issues, [])
    diagnosis.endpoints = _probe(
        "model endpoints", lambda: check_models(settings, offline=offline, deadline_s=endpoint_deadline_s),
        diagnosis.issues, [],
    )
    for check in diagnosis.endpoints:
        if check.usable is False:
            diagnosis.unusable_models.append(check.model)
            if check.status not in ("bad model", "no key"):  # the plan has said those already
                diagnosis.issues.append(f"model {check.model}: {check.detail}")
    return diagnosis


def key_status(settings: Settings, provider: str) -> KeyStatus:
    """Whether ``provider`` has a key: kgen's own setting first, then the variable its SDK reads."""
    env_variable, field = PROVIDER_KEYS[provider]
    if getattr(settings, field) is not None:
        source = settings.sources.get(field, "")
        if source.startswith("env"):
            return "yes (env)"
        return "yes (flag)" if source == "flag" else "yes (config)"
    return "yes (env)" if os.environ.get(env_variable, "").strip() else "no"


def render_diagnosis(d: Diagnosis, console: Console) -> None:
    """The report a person reads: one table per topic, then the plan and any issues."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    def section(title: str, rows: list[tuple[str, str]]) -> None:
        table = Table(title=title, title_justify="left", show_header=False, box=box.SIMPLE, pad_edge=False)
        table.add_column(style="bold", no_wrap=True)
        table.add_column(overflow="fold")
        for key, value in rows:
            table.add_row(Text(key), Text(value))
        print_table(table, console)

    config = d.config_file + ("" if d.config_file_exists else " (not present: defaults apply)")
    section("kgen", [("kgen", d.kgen_version), ("python", d.python), ("os", d.os), ("config file", config)])
    gpu_rows = [("GPU", d.gpu.name if d.gpu.available and d.gpu.name else "none visible to torch")]
    if d.gpu.available:
        gpu_rows.append(("target", d.gpu.target or "not a known kgen target"))
    gpu_rows.append(("torch CUDA", d.gpu.cuda_version or "none (CPU build)"))
    gpu_rows.append(("driver", d.gpu.driver_version or "not found (no nvidia-smi)"))
    section("hardware", gpu_rows)
    section("packages", [(name, version or "not installed") for name, version in d.packages.items()])
    section("models", [
        *((f"{provider} key", status) for provider, status in d.provider_keys.items()),
        ("models", ", ".join(d.models) or "none (offline mode)"),
    ])
    if d.endpoints:
        mark = {True: "✓ ", False: "✗ ", None: ""}
        section("model endpoints", [(c.model, mark[c.usable] + c.detail) for c in d.endpoints])
    kb = d.knowledge_base
    if kb.error:
        kb_state = f"unavailable: {kb.error}"
    elif kb.exists is False:
        kb_state = "does not exist yet"
    else:
        kb_state = f"{kb.kernels} kernels, {kb.guidance} guidance notes, {kb.problems} problems"
    kb_rows = [("location", kb.location + (f" ({kb.mode})" if kb.mode else "")), ("contents", kb_state)]
    if kb.embedding:
        kb_rows.append(("embedding", kb.embedding))
    section("knowledge base", kb_rows)
    def bullets(title: str, style: str, mark: str, lines: list[str]) -> None:
        table = Table(title=title, title_justify="left", title_style=style, show_header=False, box=None)
        table.add_column(no_wrap=True)
        table.add_column(overflow="fold")
        for line in lines:
            table.add_row(mark, Text(line))
        print_table(table, console)

    bullets('What `kgen "..."` will do here', "bold", "•", d.plan)
    if d.issues:
        bullets("Issues", "bold yellow", "!", d.issues)


# --------------------------------------------------------------------------------------
# Probes: each returns what it found, or raises; _probe turns a raise into an issue line
# --------------------------------------------------------------------------------------


def _probe(what: str, probe: Callable[[], T], issues: list[str], fallback: T) -> T:
    try:
        return probe()
    except Exception as exc:  # a probe failure is a finding, never a crash
        issues.append(f"{what}: probe failed: {type(exc).__name__}: {one_line(exc)}")
        return fallback


def _kgen_version() -> str:
    return __version__


def _package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None
    except Exception:
        return None


def _gpu_info(issues: list[str]) -> GpuInfo:
    info = GpuInfo()
    info.driver_version = _nvidia_driver_version(issues)
    try:
        import torch
    except Exception as exc:
        issues.append(f"torch: cannot be imported: {type(exc).__name__}: {one_line(exc)}")
        return info
    info.cuda_version = torch.version.cuda
    if not torch.cuda.is_available():
        return info
    info.available = True
    info.name = torch.cuda.get_device_name(0)

    try:
        info.target = resolve_target(info.name).name
    except UnknownTargetError:
        issues.append(
            f"GPU {info.name!r} is not a known kgen target: kernels are verified and timed on it, "
            "but speed-of-light figures need a target (see `kgen targets`)"
        )
    return info


def _nvidia_driver_version(issues: list[str]) -> str | None:
    executable = shutil.which("nvidia-smi")
    if executable is None:
        return None
    try:
        out = subprocess.run(
            [executable, "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        issues.append(f"nvidia-smi: {type(exc).__name__}: {one_line(exc)}")
        return None
    lines = [line.strip() for line in out.stdout.splitlines() if line.strip()]
    if out.returncode != 0 or not lines:
        detail = one_line(RuntimeError(out.stderr or out.stdout)) or f"exit code {out.returncode}"
        issues.append(f"nvidia-smi failed: {detail}")
        return None
    return lines[0]


def _knowledge_base_info(location: str) -> KnowledgeBaseInfo:
    if not location.startswith(("http://", "https://")) and not Path(location).exists():
        # opening would create an empty database; doctor only looks
        return KnowledgeBaseInfo(location=location, mode="embedded", exists=False)
    try:
        from kgen.knowledge_base.store import KnowledgeBase, KnowledgeBaseError
    except ImportError as exc:
        return KnowledgeBaseInfo(location=location, error=f"knowledge base module unavailable ({exc})")
    try:
        stats = KnowledgeBase.open(location).stats()
    except KnowledgeBaseError as exc:
        return KnowledgeBaseInfo(location=location, error=one_line(exc))
    except Exception as exc:
        return KnowledgeBaseInfo(location=location, error=f"{type(exc).__name__}: {one_line(exc)}")
    return KnowledgeBaseInfo(
        location=stats.location, mode=stats.mode, embedding=getattr(stats, "embedding", None), exists=True,
        kernels=stats.kernels, guidance=stats.guidance, problems=stats.problems,
    )


def _run_targets(settings: Settings, gpu: GpuInfo) -> list[str]:
    if settings.targets:
        return list(settings.targets)
    if gpu.available and gpu.target and settings.device != "cpu":
        return [gpu.target]
    return [FALLBACK_TARGET]


# --------------------------------------------------------------------------------------
# The plan: what a run would do with this machine and configuration
# --------------------------------------------------------------------------------------


def _plan(settings: Settings, d: Diagnosis) -> list[str]:
    lines = [_model_line(settings, d), _device_line(settings, d)]
    lines.append(f"backend {settings.backend}: candidates compiled for {', '.join(d.targets)}")
    on_cpu = settings.device == "cpu" or not d.gpu.available
    if not settings.models and on_cpu:
        # no timings to rank tuned variants by: a CPU offline run verifies a few, once
        from kgen.agent.run_options import CPU_OFFLINE_VARIANTS

        scope = (f"the known kernel and {counted(CPU_OFFLINE_VARIANTS, 'tuned variant')}, once "
                 "(without timings more variants cannot be ranked)")
    else:
        scope = f"up to {settings.budget} candidates over {settings.generations} generations"
    limits = [scope, f"{settings.eval_timeout_s:g} s per candidate"]
    if settings.time_s is not None:
        limits.append(f"{settings.time_s:g} s per run")
    if settings.max_cost_usd is not None:
        limits.append(f"${settings.max_cost_usd:g} of model usage")
    lines.append("limits: " + ", ".join(limits))
    if settings.train_check:
        lines.append("backward kernels also pass a training check (a small model, candidate vs reference)")
    if settings.precision or settings.torch_ops:
        own = "as each problem declares"
        lines.append(f"every candidate is judged under precision {settings.precision or own}, "
                     f"torch ops {settings.torch_ops or own}")
    lines.append(f"evaluations run {_where_evaluations_run(settings)}; runs saved under {settings.runs_location}")
    kb = d.knowledge_base
    if kb.error is None and kb.exists and kb.kernels == 0:
        lines.append(f"the knowledge base at {kb.location} holds no kernels yet")
    _check_setup(settings, d)
    return lines


def _model_line(settings: Settings, d: Diagnosis) -> str:
    if not settings.models:
        return ("offline mode (no model configured): retrieve the best known kernels and tune "
                "their parameters")

    configured = api_keys(settings)
    for model in settings.models:
        try:
            spec = parse_model(model)
        except ModelSpecError as exc:
            d.issues.append(one_line(exc))
            continue
        # the run's own rule, so the doctor never promises a key the run would withhold
        choice = choose_api_key(spec, configured.get(spec.provider))
        if choice.key is None:
            whose = _PROVIDER_NAMES[spec.provider] if spec.is_official_api else "an"
            d.issues.append(f"model {model} needs {whose} API key: set {choice.hint}")
    return f"models asked for candidates: {', '.join(settings.models)}"


def _device_line(settings: Settings, d: Diagnosis) -> str:
    cross = ", ".join(d.targets)
    if settings.device == "cuda" and not d.gpu.available:
        d.issues.append("device = cuda, but no CUDA GPU is visible to torch: runs will stop at once")
        return "device cuda requested, but there is no GPU here: nothing can run"
    if d.gpu.available and settings.device != "cpu":
        target = d.gpu.target or "no known target"
        return f"GPU: {d.gpu.name} → target {target}; kernels verified and timed on it"
    reason = "device = cpu" if d.gpu.available else "no GPU"
    info = _backend_info(settings.backend)
    if info is not None and not info.runs_on_cpu:
        return (f"{reason}: {info.label} kernels compiled for {cross} but not run (no CPU emulation): "
                "verification and timings need a GPU")
    label = info.label if info is not None else settings.backend
    return (f"{reason}: kernels verified in {label}'s CPU interpreter, cross-compiled for {cross}; "
            "timings need a GPU")


def _backend_info(name: str):
    """The registry's entry for the configured backend, or None (an unknown name: an issue)."""

    try:
        return backend_info(name)
    except UnknownBackendError:
        return None


def _where_evaluations_run(settings: Settings) -> str:
    """The executor setting in words (nothing is started: doctor only reads)."""
    gpus = f"{settings.gpus} GPU(s)" if settings.gpus else "every GPU"
    if settings.executor == "ray":
        return f"on a Ray cluster ({settings.ray_address or 'RAY_ADDRESS, else auto'}; {gpus} of the target's model)"
    return f"on this machine ({gpus}, a lane each)"


def _check_setup(settings: Settings, d: Diagnosis) -> None:
    if d.packages.get("torch") is None:
        d.issues.append("torch is not installed: kgen cannot compile or verify kernels")
    try:
        missing = missing_requirement(settings.backend)
    except UnknownBackendError as exc:
        missing = exc.message
    if missing is not None:
        d.issues.append(missing)
    elif _backend_info(settings.backend) is not None:
        for name in d.targets:
            try:
                problem = target_problem(settings.backend, resolve_target(name))
            except UnknownTargetError:
                continue  # the targets probe reports it
            if problem is not None:
                d.issues.append(problem)
    if settings.executor == "ray" and _package_version("ray") is None:
        d.issues.append("executor ray needs Ray: pip install 'kgen[ray]'")
    if settings.models and d.packages.get("langgraph") is None:
        d.issues.append("langgraph is not installed: the agent cannot run")
