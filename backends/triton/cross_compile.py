"""Compile recorded Triton launches for hardware that need not be present.

For each distinct kernel specialization launched (kernel name, argument types,
constexpr values, value specializations and compile options) this builds an
``ASTSource`` from the kernel's Python function and calls
``triton.compile(src, target=GPUTarget(backend, arch, warp_size), options=...)``.
Triton's CUDA (sm_80/89/90/100) and HIP (gfx942) code generators, ``ptxas`` and
the AMDGPU LLVM backend all run without a GPU.

Resource figures in each :class:`KernelReport`:

* ``shared_bytes``, ``num_warps``, ``num_stages``: the compiled kernel's metadata
  (``metadata.shared`` is the dynamic shared memory / LDS the launch asks for).
* CUDA ``registers`` / ``spills``: Triton only learns ``n_regs``/``n_spills`` when
  it loads the cubin on a GPU (``cuFuncGetAttribute``). Here they are read from
  the cubin with Triton's bundled ``cuobjdump -res-usage`` (``REG:`` and
  ``LOCAL:``), falling back to ``ptxas -v`` on the PTX. ``spills`` follows
  Triton's definition, local-memory bytes / 4, so the figure matches
  ``CompiledKernel.n_spills`` on the device.
* HIP ``registers`` / ``spills``: parsed from the AMDGPU assembly's kernel
  metadata: ``.vgpr_count`` (what ``hipFuncGetAttribute(NUM_REGS)`` reports,
  per lane, AGPRs included on gfx90a+) and ``.private_segment_fixed_size`` / 4
  (Triton's n_spills: scratch bytes / 4).
* Triton 3.4 wheels bundle no AMD linker; without ROCm installed the HIP
  binary is left unlinked by a stand-in ``ld.lld`` (see ``_ensure_hip_linker``),
  which does not change the assembly the figures come from.
* ``None`` where a figure cannot be read (for instance no cuobjdump/ptxas in an
  unusual Triton build); the report is still ``ok``.

Interpret mode: under ``TRITON_INTERPRET=1`` ``@triton.jit`` builds
``InterpretedFunction`` objects, and so does Triton for its own library
(``tl.sum``, ``tl.cdiv`` ... are ``@jit`` functions decorated at import), which
the code generator cannot compile. Turning the knob off afterwards cannot undo
that, so in an interpreting process compilation runs in a worker subprocess
started without ``TRITON_INTERPRET``; it imports the candidate from its file and
compiles there. The worker stays up for later calls (one per process, restarted
after a timeout or crash). In a non-interpreting (GPU) process compilation runs
in-process on the module's own ``JITFunction`` objects.

Failures never raise: a kernel that does not compile for a target (or cannot be
found, or a worker that dies) gives ``ok=False`` with the error's first
meaningful line.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import json
import os
import re
import select
import subprocess
import sys
import tempfile
import threading
import time
import types
from pathlib import Path
from typing import Any

from kgen.backends.base import KernelLaunch, KernelReport
from kgen.backends.module_loading import load_module_from_file
from kgen.backends.targets import HardwareTarget, resolve_target
from kgen.backends.triton.launches import _KERNEL_OBJECTS
from kgen.errors import KgenError

#: seconds one cross-compile request may take in the worker before it is killed
DEFAULT_TIMEOUT_S = 600.0

_INT_TYPES = frozenset({"i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64"})


class CrossCompileError(KgenError):
    """A launch that cannot be turned into a compile job (missing kernel, unsupported argument)."""


# ----------------------------------------------------------------------------------------
# Public entry points
# ----------------------------------------------------------------------------------------


def cross_compile(
    module: types.ModuleType,
    launches: list[KernelLaunch],
    target: HardwareTarget | str,
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> list[KernelReport]:
    """Reports for each distinct kernel specialization in ``launches``, compiled for ``target``."""
    target = resolve_target(target)
    return cross_compile_many(module, launches, [target], timeout=timeout)[target.name]


def cross_compile_many(
    module: types.ModuleType,
    launches: list[KernelLaunch],
    targets: list[HardwareTarget | str],
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> dict[str, list[KernelReport]]:
    """Like :func:`cross_compile` for several targets at once (one worker round trip)."""
    resolved = [resolve_target(t) for t in targets]
    jobs = distinct_jobs(launches)
    if not jobs or not resolved:
        return {t.name: [] for t in resolved}
    if _in_process_possible(module, jobs):
        return compile_jobs(module, jobs, resolved)
    path = getattr(module, "__file__", None)
    if not path:
        return _all_failed(jobs, resolved, "cannot cross-compile: candidate module has no source file")
    return _worker_compile(Path(path), jobs, resolved, timeout)


def distinct_jobs(launches: list[KernelLaunch]) -> list[KernelLaunch]:
    """One launch per distinct compile (kernel, types, constants, specialization, options)."""
    seen: dict[str, KernelLaunch] = {}
    for launch in launches:
        key = json.dumps(
            [launch.kernel, launch.signature, launch.constants, launch.specialization, launch.options],
            sort_keys=True,
            default=str,
        )
        seen.setdefault(key, launch)
    return list(seen.values())


# ----------------------------------------------------------------------------------------
# Compiling (in this process: a non-interpreting one, or the worker)
# ----------------------------------------------------------------------------------------


def compile_jobs(
    module: types.ModuleType, jobs: list[KernelLaunch], targets: list[HardwareTarget]
) -> dict[str, list[KernelReport]]:
    out: dict[str, list[KernelReport]] = {t.name: [] for t in targets}
    for target in targets:
        for job in jobs:
            out[target.name].append(compile_job(module, job, target))
    return out


def shared_limit_bytes(target: HardwareTarget) -> int:
    """The most shared memory (AMD: LDS) one block may use on ``target``: NVIDIA keeps 1 KB of
    each SM's shared memory for the system (H100: 228 KB per SM, 227 KB per block); an AMD
    workgroup may use the whole LDS."""
    reserved = 1024 if target.backend == "cuda" else 0
    return target.shared_memory_per_sm_kb * 1024 - reserved


def shared_overflow(shared_bytes: int | None, target: HardwareTarget) -> str | None:
    """Why a kernel that compiled cannot launch on ``target`` (its shared memory does not fit a
    block there), or None. Compiling without the GPU does not check this; the launch would fail
    with OutOfResources, so it is the kernel's failure on that target."""
    if shared_bytes is None or shared_bytes <= (limit := shared_limit_bytes(target)):
        return None
    return (f"out of resources: needs {shared_bytes / 1024:.0f} KB of shared memory per block, "
            f"{target.name} has {limit / 1024:.0f} KB")


