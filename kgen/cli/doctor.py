"""`kgen doctor`: what this machine and configuration give kgen, and what a run will do here.

Doctor is what a person runs when something is off, so it must never be the
thing that breaks: every probe catches its own failure and turns it into a
line of the report. It never prints an API key, only whether one is present
and where it came from.

Unless told to stay offline, doctor also asks each configured model's endpoint, through
the real SDK and with a short deadline (``ENDPOINT_DEADLINE_S``, all endpoints at once),
for its models list, or for a one-token completion when the server has no list (or does
not list the model). Each model's line says whether the server is reachable (and if not,
why: connection refused, a host name that does not resolve, no answer in time), whether
the key was accepted (naming where that key comes from, by ``choose_api_key``, the rule a
run uses), whether the server serves the model, and how long it took. A configured model
that cannot be used (a malformed name, no key, unreachable, key rejected, model not
served) is an issue and makes ``exit_status`` 1.
"""

from __future__ import annotations

import errno
import os
import platform
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar
from urllib.parse import urlsplit

from pydantic import BaseModel, Field

from kgen.backends.targets import DEFAULT_TARGET
from kgen.core.settings import Settings

if TYPE_CHECKING:
    from rich.console import Console

    from kgen.agent.llm.models import ModelSpec
    from kgen.agent.llm.providers import KeyChoice

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
#: how long each model endpoint gets to answer `kgen doctor`, all requests to it included
ENDPOINT_DEADLINE_S = 5.0
#: doctor's exit status when a configured model cannot be used (0 otherwise)
EXIT_MODEL_UNUSABLE = 1
EndpointStatus = Literal[
    "ok", "unreachable", "timeout", "key rejected", "model not found", "error", "no key",
    "bad model", "not checked",
]


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


class EndpointCheck(BaseModel):
    """What one configured model's endpoint answered `kgen doctor` (never the key)."""

    #: the model as configured (``openai:gpt-5*2``)
    model: str
    #: the base URL its requests go to; None when the model string does not parse
    endpoint: str | None = None
    status: EndpointStatus
    #: False: a run cannot use this model; None: not known (not checked, offline)
    usable: bool | None
    #: milliseconds until the server answered the request that decided, when it answered
    latency_ms: float | None = None
    #: whether the server's models list names the model; None when it has no list or was not asked
    listed: bool | None = None
    #: the finding in plain words
    detail: str


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


