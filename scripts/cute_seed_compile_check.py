"""Compile CuTe DSL seed kernels for sm_90a without a GPU, and check their compile-cache keys.

Usage:
    CUTE_DSL_ARCH=sm_90a python scripts/cute_seed_compile_check.py SEED.py [...]
        [--ptx DIR] [--ones] [--misaligned] [--launch-plan]

For each seed (named after a problem in evals/problem/problems/) and each size set of that problem
(defaults, KGEN_SMALL_SIZES, KGEN_PROBE_SIZES, each of KGEN_EXTRA_SIZES; with --ones also
each size constant set to 1; with --misaligned also every size with its floating-point
inputs moved one element off their 16-byte alignment), builds the inputs on the CPU with
the problem's get_inputs() and calls ModelNew.forward with the kernel runs stubbed out
(there is no GPU to run them): every cute.compile forward makes happens as it would on a
GPU, and every executor call gets its arguments marshalled by the DSL as on a GPU.

The seed's compile cache is shared by the size sets in order, as in one kgen process, so a
size whose cache key matches an earlier size's runs that earlier executor. Key check: when
a call reused an executor, forward is called again on a fresh load of the seed (empty
cache) and must compile exactly the kernels the reusing call ran (the same compiled
module, symbol names aside);
otherwise the key misses something the compile specialised on and a kernel built for
another size would run (FAIL "cache key").

A seed whose forward calls its @cute.jit functions directly gets them traced and compiled
by those calls (reported as direct calls). With --launch-plan, a seed whose ModelNew has
launch_plan(*inputs) -> (outputs, [(jit_fn, args), ...]) is compiled from those launches
instead of through forward, with no key check (--misaligned does not apply to it).

With --ptx DIR the PTX of each compile is kept there and the widths of the global loads
and stores are summarised. Prints OK/FAIL per seed and size; exits 1 on any failure.
"""

import argparse
import collections
import glob
import hashlib
import importlib.util
import os
import re
import sys
import time
import traceback

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
if any(a.startswith("--ptx") for a in sys.argv):
    os.environ["CUTE_DSL_NO_CACHE"] = "1"  # a cache hit would write no PTX

import cutlass.cute as cute  # noqa: E402
from cutlass.base_dsl.jit_executor import JitCompiledFunction, JitExecutor  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROBLEMS = os.path.join(REPO, "evals", "problem", "problems")


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def size_sets(problem, ones):
    sets = [("default", {})]
    if getattr(problem, "KGEN_SMALL_SIZES", None):
        sets.append(("small", problem.KGEN_SMALL_SIZES))
    if getattr(problem, "KGEN_PROBE_SIZES", None):
        sets.append(("probe", problem.KGEN_PROBE_SIZES))
    for i, extra in enumerate(getattr(problem, "KGEN_EXTRA_SIZES", []) or []):
        sets.append((f"extra{i}", extra))
    if ones:  # the verifier also moves each size constant to 1
        for k in sorted(set().union(*[s for _, s in sets])):
            sets.append((f"{k}=1", {k: 1}))
    return sets


def ptx_summary(ptx_dir):
    counts = collections.Counter()
    for f in glob.glob(os.path.join(ptx_dir, "*.ptx")):
        for op in re.findall(r"\b((?:ld|st)\.global[a-z0-9.]*)", open(f).read()):
            counts[op] += 1
    return " ".join(f"{k}x{v}" for k, v in sorted(counts.items())) or "no ptx"


def misaligned(inputs):
    """The inputs with every floating-point tensor copied to a buffer one element past 16-byte alignment."""
    import torch

    out = []
    for t in inputs:
        if isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel() > 0:
            buf = torch.empty(t.numel() + 16, dtype=t.dtype, device=t.device)
            start = (-buf.data_ptr() % 16) // t.element_size() + 1
            t = buf[start:start + t.numel()].view(t.shape).copy_(t)
        out.append(t)
    return out


# -- forward with the kernel runs stubbed out ---------------------------------------------------