def compile_job(module: types.ModuleType, job: KernelLaunch, target: HardwareTarget) -> KernelReport:
    """Compile one launch's specialization for one target; never raises."""
    try:
        import triton
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource

        kernel = find_kernel(module, job.kernel)
        if kernel is None:
            raise CrossCompileError(f"kernel {job.kernel!r} not found in {module.__name__} (it must be module-level)")
        gpu_target = GPUTarget(*target.gpu_target())
        if target.backend == "hip":
            _ensure_hip_linker()
        signature, constexprs, attrs = _specialize(module, kernel, job, gpu_target)
        src = ASTSource(kernel, signature, constexprs, attrs)
        options = {k: v for k, v in job.options.items() if v is not None}
        # Triton prints the whole PTX to stdout when ptxas fails; keep it out of our output
        with contextlib.redirect_stdout(io.StringIO()):
            compiled = triton.compile(src, target=gpu_target, options=options)
        registers, spills = resource_usage(compiled, target)
        md = compiled.metadata
        shared = _int_or_none(getattr(md, "shared", None))
        overflow = shared_overflow(shared, target)
        return KernelReport(
            kernel=job.kernel,
            target=target.name,
            ok=overflow is None,
            error=overflow,
            registers=registers,
            spills=spills,
            shared_bytes=shared,
            num_warps=_int_or_none(getattr(md, "num_warps", None)),
            num_stages=_int_or_none(getattr(md, "num_stages", None)),
        )
    except BaseException as exc:  # noqa: BLE001 - compiler errors come in many types
        if isinstance(exc, KeyboardInterrupt):
            raise
        return KernelReport(kernel=job.kernel, target=target.name, ok=False, error=error_line(exc))


