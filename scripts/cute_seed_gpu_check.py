"""Check CuTe DSL seed kernels on a GPU: correctness against an fp64 reference, then timing.

Usage:
    python3 scripts/cute_seed_gpu_check.py knowledge_base/seed_kernels/cute/*.py [--iters 50] [--no-timing]

For each seed (named after a problem in evals/problem/problems/) and each size set of that problem
(defaults, KGEN_SMALL_SIZES, each of KGEN_EXTRA_SIZES):
  * runs ModelNew on the problem's inputs (on the GPU; torch.empty is pre-poisoned with NaN),
    and compares every output with Model run in fp64 on the same inputs upcast, using kgen's
    tolerances (relative L2 error, and |out - ref| <= rtol |ref| + atol rms(ref) elementwise);
    also checks shapes, dtypes and that the inputs were not modified.
At the default sizes it then times, with CUDA events (warm-up, median of --iters calls, no
cache flush):
  * fwd:    ModelNew.forward as kgen calls it (host work included: allocations, from_dlpack,
            the compile-cache lookup; a seed that calls its @cute.jit functions directly
            re-traces their Python on every call, and this includes that tracing);
  * kernel: the kernels' own time, per call (median) and back to back (mean): the
            cute.compile executor calls one forward made, replayed with the same arguments
            (the seeds keep their executors in a compile cache); for a seed that calls its
            @cute.jit functions directly, the launches of ModelNew.launch_plan(*inputs) ->
            (outputs, [(jit_fn, args), ...]) compiled once, if it defines one;
and prints effective TB/s from the problem's kgen_bytes() when it defines one; for the GEMM it also
times the vendor library (cuBLAS through F.linear, with and without the GELU) in bf16.
One line per seed and size; failures print a short traceback and the run goes on.
"""

import argparse
import importlib.util
import inspect
import os
import statistics
import sys
import traceback

import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROBLEMS = os.path.join(REPO, "evals", "problem", "problems")

# kgen's tolerances (evals/problem/tolerances.py): rel_l2, rtol, atol (times rms(ref))
TOL = {
    torch.float32: (1e-4, 1e-3, 1e-4),
    torch.bfloat16: (1e-2, 3.2e-2, 1e-2),
    torch.float16: (2e-3, 4e-3, 2e-3),
}

#: vendor-library versions of a problem, timed beside the seed in its own dtype (the problems'
#: references may compute in fp32, which is not what a bf16 kernel competes with)
LIBRARY = {
    "gemm_bias_gelu": {
        "cuBLAS F.linear (bf16, no epilogue)": lambda x, w, b: torch.nn.functional.linear(x, w, b),
        "cuBLAS F.linear + F.gelu(tanh) (bf16)": lambda x, w, b: torch.nn.functional.gelu(
            torch.nn.functional.linear(x, w, b), approximate="tanh"),
    },
}


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def size_sets(problem):
    sets = [("default", {})]
    if getattr(problem, "KGEN_SMALL_SIZES", None):
        sets.append(("small", problem.KGEN_SMALL_SIZES))
    for i, extra in enumerate(getattr(problem, "KGEN_EXTRA_SIZES", []) or []):
        sets.append((f"extra{i}", extra))
    return sets


def as_list(x):
    return list(x) if isinstance(x, (tuple, list)) else [x]


def short_tb(exc):
    lines = traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-3)
    return "    " + "".join(lines).strip().replace("\n", "\n    ")[-1500:]