def collect_diagnosis(
    settings: Settings, *, offline: bool = False, endpoint_deadline_s: float = ENDPOINT_DEADLINE_S,
) -> Diagnosis:
    """Probe the machine and the configuration; never raises for what it finds.

    Unless ``offline``, each configured model's endpoint is asked (see the module docstring),
    within ``endpoint_deadline_s`` seconds for all of them together.
    """
    from kgen.core.settings import config_file_path

    issues: list[str] = []
    config_file = config_file_path()
    gpu = _probe("GPU", lambda: _gpu_info(issues), issues, GpuInfo())
    packages = {name: _package_version(name) for name in PACKAGES}
    keys = {provider: key_status(settings, provider) for provider in PROVIDER_KEYS}
    knowledge_base = _probe(
        "knowledge base", lambda: _knowledge_base_info(settings.kb_location), issues,
        KnowledgeBaseInfo(location=_safe(lambda: settings.kb_location, "?")),
    )
    if knowledge_base.error:
        issues.append(f"knowledge base: {knowledge_base.error}")
    targets = _probe("targets", lambda: _run_targets(settings, gpu), issues, [FALLBACK_TARGET])
    diagnosis = Diagnosis(
        python=f"{platform.python_implementation()} {platform.python_version()}",
        kgen_version=_safe(_kgen_version, "unknown"),
        os=_safe(platform.platform, "unknown"),
        config_file=str(config_file),
        config_file_exists=_safe(config_file.is_file, False),
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
        console.print(table)

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
        console.print(table)

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
        issues.append(f"{what}: probe failed: {type(exc).__name__}: {_one_line(exc)}")
        return fallback


def _safe(probe: Callable[[], T], fallback: T) -> T:
    try:
        return probe()
    except Exception:
        return fallback


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else ""


def _kgen_version() -> str:
    from kgen.core.version import __version__

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
        issues.append(f"torch: cannot be imported: {type(exc).__name__}: {_one_line(exc)}")
        return info
    info.cuda_version = torch.version.cuda
    if not torch.cuda.is_available():
        return info
    info.available = True
    info.name = torch.cuda.get_device_name(0)
    from kgen.backends.targets import UnknownTargetError, resolve_target

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
        issues.append(f"nvidia-smi: {type(exc).__name__}: {_one_line(exc)}")
        return None
    lines = [line.strip() for line in out.stdout.splitlines() if line.strip()]
    if out.returncode != 0 or not lines:
        detail = _one_line(RuntimeError(out.stderr or out.stdout)) or f"exit code {out.returncode}"
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
        return KnowledgeBaseInfo(location=location, error=_one_line(exc))
    except Exception as exc:
        return KnowledgeBaseInfo(location=location, error=f"{type(exc).__name__}: {_one_line(exc)}")
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

        scope = (f"the known kernel and {CPU_OFFLINE_VARIANTS} tuned variant(s), once "
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
    lines.append(f"evaluations run {'(executor ray: not available in this version)' if settings.executor == 'ray' else 'on this machine'}; "
                 f"runs saved under {settings.runs_location}")
    kb = d.knowledge_base
    if kb.error is None and kb.exists and kb.kernels == 0:
        lines.append(f"the knowledge base at {kb.location} holds no kernels yet")
    _check_setup(settings, d)
    return lines


def _model_line(settings: Settings, d: Diagnosis) -> str:
    if not settings.models:
        return ("offline mode (no model configured): retrieve the best known kernels and tune "
                "their parameters")
    from kgen.agent.llm.models import ModelSpecError, parse_model
    from kgen.agent.llm.providers import choose_api_key
    from kgen.api import api_keys

    configured = api_keys(settings)
    for model in settings.models:
        try:
            spec = parse_model(model)
        except ModelSpecError as exc:
            d.issues.append(_one_line(exc))
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
    from kgen.backends.registry import UnknownBackendError, backend_info

    try:
        return backend_info(name)
    except UnknownBackendError:
        return None


def _check_setup(settings: Settings, d: Diagnosis) -> None:
    from kgen.backends.registry import UnknownBackendError, missing_requirement, target_problem
    from kgen.backends.targets import UnknownTargetError, resolve_target

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


# --------------------------------------------------------------------------------------
# Model endpoints: can a run use each configured model?
# --------------------------------------------------------------------------------------


def check_models(settings: Settings, *, offline: bool = False,
                 deadline_s: float = ENDPOINT_DEADLINE_S) -> list[EndpointCheck]:
    """One ``EndpointCheck`` per configured model, in the configured order.

    Endpoints are asked in parallel, each within ``deadline_s``; a server that has not
    answered by then (however slowly it sends bytes) is reported as not answering in time,
    and doctor does not wait for it.
    """
    from kgen.agent.llm.models import ModelSpecError, parse_model
    from kgen.agent.llm.providers import choose_api_key
    from kgen.api import api_keys

    configured = api_keys(settings)
    checks: dict[str, EndpointCheck] = {}
    asks: dict[str, tuple[str, Callable[[list[Any]], EndpointCheck]]] = {}
    labels: dict[str, str] = {}
    for text in settings.models:
        try:
            spec = parse_model(text)
        except ModelSpecError as exc:
            checks[text] = EndpointCheck(model=text, status="bad model", usable=False, detail=_one_line(exc))
            continue
        endpoint = spec.endpoint
        # the run's own rule: the doctor sends exactly the key a run would send, or none
        choice = choose_api_key(spec, configured.get(spec.provider))
        if choice.key is None:
            checks[text] = EndpointCheck(model=text, endpoint=endpoint, status="no key", usable=False,
                                         detail=f"not asked: no API key; set {choice.hint}")
        elif offline:
            checks[text] = EndpointCheck(model=text, endpoint=endpoint, status="not checked", usable=None,
                                         detail=f"{endpoint}: not checked (offline)")
        else:
            labels[text] = spec.label  # weights aside, one request per endpoint and model
            asks.setdefault(spec.label, (endpoint, _asker(
                spec, endpoint, choice, _key_source(settings, spec, choice), deadline_s)))
    for provider in {parse_model(label).provider for label in asks}:
        # before the clocks start: an SDK's import time is no endpoint's slowness (and an
        # SDK that fails to import is reported by each of its models' checks)
        _safe(lambda provider=provider: __import__(provider), None)
    answers = _ask_in_parallel(asks, deadline_s)
    for text, label in labels.items():
        checks[text] = answers[label].model_copy(update={"model": text})
    return [checks[text] for text in settings.models if text in checks]


def _key_source(settings: Settings, spec: ModelSpec, choice: KeyChoice) -> str:
    """Where the key ``choose_api_key`` picked comes from, in its own order (never the key)."""
    from kgen.agent.llm.providers import DEFAULT_KEY_ENV

    if choice.placeholder:
        return "kgen's placeholder (no key)"
    provider_variable = DEFAULT_KEY_ENV[spec.provider]
    if spec.api_key_env is not None and spec.api_key_env != provider_variable:
        return f"the one in ${spec.api_key_env}"
    field = f"{spec.provider}_api_key"
    if getattr(settings, field, None) is not None:
        source = settings.sources.get(field, "")
        if source.startswith("config file "):
            return f"{field} in the config file {source.removeprefix('config file ')}"
        if source.startswith("env "):
            return f"the one in ${source.removeprefix('env ')}"
        return f"the {spec.provider} key given to kgen"
    return f"the one in ${provider_variable}"


def _ask_in_parallel(asks: dict[str, tuple[str, Callable[[list[Any]], EndpointCheck]]],
                     deadline_s: float) -> dict[str, EndpointCheck]:
    """Run every ask in its own daemon thread; whatever has not answered by the deadline (plus
    a little for the SDK to give up on its own) is reported as not answering in time."""
    answers: dict[str, EndpointCheck] = {}
    clients: dict[str, list[Any]] = {label: [] for label in asks}
    lock = threading.Lock()

    def run(label: str, ask: Callable[[list[Any]], EndpointCheck]) -> None:
        answer = ask(clients[label])
        with lock:
            answers[label] = answer

    threads = [threading.Thread(target=run, args=(label, ask), daemon=True, name=f"kgen doctor: {label}")
               for label, (_, ask) in asks.items()]
    for thread in threads:
        thread.start()
    hard_end = time.monotonic() + deadline_s + 0.5
    for thread in threads:
        thread.join(max(0.0, hard_end - time.monotonic()))
    with lock:
        done = dict(answers)
    for label, (endpoint, _) in asks.items():
        if label not in done:
            done[label] = EndpointCheck(model=label, endpoint=endpoint, status="timeout", usable=False,
                                        detail=f"unreachable: no answer from {endpoint} within "
                                               f"{deadline_s:g} s (timed out)")
            for client in clients[label]:  # let go of its connections; the thread ends on its own
                _safe(client.close, None)
    return done


def _asker(spec: ModelSpec, endpoint: str, choice: KeyChoice, key_source: str,
           deadline_s: float) -> Callable[[list[Any]], EndpointCheck]:
    def ask(clients: list[Any]) -> EndpointCheck:
        try:
            return _ask_endpoint(spec, endpoint, choice, key_source, deadline_s, clients)
        except Exception as exc:  # a check that breaks is a finding, never a crash
            return EndpointCheck(model=spec.label, endpoint=endpoint, status="error", usable=False,
                                 detail=f"check failed: {type(exc).__name__}: {_one_line(exc)}")

    return ask


def _ask_endpoint(spec: ModelSpec, endpoint: str, choice: KeyChoice, key_source: str,
                  deadline_s: float, clients: list[Any]) -> EndpointCheck:
    """The models list, then (no list, or the model not on it) a one-token completion."""
    from kgen.agent.llm.providers import redactor, server_message

    assert choice.key is not None
    key = choice.key.get_secret_value()
    redact = redactor(key)  # never a key in a report line, even one a server quoted back
    end = time.monotonic() + deadline_s
    sdk, client = _sdk_client(spec.provider, endpoint, key, deadline_s)
    clients.append(client)

    def left() -> float:
        return max(0.05, end - time.monotonic())

    def latency_ms(latency: float) -> float:
        return round(latency * 1000, 1)

    def reachable(latency: float) -> str:
        """The text is written from the recorded figure, so the two never disagree by a rounding."""
        return f"reachable in {latency_ms(latency):.0f} ms"

    def result(status: EndpointStatus, usable: bool, detail: str, latency: float | None = None,
               listed: bool | None = None) -> EndpointCheck:
        return EndpointCheck(model=spec.label, endpoint=endpoint, status=status, usable=usable,
                             latency_ms=None if latency is None else latency_ms(latency),
                             listed=listed, detail=redact(detail))

    def rejected(err: Any, latency: float) -> EndpointCheck:
        said = f"key rejected (HTTP {err.status_code}{server_said(err)}) by {endpoint}"
        if choice.placeholder:
            return result("key rejected", False, f"{said}: kgen sent it no key, only a placeholder; "
                          f"give it {choice.hint}", latency)
        return result("key rejected", False, f"{said}; the key sent is {key_source}", latency)

    def server_said(err: Any) -> str:
        said = server_message(err)
        return f": {said}" if said else ""

    try:
        started = time.perf_counter()
        names: list[str] | None
        try:
            names = _model_names(spec, client, left)
        except sdk.APIStatusError as err:
            if err.status_code == 401:  # 403 may only forbid listing (a restricted key): ask below
                return rejected(err, time.perf_counter() - started)
            names = None
        except (sdk.APIResponseValidationError, ValueError, TypeError, AttributeError):
            names = None  # a "list" kgen cannot read: the completion tells
        list_latency = time.perf_counter() - started
        if names is not None and _listed(spec.model, names):
            return result("ok", True, f"{reachable(list_latency)}; the server lists {spec.model}",
                          list_latency, listed=True)
        started = time.perf_counter()
        try:
            _one_token(spec, client, official=spec.is_official_api, timeout=left())
        except sdk.APIStatusError as err:
            latency = time.perf_counter() - started
            if err.status_code in (401, 403):
                return rejected(err, latency)
            if err.status_code == 404 and names is not None:
                return result("model not found", False,
                              f"{reachable(latency)}, but the server does not serve {spec.model}: "
                              f"its models list names {_some(names)}, not {spec.model}, and a completion for "
                              f"it got HTTP 404{server_said(err)}", latency, listed=False)
            if err.status_code == 404:
                return result("model not found", False,
                              f"{reachable(latency)}, but a completion for {spec.model} got "
                              f"HTTP 404{server_said(err)}: check the model name and the base URL", latency)
            return result("error", False, f"{reachable(latency)}, but a completion for "
                          f"{spec.model} got HTTP {err.status_code}{server_said(err)}", latency,
                          listed=None if names is None else False)
        except sdk.APIResponseValidationError as err:
            latency = time.perf_counter() - started
            return result("error", False, f"reachable, but {endpoint} does not answer in the {spec.provider} "
                          f"protocol ({type(err).__name__}): check the base URL", latency)
        latency = time.perf_counter() - started
        if names is None:
            return result("ok", True, f"{reachable(latency)}; answered a one-token completion "
                          "(the server has no models list)", latency)
        return result("ok", True, f"{reachable(latency)}; {spec.model} is not in the server's "
                      "models list, but it answered a one-token completion", latency, listed=False)
    except sdk.APITimeoutError:
        return result("timeout", False,
                      f"unreachable: no answer from {endpoint} within {deadline_s:g} s (timed out)")
    except sdk.APIConnectionError as err:
        return result("unreachable", False, f"unreachable: {_connection_words(err, endpoint)}")
    finally:
        _safe(client.close, None)


def _sdk_client(provider: str, endpoint: str, key: str, timeout_s: float) -> tuple[Any, Any]:
    """The provider's SDK module and a client for ``endpoint``: no retries, a short timeout.

    The base URL is always explicit (``OPENAI_BASE_URL`` in the environment cannot redirect
    the key), and a loopback server is reached directly, never through a proxy meant for
    the internet (as the run's clients do).
    """
    if provider == "openai":
        import openai as sdk

        make = sdk.OpenAI
    else:
        import anthropic as sdk

        make = sdk.Anthropic
    from kgen.agent.llm.providers import http_library

    host = urlsplit(endpoint).hostname or ""
    http_client = None
    if host in ("localhost", "::1") or host.startswith("127."):
        http_client = sdk.DefaultHttpxClient(trust_env=False, transport=http_library(sdk).HTTPTransport())
    client = make(api_key=key, base_url=endpoint, timeout=timeout_s, max_retries=0, http_client=http_client)
    return sdk, client


#: how many names of a models list doctor reads (a page or two)
_MAX_LISTED = 2000


def _model_names(spec: ModelSpec, client: Any, left: Callable[[], float]) -> list[str]:
    extra = {"limit": 1000} if spec.provider == "anthropic" else {}
    names: list[str] = []
    for model in client.models.list(timeout=left(), **extra):
        names.append(str(model.id))
        if len(names) >= _MAX_LISTED:
            break
    return names


def _listed(model: str, names: list[str]) -> bool:
    """Whether a models list names ``model``: exactly, as a dated snapshot or alias of it
    (``claude-sonnet-4-5`` is listed as ``claude-sonnet-4-5-20250929``), or as Ollama's
    ``NAME:latest``."""
    from kgen.agent.llm.usage import SNAPSHOT_SUFFIX

    wanted = {model, SNAPSHOT_SUFFIX.sub("", model)}
    if ":" not in model:
        wanted.add(f"{model}:latest")
    return any(name in wanted or SNAPSHOT_SUFFIX.sub("", name.removeprefix("models/")) in wanted
               for name in names)


def _one_token(spec: ModelSpec, client: Any, *, official: bool, timeout: float) -> None:
    messages = [{"role": "user", "content": "Reply with OK."}]
    if spec.provider == "anthropic":
        client.messages.create(model=spec.model, max_tokens=1, messages=messages, timeout=timeout)
        return
    # the official API renamed the limit (reasoning models refuse the old name); other
    # OpenAI-compatible servers know the old one
    limit = {"max_completion_tokens": 1} if official else {"max_tokens": 1}
    client.chat.completions.create(model=spec.model, messages=messages, timeout=timeout, **limit)


def _some(names: list[str], shown: int = 5) -> str:
    if not names:
        return "no models"
    more = f", ... ({len(names)} in all)" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def _connection_words(err: BaseException, endpoint: str) -> str:
    """Why a connection failed, in plain words, from the exceptions under the SDK's own."""
    url = urlsplit(endpoint)
    host = url.hostname or endpoint
    try:
        port = url.port or (443 if url.scheme == "https" else 80)
    except ValueError:
        port = "?"
    chain: list[BaseException] = []
    seen: BaseException | None = err
    while seen is not None and seen not in chain and len(chain) < 12:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    for exc in chain:
        for inner in (exc, *(arg for arg in getattr(exc, "args", ()) if isinstance(arg, BaseException))):
            if isinstance(inner, socket.gaierror):
                return f"the host name {host} does not resolve (DNS lookup failed)"
            if isinstance(inner, ConnectionRefusedError) or getattr(inner, "errno", None) == errno.ECONNREFUSED:
                return f"connection refused: nothing listens at {host}:{port} (is the server running?)"
            if getattr(inner, "errno", None) in (errno.ENETUNREACH, errno.EHOSTUNREACH):
                return f"no route to {host}:{port} (network unreachable)"
            if isinstance(inner, ssl.SSLError):
                return f"the TLS handshake with {host} failed ({_one_line(inner) or type(inner).__name__})"
    text = " ".join(str(exc) for exc in chain).lower()
    if "connection refused" in text:
        return f"connection refused: nothing listens at {host}:{port} (is the server running?)"
    if any(words in text for words in ("name or service not known", "nodename nor servname",
                                       "name resolution", "getaddrinfo failed")):
        return f"the host name {host} does not resolve (DNS lookup failed)"
    if "certificate" in text or "ssl" in text:
        return f"the TLS handshake with {host} failed"
    if "proxy" in text:
        return f"the proxy refused the connection to {host}:{port}"
    detail = next((_one_line(exc) for exc in reversed(chain) if _one_line(exc)), type(err).__name__)
    return f"cannot connect to {host}:{port} ({detail})"