_STUB_LLD = """#!/bin/sh
# kgen: stand-in for ROCm's ld.lld, which Triton < 3.5 wheels do not bundle. It leaves the
# hsaco unlinked (a copy of the object); cross-compiling reads only the AMDGPU assembly.
if [ "$1" = "--version" ]; then echo "kgen stub ld.lld 1.0 (hsaco left unlinked)"; exit 0; fi
out=""; in=""
while [ $# -gt 0 ]; do
  case "$1" in
    -o) out="$2"; shift 2 ;;
    -flavor) shift 2 ;;
    -*) shift ;;
    *) in="$1"; shift ;;
  esac
done
exec cp "$in" "$out"
"""


def _ensure_hip_linker() -> None:
    """Give Triton's HIP backend a linker when it has none (Triton 3.4 without ROCm installed).

    Newer Triton links the hsaco with a bundled LLD (``amd.link_hsaco``); 3.4 runs
    ``ld.lld`` from ROCm or ``TRITON_HIP_LLD_PATH`` and fails without one. Then
    point ``TRITON_HIP_LLD_PATH`` at a stub that copies the object: registers and
    scratch come from the assembly, which linking does not change.
    """
    try:
        from triton.backends.amd.compiler import HIPBackend
    except ImportError:
        return
    finder = getattr(HIPBackend, "path_to_rocm_lld", None)
    if finder is None:
        return
    try:
        finder()
        return
    except Exception:  # noqa: BLE001 - "ROCm linker ... not found"
        pass
    stub = Path(tempfile.gettempdir()) / f"kgen-stub-ld.lld-{os.getuid() if hasattr(os, 'getuid') else 0}"
    if not stub.exists():
        tmp = stub.with_suffix(f".{os.getpid()}")
        tmp.write_text(_STUB_LLD)
        tmp.chmod(0o755)
        os.replace(tmp, stub)
    os.environ["TRITON_HIP_LLD_PATH"] = str(stub)


def _specialize(module, kernel, job: KernelLaunch, gpu_target):
    """ASTSource's (signature, constexprs, attrs), specialized as Triton's launcher would."""
    from triton.compiler.compiler import make_backend

    backend = make_backend(gpu_target)
    divisible = backend.parse_attr("D") if hasattr(backend, "parse_attr") else [["tt.divisibility", 16]]
    signature: dict[str, str] = {}
    constexprs: dict[tuple[int, ...], Any] = {}
    attrs: dict[tuple[int, ...], Any] = {}
    for i, param in enumerate(kernel.params):
        name = param.name
        if param.is_constexpr or name in job.constants:
            if name not in job.constants:
                raise CrossCompileError(f"constexpr {name!r} of {job.kernel} missing from the recorded launch")
            signature[name] = "constexpr"
            constexprs[(i,)] = decode_constant(job.constants[name], module)
            continue
        if name not in job.signature:
            raise CrossCompileError(f"argument {name!r} of {job.kernel} missing from the recorded launch")
        ty = job.signature[name]
        if ty.startswith(("unsupported<", "(")):
            raise CrossCompileError(f"argument {name!r} of type {ty} is not supported for cross-compiling")
        spec = job.specialization.get(name, "")
        no_spec = bool(getattr(param, "do_not_specialize", False))
        no_align = no_spec or bool(getattr(param, "do_not_specialize_on_alignment", False))
        annotated = bool(getattr(param, "annotation_type", ""))
        if spec == "1" and ty in _INT_TYPES and not no_spec and not annotated:
            signature[name] = "constexpr"  # Triton compiles an int equal to 1 as the constant 1
            constexprs[(i,)] = 1
            continue
        signature[name] = ty
        if "D" in spec and not no_align:  # the recorder only marks pointers and ints
            attrs[(i,)] = divisible
    return signature, constexprs, attrs


def decode_constant(value: Any, module: types.ModuleType | None = None) -> Any:
    """Turn a recorded (JSON-safe) constexpr value back into what the kernel was launched with."""
    if isinstance(value, str):
        if value.startswith("tl.dtype:"):
            import triton.language as tl

            return tl.dtype(value.split(":", 1)[1])
        if value.startswith("tl."):
            import triton.language as tl

            attr = getattr(tl, value[3:], None)
            if isinstance(attr, tl.dtype):
                return attr
        if value.startswith("triton.jit:") and module is not None:
            kernel = find_kernel(module, value.split(":", 1)[1])
            if kernel is not None:
                return kernel
    if isinstance(value, list):
        return tuple(decode_constant(v, module) for v in value)
    return value