def poison_allocator():
    """Fill freed memory with NaN so that an unwritten torch.empty output shows up."""
    free, _ = torch.cuda.mem_get_info()
    n = max(1, min(free // 2, 4 << 30) // 4)
    t = torch.full((n,), float("nan"), device="cuda")
    del t


def compare(outs, exp, ref):
    """(ok, message) for the outputs against fp64 reference outputs `ref` and expected dtypes `exp`."""
    if len(outs) != len(ref):
        return False, f"{len(outs)} outputs, expected {len(ref)}"
    msgs, ok = [], True
    for i, (o, e, r) in enumerate(zip(outs, exp, ref, strict=True)):
        if o.shape != e.shape or o.dtype != e.dtype:
            return False, f"out{i}: {tuple(o.shape)} {o.dtype}, expected {tuple(e.shape)} {e.dtype}"
        rel_l2_tol, rtol, atol = TOL.get(o.dtype, (0.0, 0.0, 0.0))
        od, rd = o.double(), r.double()
        if not torch.isfinite(od).all() and torch.isfinite(rd).all():
            bad = (~torch.isfinite(od)).sum().item()
            return False, f"out{i}: {bad} NaN/Inf elements"
        err = (od - rd).abs()
        rms = rd.pow(2).mean().sqrt().item()
        rel_l2 = ((od - rd).norm() / rd.norm().clamp_min(1e-300)).item()
        ratio = (err / (rtol * rd.abs() + atol * rms + 1e-300)).max().item() if err.numel() else 0.0
        good = rel_l2 <= rel_l2_tol and ratio <= 1.0
        ok &= good
        msgs.append(f"out{i} {str(o.dtype)[6:]} rel_l2={rel_l2:.2e} max_abs={err.max().item() if err.numel() else 0:.2e} "
                    f"elem/tol={ratio:.2f}{'' if good else ' <-- over tolerance'}")
    return ok, "; ".join(msgs)


def time_calls(fn, iters, back_to_back=True):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    if not back_to_back:
        return statistics.median(times), None
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(iters):
        fn()
    b.record()
    b.synchronize()
    return statistics.median(times), a.elapsed_time(b) / iters


def precompiled_runner(launches):
    import cutlass
    import cutlass.cute as cute

    compiled = []
    for fn, args in launches:
        params = list(inspect.signature(fn).parameters.values())
        runtime = [a for a, p in zip(args, params, strict=False) if p.annotation is not cutlass.Constexpr]
        compiled.append((cute.compile(fn, *args), runtime))

    def run():
        for c, runtime in compiled:
            c(*runtime)

    return run


def replay_runner(model, inputs):
    """The cute.compile executor calls one forward makes, replayed without forward's host
    work (None when forward makes none, e.g. it calls its @cute.jit functions directly)."""
    from cutlass.base_dsl.jit_executor import JitCompiledFunction

    calls = []
    original = JitCompiledFunction.__call__

    def recording(self, *args, **kwargs):
        calls.append((self, args, kwargs))
        return original(self, *args, **kwargs)

    JitCompiledFunction.__call__ = recording
    try:
        outputs = model(*inputs)
    finally:
        JitCompiledFunction.__call__ = original
    if not calls:
        return None

    def run():
        for executor, args, kwargs in calls:
            executor(*args, **kwargs)

    run.outputs = outputs  # the buffers the replayed calls write stay alive with the runner
    return run


def check_seed(seed_path, iters, timing):
    name = os.path.splitext(os.path.basename(seed_path))[0]
    problem_path = os.path.join(PROBLEMS, name + ".py")
    try:
        seed = load(seed_path, f"cute_seed_{name}")
        problem = load(problem_path, f"problem_{name}")
    except Exception as exc:
        print(f"FAIL {name}: cannot load\n{short_tb(exc)}", flush=True)
        return False
    defaults = {k: getattr(problem, k) for k in dir(problem) if k.isupper() and isinstance(getattr(problem, k), int)}
    all_ok = True
    for label, sizes in size_sets(problem):
        for k, v in defaults.items():
            setattr(problem, k, sizes.get(k, v))
        desc = ",".join(f"{k}={sizes.get(k, v)}" for k, v in defaults.items())
        try:
            torch.manual_seed(0)
            inputs = [t.cuda() if isinstance(t, torch.Tensor) else t for t in problem.get_inputs()]
            init = problem.get_init_inputs()
            saved = [t.clone() if isinstance(t, torch.Tensor) else t for t in inputs]
            with torch.no_grad():
                exp = as_list(problem.Model(*init).cuda()(*inputs))
                up = [t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in inputs]
                ref = as_list(problem.Model(*init).cuda().double()(*up))
                del up
                model = seed.ModelNew(*init).cuda()
                poison_allocator()
                outs = as_list(model(*inputs))
                torch.cuda.synchronize()
            ok, msg = compare(outs, exp, ref)
            mutated = [i for i, (a, b) in enumerate(zip(inputs, saved, strict=True)) if isinstance(a, torch.Tensor) and not torch.equal(a, b)]
            if mutated:
                ok, msg = False, msg + f"; inputs {mutated} modified"
            all_ok &= ok
            print(f"{'PASS' if ok else 'FAIL'} {name} {label} ({desc}): {msg}", flush=True)
            del exp, ref, outs, saved
            if timing and label == "default":
                nbytes = problem.kgen_bytes() if hasattr(problem, "kgen_bytes") else None

                def rate(ms, nbytes=nbytes):
                    return f" {nbytes / (ms * 1e-3) / 1e12:.2f} TB/s" if nbytes else ""

                with torch.no_grad():
                    fwd_med, _ = time_calls(lambda m=model, xs=inputs: m(*xs), iters, back_to_back=False)
                    runner = replay_runner(model, inputs)
                    if runner is None and hasattr(model, "launch_plan"):
                        runner = precompiled_runner(model.launch_plan(*inputs)[1])
                    kernel = "kernel: no executor calls to replay and no launch_plan to precompile"
                    if runner is not None:
                        k_med, k_mean = time_calls(runner, iters)
                        kernel = f"kernel median {k_med:.3f} ms{rate(k_med)} | kernel back-to-back {k_mean:.3f} ms{rate(k_mean)}"
                        del runner
                print(f"TIME {name} {label} ({desc}): fwd median {fwd_med:.3f} ms{rate(fwd_med)} | {kernel}", flush=True)
                for lib_name, lib_fn in LIBRARY.get(name, {}).items():
                    with torch.no_grad():
                        lib_med, _ = time_calls(lambda f=lib_fn, xs=inputs: f(*xs), iters, back_to_back=False)
                    print(f"LIB  {name} {label}: {lib_name} median {lib_med:.3f} ms{rate(lib_med)} "
                          f"(seed fwd / library = {fwd_med / lib_med:.3f})", flush=True)
            del inputs
        except Exception as exc:
            all_ok = False
            print(f"FAIL {name} {label} ({desc}): {type(exc).__name__}\n{short_tb(exc)}", flush=True)
        torch.cuda.empty_cache()
    for k, v in defaults.items():
        setattr(problem, k, v)
    return all_ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("seeds", nargs="+")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--no-timing", action="store_true")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device")
        sys.exit(2)
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}", flush=True)
    results = [check_seed(p, a.iters, not a.no_timing) for p in a.seeds]
    print(f"{sum(results)}/{len(results)} seeds passed at every size")
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