class Capture:
    """What one forward call compiled (cute.compile calls) and ran (stubbed program runs)."""

    active = None

    def __init__(self, ptx_dir=None):
        self.ptx_dir = ptx_dir
        self.compiled = []  # (jit function name, seconds, executor, ptx summary or None)
        self.ran = []  # the compiled functions whose program forward ran, in call order

    def __enter__(self):
        Capture.active = self
        return self

    def __exit__(self, *exc):
        Capture.active = None


def _stub_run(self, exe_args):
    """JitCompiledFunction.run_compiled_program (executor calls and direct @cute.jit calls): not run."""
    if Capture.active is not None:
        Capture.active.ran.append(self)
    return None


class _RecordingCompile:
    """Stands in for cute.compile (and cute.compile[options]) while this script runs."""

    def __init__(self, original):
        self.original = original

    def __getitem__(self, options):
        return _RecordingCompile(self.original[options])

    def __call__(self, fn, *args, **kwargs):
        cap = Capture.active
        ptx = None
        if cap is not None and cap.ptx_dir and "options" not in kwargs:
            ptx = os.path.join(cap.ptx_dir, f"{len(cap.compiled)}_{getattr(fn, '__name__', 'jit')}")
            os.makedirs(ptx, exist_ok=True)
            kwargs["options"] = f"--keep-ptx --dump-dir {ptx}"
        t0 = time.time()
        executor = self.original(fn, *args, **kwargs)
        if cap is not None:
            cap.compiled.append((getattr(fn, "__name__", "jit"), time.time() - t0, executor, ptx and ptx_summary(ptx)))
        return executor


JitCompiledFunction.run_compiled_program = _stub_run
JitExecutor.run_compiled_program = _stub_run
cute.compile = _RecordingCompile(cute.compile)


class KeyCheckError(Exception):
    """A size ran an executor compiled for another size that compiles to different code."""


def fingerprint(executor):
    """The compiled module's text, equal for two compiles of the same specialisation. The DSL
    names the host function after every argument's value, run-time scalars included (the
    grid size of rmsnorm_backward), so the function and kernel names are blanked out: what
    is compared is the code."""
    text = str(executor.ir_module)
    for symbol in sorted([executor.function_name, *(executor.kernel_info or {})], key=len, reverse=True):
        text = text.replace(symbol, "<symbol>")
    return hashlib.sha1(text.encode()).hexdigest()


def run_forward(seed, init, inputs, ptx_dir=None):
    import torch

    with Capture(ptx_dir) as cap, torch.no_grad():
        seed.ModelNew(*init)(*inputs)
    return cap


def check_size_by_forward(seed_path, name, seed, label, init, inputs, compiled_at, ptx_dir):
    """One size through forward; returns the report line (raises on a failure)."""
    t0 = time.time()
    cap = run_forward(seed, init, inputs, ptx_dir and os.path.join(ptx_dir, f"{name}_{label}"))
    seconds = time.time() - t0
    new = {id(c[2]) for c in cap.compiled}
    for _, _, executor, _ in cap.compiled:
        compiled_at.setdefault(id(executor), (label, executor))
    reused = [compiled_at[id(e)][0] for e in cap.ran if id(e) not in new and id(e) in compiled_at]
    direct = sum(id(e) not in compiled_at for e in cap.ran)  # direct @cute.jit calls: traced and compiled in the call
    parts = [f"{len(cap.compiled)} compile(s)" + (f" [{', '.join(c[0] for c in cap.compiled)}]" if cap.compiled else ""),
             f"{len(cap.ran) - direct} executor call(s)"]
    if direct:
        parts.append(f"{direct} direct @cute.jit call(s) (re-traced on every call)")
    if reused:
        parts.append(f"reused executor(s) of: {', '.join(reused)}")
        fresh = run_forward(load(seed_path, f"cute_seed_{name}_fresh"), init, inputs)
        mine, theirs = [fingerprint(e) for e in cap.ran], [fingerprint(e) for e in fresh.ran]
        if mine != theirs:
            raise KeyCheckError(
                f"cache key: this size ran executor(s) compiled for {', '.join(reused)}, but compiling it afresh "
                f"gives different code ({len(theirs)} kernel(s), {sum(a != b for a, b in zip(mine, theirs, strict=False))} differ): "
                "the key misses something the compile specialised on")
        parts.append("key check OK (same code as a fresh compile)")
    if ptx_dir:
        parts.append("; ".join(f"{c[0]}: {c[3]}" for c in cap.compiled) or "no new PTX")
    return f"{' | '.join(parts)} in {seconds:.1f}s"