def find_kernel(module: types.ModuleType, name: str):
    """The compilable ``JITFunction`` (or, under the interpreter, ``InterpretedFunction``) named ``name``."""
    candidates: list[Any] = list(vars(module).values())
    for value in list(candidates):
        if isinstance(value, type) and getattr(value, "__module__", None) == module.__name__:
            candidates.extend(vars(value).values())
    for value in candidates:
        kernel = _unwrap_kernel(value)
        if kernel is not None and getattr(kernel.fn, "__name__", None) == name:
            return kernel

    kernel = _unwrap_kernel(_KERNEL_OBJECTS.get(name))
    if kernel is not None and getattr(kernel.fn, "__module__", None) == module.__name__:
        return kernel
    return None


def _unwrap_kernel(value):
    """Autotuner / Heuristics wrappers -> the kernel underneath; None if not a kernel."""
    for _ in range(16):
        if value is None:
            return None
        cls_names = {c.__name__ for c in type(value).__mro__}
        if cls_names & {"JITFunction", "InterpretedFunction"}:
            return value
        if cls_names & {"KernelInterface", "Autotuner", "Heuristics"} and hasattr(value, "fn"):
            value = value.fn
            continue
        return None
    return None


def _in_process_possible(module: types.ModuleType, jobs: list[KernelLaunch]) -> bool:
    if _interpreting():
        return False
    for job in jobs:
        kernel = find_kernel(module, job.kernel)
        if kernel is None or type(kernel).__name__ == "InterpretedFunction":
            return False
    return True


def _interpreting() -> bool:
    try:
        from triton import knobs

        return bool(knobs.runtime.interpret)
    except Exception:  # noqa: BLE001 - Triton without knobs
        return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


# ----------------------------------------------------------------------------------------
# Registers and spills
# ----------------------------------------------------------------------------------------


def resource_usage(compiled, target: HardwareTarget) -> tuple[int | None, int | None]:
    """(registers per thread, spills) of a compiled kernel, read without loading it on a GPU."""
    asm = getattr(compiled, "asm", {}) or {}
    name = getattr(compiled.metadata, "name", None) or getattr(compiled, "name", "")
    if target.backend == "hip":
        return amdgcn_usage(asm.get("amdgcn", ""), name)
    cubin = asm.get("cubin")
    if cubin:
        usage = cubin_usage(cubin, name)
        if usage != (None, None):
            return usage
    ptx = asm.get("ptx")
    if ptx:
        return ptxas_usage(ptx, target)
    return None, None


def _tool_path(tool: str) -> str | None:
    try:
        from triton import knobs

        path = getattr(knobs.nvidia, tool.replace("-", "_")).path
        if path and os.path.exists(path):
            return path
    except Exception:  # noqa: BLE001
        pass
    try:
        import triton

        path = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", tool)
        return path if os.path.exists(path) else None
    except Exception:  # noqa: BLE001
        return None


def cubin_usage(cubin: bytes, name: str) -> tuple[int | None, int | None]:
    """REG and LOCAL/4 of function ``name`` from ``cuobjdump -res-usage``."""
    tool = _tool_path("cuobjdump")
    if tool is None:
        return None, None
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(cubin)
        path = f.name
    try:
        out = subprocess.run([tool, "-res-usage", path], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None, None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
    return parse_res_usage(out, name)


def parse_res_usage(text: str, name: str) -> tuple[int | None, int | None]:
    blocks = re.findall(r"Function\s+([^\s:]+):\s*\n\s*(.*)", text)
    for fn_name, line in blocks:
        if fn_name == name or len(blocks) == 1:
            reg = re.search(r"REG:(\d+)", line)
            local = re.search(r"LOCAL:(\d+)", line)
            return (int(reg.group(1)) if reg else None, int(local.group(1)) // 4 if local else None)
    return None, None


def ptxas_usage(ptx: str, target: HardwareTarget) -> tuple[int | None, int | None]:
    """Registers and stack-frame bytes / 4 from ``ptxas -v`` (fallback when cuobjdump fails)."""
    arch = target.arch
    tool = _tool_path("ptxas-blackwell") if isinstance(arch, int) and arch >= 100 else None
    tool = tool or _tool_path("ptxas")
    if tool is None or not isinstance(arch, int):
        return None, None
    gpu_name = f"sm_{arch}{'a' if arch >= 90 else ''}"
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp, "k.ptx")
        src.write_text(ptx)
        try:
            proc = subprocess.run(
                [tool, "-v", f"--gpu-name={gpu_name}", str(src), "-o", str(Path(tmp, "k.o"))],
                capture_output=True, text=True, timeout=120,
            )
        except (OSError, subprocess.SubprocessError):
            return None, None
    log = proc.stderr + proc.stdout
    reg = re.search(r"Used (\d+) registers", log)
    stack = re.search(r"(\d+) bytes stack frame", log)
    return (int(reg.group(1)) if reg else None, int(stack.group(1)) // 4 if stack else None)


def amdgcn_usage(asm: str, name: str = "") -> tuple[int | None, int | None]:
    """(.vgpr_count, .private_segment_fixed_size / 4) from AMDGPU assembly's kernel metadata."""
    if not asm:
        return None, None
    vgpr = re.search(r"\.vgpr_count:\s*(\d+)", asm) or re.search(r";\s*TotalNumVgprs:\s*(\d+)", asm) or re.search(
        r";\s*NumVgprs:\s*(\d+)", asm
    )
    scratch = re.search(r"\.private_segment_fixed_size:\s*(\d+)", asm) or re.search(r";\s*ScratchSize:\s*(\d+)", asm)
    return (int(vgpr.group(1)) if vgpr else None, int(scratch.group(1)) // 4 if scratch else None)


# ----------------------------------------------------------------------------------------
# Errors
# ----------------------------------------------------------------------------------------


def error_line(exc: BaseException) -> str:
    """The first meaningful line of a compile error, prefixed with its type (and kernel position)."""
    name = type(exc).__name__
    text = str(exc) or repr(exc)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines:
        return name
    message = lines[0]
    where = ""
    m = re.match(r"at (\d+:\d+):?$", lines[0])
    if m:  # triton CompilationError: "at L:C:", the source excerpt, a caret line, then the message
        where = f" at {m.group(1)}"
        caret = max((i for i, ln in enumerate(lines) if set(ln) <= {"^", " ", "~"}), default=None)
        rest = lines[caret + 1:] if caret is not None else lines[1:]
        if rest:
            message = rest[0]
        elif exc.__cause__ is not None:  # an error inside a called @jit function
            message = "in a called function: " + error_line(exc.__cause__)
        else:
            message = "compilation failed"
    else:
        errors = [ln for ln in lines if re.search(r"\berror\b\s*:", ln, re.IGNORECASE)]
        if errors and not re.search(r"\berror\b\s*:", message, re.IGNORECASE):
            message = f"{message}: {errors[0]}"
    message = f"{name}{where}: {message}"
    return message if len(message) <= 400 else message[:397] + "..."


def _int_or_none(value) -> int | None:
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        return None


def _all_failed(jobs, targets, error: str) -> dict[str, list[KernelReport]]:
    return {
        t.name: [KernelReport(kernel=j.kernel, target=t.name, ok=False, error=error) for j in jobs] for t in targets
    }


# ----------------------------------------------------------------------------------------
# The worker: a subprocess without TRITON_INTERPRET that compiles on request
# ----------------------------------------------------------------------------------------


class _Worker:
    """``python -m kgen.backends.triton.cross_compile --worker FD``: JSON requests on stdin, replies on FD."""

    def __init__(self) -> None:
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        self.log = tempfile.NamedTemporaryFile(prefix="kgen-xc-", suffix=".log", delete=False)
        read_fd, write_fd = os.pipe()
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "kgen.backends.triton.cross_compile", "--worker", str(write_fd)],
                stdin=subprocess.PIPE,
                stdout=self.log,
                stderr=subprocess.STDOUT,
                pass_fds=(write_fd,),
                env=env,
                close_fds=True,
            )
        finally:
            os.close(write_fd)
        self.replies = os.fdopen(read_fd, "rb", buffering=0)
        self.buffer = b""

    def alive(self) -> bool:
        return self.proc.poll() is None

    def request(self, payload: dict, timeout: float) -> dict:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(payload, default=str) + "\n").encode())
        self.proc.stdin.flush()
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"cross-compile worker gave no answer in {timeout:g} s")
            ready, _, _ = select.select([self.replies], [], [], min(left, 1.0))
            if ready:
                chunk = os.read(self.replies.fileno(), 1 << 20)
                if not chunk:
                    raise RuntimeError(f"cross-compile worker died: {self.log_tail()}")
                self.buffer += chunk
            elif not self.alive():
                raise RuntimeError(f"cross-compile worker died (exit {self.proc.returncode}): {self.log_tail()}")
        line, _, self.buffer = self.buffer.partition(b"\n")
        return json.loads(line)

    def log_tail(self) -> str:
        try:
            lines = [ln for ln in Path(self.log.name).read_text(errors="replace").splitlines() if ln.strip()]
        except OSError:
            return "no log"
        return lines[-1][:300] if lines else "no output"

    def close(self) -> None:
        with contextlib.suppress(Exception):
            if self.proc.stdin:
                self.proc.stdin.close()
        with contextlib.suppress(Exception):
            self.proc.wait(timeout=5)
        if self.proc.poll() is None:
            with contextlib.suppress(Exception):
                self.proc.kill()
                self.proc.wait(timeout=5)
        with contextlib.suppress(Exception):
            self.replies.close()
        with contextlib.suppress(Exception):
            self.log.close()
            os.unlink(self.log.name)