def check_size_by_launch_plan(name, seed, label, init, inputs, ptx_dir):
    model = seed.ModelNew(*init)
    _, launches = model.launch_plan(*inputs)
    t0 = time.time()
    summaries = []
    for i, (fn, args) in enumerate(launches):
        if ptx_dir:
            d = os.path.join(ptx_dir, f"{name}_{label}_{i}")
            os.makedirs(d, exist_ok=True)
            cute.compile(fn, *args, options=f"--keep-ptx --dump-dir {d}")
            summaries.append(f"{fn.__name__}: {ptx_summary(d)}")
        else:
            cute.compile(fn, *args)
    extra = f"  [{'; '.join(summaries)}]" if ptx_dir else ""
    return f"{len(launches)} launch(es) compiled from launch_plan in {time.time() - t0:.1f}s{extra}"


def check_seed(seed_path, ptx_dir, ones, shifted, use_launch_plan):
    name = os.path.splitext(os.path.basename(seed_path))[0]
    problem_path = os.path.join(PROBLEMS, name + ".py")
    if not os.path.exists(problem_path):
        print(f"FAIL {name}: no problem file {problem_path}")
        return False
    try:
        seed = load(seed_path, f"cute_seed_{name}")
        problem = load(problem_path, f"problem_{name}")
    except Exception as exc:
        print(f"FAIL {name}: cannot load: {type(exc).__name__}: {exc}")
        return False
    legacy = use_launch_plan and hasattr(seed.ModelNew, "launch_plan")
    defaults = {k: getattr(problem, k) for k in dir(problem) if k.isupper() and isinstance(getattr(problem, k), int)}
    compiled_at = {}  # id(executor) -> (size label, executor) that compiled it
    ok = True
    variants = [(label, sizes, False) for label, sizes in size_sets(problem, ones)]
    if shifted and not legacy:
        variants += [(f"{label}+misaligned", sizes, True) for label, sizes, _ in variants]
    for label, sizes, off in variants:
        for k, v in defaults.items():
            setattr(problem, k, sizes.get(k, v))
        desc = ",".join(f"{k}={sizes.get(k, v)}" for k, v in defaults.items() if not k.startswith("KGEN"))
        try:
            inputs = problem.get_inputs()
            if off:
                inputs = misaligned(inputs)
            init = problem.get_init_inputs()
            if legacy:
                line = check_size_by_launch_plan(name, seed, label, init, inputs, ptx_dir)
            else:
                line = check_size_by_forward(seed_path, name, seed, label, init, inputs, compiled_at, ptx_dir)
            print(f"OK   {name} {label} ({desc}): {line}", flush=True)
        except Exception as exc:  # report and go on with the next size
            ok = False
            lines = traceback.format_exception_only(type(exc), exc)
            print(f"FAIL {name} {label} ({desc}): {''.join(lines).strip()[:2000]}", flush=True)
            if not isinstance(exc, KeyCheckError):
                traceback.print_exc(limit=-4, file=sys.stdout)
    for k, v in defaults.items():
        setattr(problem, k, v)
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("seeds", nargs="+")
    ap.add_argument("--ptx", default=None, help="keep PTX in this folder and summarise global loads/stores")
    ap.add_argument("--ones", action="store_true", help="also compile with each size constant set to 1")
    ap.add_argument("--misaligned", action="store_true",
                    help="also run every size with its floating-point inputs one element off 16-byte alignment")
    ap.add_argument("--launch-plan", action="store_true",
                    help="compile a seed's ModelNew.launch_plan(*inputs) launches, where it has one, instead of calling forward")
    a = ap.parse_args()
    if a.ptx:
        os.makedirs(a.ptx, exist_ok=True)
    results = [check_seed(p, a.ptx, a.ones, a.misaligned, a.launch_plan) for p in a.seeds]
    print(f"{results.count(True)}/{len(results)} seeds compiled at every size")
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