_worker_lock = threading.Lock()
_worker: _Worker | None = None


def _worker_compile(path: Path, jobs, targets, timeout: float) -> dict[str, list[KernelReport]]:
    global _worker
    payload = {
        "module_path": str(path),
        "jobs": [j.model_dump(mode="json") for j in jobs],
        "targets": [t.name for t in targets],
    }
    with _worker_lock:
        try:
            if _worker is None or not _worker.alive():
                if _worker is not None:
                    _worker.close()
                _worker = _Worker()
            reply = _worker.request(payload, timeout)
        except Exception as exc:  # noqa: BLE001 - a dead or stuck worker fails the request, not the caller
            if _worker is not None:
                _worker.close()
                _worker = None
            return _all_failed(jobs, targets, f"{type(exc).__name__}: {exc}")
    if "error" in reply:
        return _all_failed(jobs, targets, reply["error"])
    return {name: [KernelReport.model_validate(r) for r in reports] for name, reports in reply["reports"].items()}


def shutdown_worker() -> None:
    """Stop the cross-compile worker, if one is running (also done at exit)."""
    global _worker
    with _worker_lock:
        if _worker is not None:
            _worker.close()
            _worker = None


atexit.register(shutdown_worker)


def _serve(reply_fd: int) -> None:
    """Worker loop: one JSON request per stdin line, one JSON reply per line on ``reply_fd``."""
    os.environ.pop("TRITON_INTERPRET", None)

    modules: dict[tuple[str, int, int], types.ModuleType] = {}
    out = os.fdopen(reply_fd, "w", buffering=1)
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
            path = Path(request["module_path"])
            stat = path.stat()
            key = (str(path), stat.st_mtime_ns, stat.st_size)
            if key not in modules:
                modules[key] = load_module_from_file(path, prefix="kgen_xc_candidate")
            jobs = [KernelLaunch.model_validate(j) for j in request["jobs"]]
            targets = [resolve_target(t) for t in request["targets"]]
            reports = compile_jobs(modules[key], jobs, targets)
            reply: dict[str, Any] = {
                "reports": {name: [r.model_dump(mode="json") for r in rs] for name, rs in reports.items()}
            }
        except BaseException as exc:  # noqa: BLE001 - the candidate's import may raise anything
            if isinstance(exc, KeyboardInterrupt):
                raise
            reply = {"error": error_line(exc)}
        out.write(json.dumps(reply, default=str) + "\n")
        out.flush()


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        _serve(int(sys.argv[2]))
    else:
        sys.exit("usage: python -m kgen.backends.triton.cross_compile --worker FD")
