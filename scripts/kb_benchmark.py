"""Knowledge-base benchmark: insert throughput and retrieval latency on a large synthetic store.

Usage: python scripts/kb_benchmark.py [--entries 100000] [--queries 500] [--batch 1000]
       [--seed 0] [--kb DIR|URL] [--json FILE] [--keep]

Without --kb the store is a fresh embedded Chroma store in a temporary directory
(deleted afterwards unless --keep). With --kb the entries go into that store or
`chroma run` server; its existing records stay, so the figures are for a store
of "kernels after" records (the report says how many there were before).

The store is seeded first (the shipped kernels and guidance notes, as
`kgen kb init` does), then filled with synthetic but realistic entries: every
catalog problem, both backends (CuTe only on NVIDIA targets), every target,
the problem's own dtype and others, sources the size of the seed kernels
(2-15 KB) derived from them with renamed functions, perturbed constants and tuning notes, so every
code hash differs. Timings are missing for about a third (verified on a CPU).

The figures printed (and written by --json) are what the agent pays per prompt
(`retrieval.retrieve`, examples and guidance), the raw vector query
(`KnowledgeBase.query_kernels(text, n=10)`), insert throughput of
`put_kernels`, the store's size on disk and the process's peak RSS. Retrieval
quality is checked too: when a request names its problem, the top example
should be a kernel of that problem.
"""

from __future__ import annotations

import argparse
import ast
import datetime
import platform
import random
import re
import resource
import shutil
import statistics
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from pydantic import BaseModel, Field

from kgen.knowledge_base import SEED_KERNELS_DIR

#: problems without a shipped seed borrow the seed whose structure is closest
TEMPLATE_FOR = {
    "causal_attention_forward": "softmax",
    "conv1d": "gelu",
    "cross_entropy_backward": "cross_entropy_forward",
    "cumsum": "softmax",
    "cumsum_exclusive": "cumsum_dim",
    "cumsum_reverse": "cumsum_dim",
    "fused_add_rmsnorm_backward": "rmsnorm_backward",
    "fused_add_rmsnorm_forward": "rmsnorm_forward",
    "fused_embedding_rmsnorm_backward": "rmsnorm_backward",
    "fused_linear_cross_entropy": "cross_entropy_forward",
    "layernorm_backward": "rmsnorm_backward",
    "max_dim": "sum_dim",
    "mean_dim": "sum_dim",
    "min_dim": "sum_dim",
    "rope_forward": "swiglu",
    "row_sum": "rmsnorm_forward",
    "softcap": "gelu",
}
DTYPES = ("bfloat16", "float16", "float32")
DTYPE_WORDS = {"bfloat16": ("bf16", "bfloat16"), "float16": ("fp16", "half"),
               "float32": ("fp32", "float32")}
MODELS = ("openai:gpt-5", "anthropic:claude-sonnet-4-5", "openai:o4-mini", "offline-mutation")
NAME_SUFFIXES = ("row", "rows", "tile", "block", "fused", "persistent", "split", "looped",
                 "vec", "stream", "onepass", "twopass")
VARIANT_PHRASES = (
    "one program per row, the row held in registers",
    "a persistent grid sized to the SM count, rows strided across programs",
    "rows split across programs with fp32 partials reduced by a second kernel",
    "vectorised 16-byte loads and one store per element",
    "a looped reduction over column blocks for rows that do not fit in registers",
    "the statistics accumulated in fp32 and the output rounded once",
    "tiles sized for the shared memory of the target, two pipeline stages",
    "int64 offsets so row * cols can pass 2^31",
    "masked edges so any size works, no padding copy",
    "grouped tile order so neighbouring programs reuse L2",
)
NOTE_PHRASES = (
    "moved the fp32 cast before the reduction",
    "dropped a redundant mask on the interior blocks",
    "switched to int64 row offsets after the overflow probe failed",
    "halved num_warps; the row fits in fewer registers",
    "raised the block to the next power of two of the width",
    "fused the scale into the store",
    "tried two pipeline stages, no gain on this target",
    "kept the accumulator in fp32 across the whole loop",
    "read the weight once per program instead of once per row",
    "replaced the division by a multiply with the reciprocal",
    "made the grid persistent; fewer launches at small sizes",
    "unrolled the inner loop by two",
)
PHRASINGS = (
    "{words}",
    "{words} {backend} {target}",
    "{words} {dtype} {target}",
    "{words} kernel for {target}",
    "fast {words} in {backend} on {target}",
    "{words} {dtype}",
    "write a {backend} {words} for {target} ({dtype})",
    "{words} {target}",
)
#: queries run before timing starts (imports, caches, the first HNSW page-in)
WARMUP_QUERIES = 5


class Latency(BaseModel):
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float
    mean_ms: float


class BenchmarkReport(BaseModel):
    location: str
    mode: str
    chromadb_version: str
    machine: str
    date: str
    entries_requested: int
    kernels_before: int
    kernels_after: int
    guidance_notes: int
    batch_size: int
    seed: int
    source_kb_min: float
    source_kb_median: float
    source_kb_max: float
    generate_s: float
    insert_s: float
    insert_entries_per_s: float
    batch_ms: Latency
    queries: int
    retrieve: Latency
    query_kernels: Latency
    query_embedding: Latency
    problem_queries: int
    #: of those, requests whose problem has at least one kernel of the asked-for backend
    answerable_queries: int
    problem_hit_rate: float
    text_only_queries: int
    text_only_hit_rate: float
    raw_top1_hit_rate: float
    misses: list[str] = Field(default_factory=list)
    store_mb: float | None
    peak_rss_mb: float


# -- synthetic entries -------------------------------------------------------------------


def _short(problem: str) -> str:
    return problem.replace("forward", "fwd").replace("backward", "bwd")


def _seed_sources() -> dict[str, str]:
    return {p.stem: p.read_text() for p in sorted((SEED_KERNELS_DIR / "triton").glob("*.py"))}


def _perturb_constants(source: str, rng: random.Random) -> str:
    powers = ("16", "32", "64", "128", "256", "512", "1024", "2048", "4096")

    def swap(match: re.Match[str]) -> str:
        return rng.choice(powers) if rng.random() < 0.3 else match.group(0)

    return re.sub(r"\b(?:16|32|64|128|256|512|1024|2048|4096)\b", swap, source)


def _rename_functions(source: str, problem: str, rng: random.Random) -> str:
    """Module-level private functions get names of the synthetic problem (what the outline shows)."""
    names = [
        node.name for node in ast.parse(source).body
        if isinstance(node, ast.FunctionDef) and node.name.startswith("_")
    ]
    used: set[str] = set()
    for name in names:
        new = f"_{_short(problem)}_{rng.choice(NAME_SUFFIXES)}"
        while new in used:
            new += f"_{len(used)}"
        used.add(new)
        source = re.sub(rf"\b{re.escape(name)}\b", new, source)
    return source


def _replace_first_paragraph(source: str, paragraph: str) -> str:
    """Swap the module docstring's first paragraph (the outline's summary) for a new one."""
    body = source[3:]
    cut = min(i for i in (body.find("\n\n"), body.find('"""')) if i >= 0)
    return '"""' + paragraph + body[cut:]


def _tuning_block(rng: random.Random, target: str, size_goal: int, current: int) -> str:
    """An autotune table (code: changes the hash) and a change log (comments: fills the size)."""
    rows = []
    for _ in range(rng.randint(3, 9)):
        block, warps, stages = rng.choice((64, 128, 256, 512, 1024, 2048, 4096)), \
            rng.choice((1, 2, 4, 8, 16)), rng.randint(1, 4)
        rows.append(f"    ({block}, {warps}, {stages}),  # {rng.uniform(0.05, 3.0):.4f} ms on {target}")
    lines = ["", "", "# Configurations the search measured, best first: (block, num_warps, num_stages).",
             "_TUNED_CONFIGS = [", *rows, "]", ""]
    generation = 0
    while current + sum(len(line) + 1 for line in lines) < size_goal:
        generation += 1
        note = (f"generation {generation}: {rng.choice(NOTE_PHRASES)}; "
                f"{rng.uniform(-4.0, 12.0):+.1f}% on {target}")
        lines.append("# " + note)
    return "\n".join(lines) + "\n"


CUTE_TEMPLATE = '''"""{summary}

The kernel is written in the CuTe DSL: a thread-block tile of the input is
partitioned across threads with a TV layout, copied to registers with
vectorised 128-bit copies, computed in fp32, and stored back through the same
partition. Edge tiles are predicated with an identity tensor so any size works.
"""

import torch
import torch.nn as nn

import cutlass
import cutlass.cute as cute
from cutlass.cute.runtime import from_dlpack

THREADS = {threads}
VECTOR = {vector}


@cute.kernel
def {kernel}(g_in: cute.Tensor, g_out: cute.Tensor, tv_layout: cute.Layout):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    block_in = g_in[None, bidx]
    block_out = g_out[None, bidx]
    thr_in = cute.composition(block_in, tv_layout)[tidx, None]
    thr_out = cute.composition(block_out, tv_layout)[tidx, None]
    frag = cute.make_fragment_like(thr_in)
    cute.autovec_copy(thr_in, frag)
    values = frag.load().to(cutlass.Float32)
    frag.store(values.to(g_out.element_type))
    cute.autovec_copy(frag, thr_out)


@cute.jit
def {launcher}(m_in: cute.Tensor, m_out: cute.Tensor):
    tv_layout = cute.make_layout((THREADS, VECTOR), stride=(VECTOR, 1))
    tiled_in = cute.zipped_divide(m_in, (THREADS * VECTOR,))
    tiled_out = cute.zipped_divide(m_out, (THREADS * VECTOR,))
    {kernel}(tiled_in, tiled_out, tv_layout).launch(
        grid=[cute.size(tiled_in, mode=[1]), 1, 1], block=[THREADS, 1, 1]
    )


class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()
        self._compiled = None

    def forward(self, x, *rest):
        out = torch.empty_like(x)
        m_in = from_dlpack(x.reshape(-1), assumed_align=16)
        m_out = from_dlpack(out.reshape(-1), assumed_align=16)
        if self._compiled is None:
            self._compiled = cute.compile({launcher}, m_in, m_out)
        self._compiled(m_in, m_out)
        return out
'''


class EntryFactory:
    """Deterministic synthetic entries; every one has a code hash no other entry has."""

    def __init__(self, seed: int) -> None:
        from kgen.backends.targets import all_targets
        from kgen.evals.problem.catalog import catalog
        from kgen.evals.problem.format import input_dtype
        from kgen.knowledge_base.schema import target_family

        self.rng = random.Random(seed)
        self.problems = list(catalog())
        self.natural_dtype = {p.name: input_dtype(p) for p in self.problems}
        self.targets = list(all_targets())
        # target_family resolves the target each call: once per target, not once per entry
        self.family = {t.name: target_family(t.name) for t in self.targets}
        self.templates = _seed_sources()
        self.hashes: set[str] = set()
        self.slots_seen: set[tuple[str, str, str, str]] = set()
        self.recent_ids: dict[str, list[str]] = {}
        self.source_sizes: list[int] = []
        self.base_time = datetime.datetime(2026, 9, 1, tzinfo=datetime.timezone.utc)

    def _source(self, info, backend: str, target, dtype: str) -> str:
        rng = self.rng
        summary = (f"{info.description} in {'Triton' if backend == 'triton' else 'CuTe DSL'} "
                   f"for {target.display_name} ({dtype}): {rng.choice(VARIANT_PHRASES)}.")
        paragraph = "\n".join(textwrap.wrap(summary, 88))
        if backend == "cute":
            short = _short(info.name)
            source = CUTE_TEMPLATE.format(
                summary=paragraph, threads=rng.choice((64, 128, 256, 512)),
                vector=rng.choice((2, 4, 8, 16)),
                kernel=f"_{short}_{rng.choice(NAME_SUFFIXES)}_kernel", launcher=f"_launch_{short}",
            )
        else:
            template = self.templates[TEMPLATE_FOR.get(info.name, info.name)]
            source = _replace_first_paragraph(template, paragraph)
            source = _rename_functions(_perturb_constants(source, rng), info.name, rng)
        goal = rng.randint(2048, 6144)
        return source + _tuning_block(rng, target.name, goal, len(source))

    def make(self, index: int):
        from kgen.knowledge_base.code_hash import normalised_code_hash
        from kgen.knowledge_base.schema import (
            KernelEntry,
            Provenance,
            Timing,
            VerificationSummary,
            kernel_id,
        )

        rng = self.rng
        info = rng.choice(self.problems)
        target = rng.choice(self.targets)
        backend = "cute" if target.vendor == "nvidia" and rng.random() < 0.3 else "triton"
        natural = self.natural_dtype[info.name]
        dtype = natural if rng.random() < 0.7 else rng.choice([d for d in DTYPES if d != natural])
        while True:
            source = self._source(info, backend, target, dtype)
            code_hash = normalised_code_hash(source)
            if code_hash not in self.hashes:
                break
        self.hashes.add(code_hash)
        self.source_sizes.append(len(source.encode()))
        slot = (info.name, backend, target.name, dtype)
        role = "stepping_stone" if slot in self.slots_seen else "best"
        self.slots_seen.add(slot)
        on_gpu = rng.random() < 0.65
        timing = Timing()
        if on_gpu:
            time_ms = rng.lognormvariate(-1.2, 0.9)
            eager_ms = time_ms * rng.uniform(2.0, 16.0)
            compile_ms = time_ms * rng.uniform(0.7, 1.6)
            timing = Timing(
                device_name=target.display_name, time_ms=time_ms, eager_ms=eager_ms,
                compile_ms=compile_ms, speedup_vs_eager=eager_ms / time_ms,
                speedup_vs_compile=compile_ms / time_ms, pct_of_sol=rng.uniform(30.0, 98.0),
                achieved_tbs=rng.uniform(0.3, target.memory_bandwidth_tbs * 0.95),
                achieved_tflops=rng.uniform(0.1, 20.0) if rng.random() < 0.8 else None,
            )
        shapes = [dict(info.sizes), dict(info.small_sizes), *map(dict, info.extra_sizes)]
        evidence = VerificationSummary(
            device="cuda" if on_gpu else "cpu",
            seeds=[rng.randrange(2**31) for _ in range(3)],
            shapes=shapes,
            distributions=sorted(rng.sample(
                ["normal", "uniform", "small", "large", "accumulation_probe", "repeated_id",
                 *info.input_distributions], 4)),
            checks_passed=["static", "load", "correctness", "compile"],
            trials=rng.randint(9, 12),
            max_rel_l2_error=10 ** rng.uniform(-8, -3),
            train_check="passed" if rng.random() < 0.2 else "not_run",
            compiled_for=[target.name],
            kgen_version="0.1.0",
        )
        parents = self.recent_ids.setdefault(info.name, [])
        created = self.base_time + datetime.timedelta(seconds=index * 37)
        entry = KernelEntry(
            id=kernel_id(code_hash, info.name, backend, target.name, dtype),
            source=source,
            spec_text="; ".join([info.name.replace("_", " "), info.description, *info.aliases]),
            problem=info.name,
            operation=info.name.replace("_", " "),
            backend=backend,
            target=target.name,
            target_family=self.family[target.name],
            dtype=dtype,
            shapes=dict(info.sizes),
            evidence=evidence,
            timing=timing,
            provenance=Provenance(
                model=rng.choice(MODELS),
                run_id=f"run-{created:%Y%m%d}-{rng.getrandbits(32):08x}",
                parent_ids=rng.sample(parents, min(len(parents), rng.randint(0, 2))),
                generation=rng.randint(0, 30) if rng.random() < 0.9 else None,
                created=created.isoformat(timespec="seconds"),
            ),
            code_hash=code_hash,
            role=role,
        )
        parents.append(entry.id)
        del parents[:-20]
        return entry

    def batches(self, count: int, size: int) -> Iterator[list]:
        for start in range(0, count, size):
            yield [self.make(i) for i in range(start, min(count, start + size))]


# -- requests ----------------------------------------------------------------------------


class Request(BaseModel):
    text: str
    backend: str
    target: str
    intended_problem: str
    #: what the caller passes as problem=; None for a free-text request
    problem: str | None


def make_requests(count: int, seed: int) -> list[Request]:
    """Requests as a person types them: an alias or the name, maybe a backend, dtype, target."""
    from kgen.backends.targets import all_targets
    from kgen.evals.problem.catalog import catalog
    from kgen.evals.problem.format import input_dtype

    rng = random.Random(seed * 7919 + 1)
    problems, targets = list(catalog()), list(all_targets())
    requests = []
    for _ in range(count):
        info, target = rng.choice(problems), rng.choice(targets)
        backend = "cute" if target.vendor == "nvidia" and rng.random() < 0.25 else "triton"
        words = rng.choice([info.name.replace("_", " "), _short(info.name).replace("_", " "),
                            *info.aliases])
        target_word = rng.choice([target.name, target.name.upper(), *target.aliases[:2]])
        dtype = rng.choice(DTYPE_WORDS[input_dtype(info)])
        text = rng.choice(PHRASINGS).format(words=words, backend=backend, target=target_word,
                                            dtype=dtype)
        requests.append(Request(
            text=text, backend=backend, target=target.name, intended_problem=info.name,
            problem=info.name if rng.random() < 0.8 else None,
        ))
    return requests


# -- measuring ---------------------------------------------------------------------------


def latency(samples_s: Sequence[float]) -> Latency:
    ms = sorted(s * 1000.0 for s in samples_s)

    def pct(q: float) -> float:
        # nearest rank: the value below which q of the samples fall, never interpolated
        return ms[min(len(ms) - 1, max(0, round(q * len(ms) + 0.5) - 1))]

    return Latency(p50_ms=pct(0.50), p95_ms=pct(0.95), p99_ms=pct(0.99), max_ms=ms[-1],
                   mean_ms=statistics.fmean(ms))


def _disk_mb(location: str) -> float | None:
    path = Path(location)
    if not path.is_dir():
        return None
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


def _peak_rss_mb() -> float:
    # ru_maxrss is in KiB on Linux
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run_benchmark(entries: int, queries: int, batch: int, seed: int, location: str) -> BenchmarkReport:
    import chromadb

    from kgen.knowledge_base.embedding import embedding_function_for
    from kgen.knowledge_base.retrieval import retrieve
    from kgen.knowledge_base.seeding import seed_knowledge_base
    from kgen.knowledge_base.store import KnowledgeBase, where_equal

    kb = KnowledgeBase.open(location)
    kernels_before = kb.kernel_count()
    seed_knowledge_base(kb)
    factory = EntryFactory(seed)
    batch_s: list[float] = []
    generate_s = insert_s = 0.0
    done, next_report = 0, 10_000
    started = time.perf_counter()
    for entries_batch in _timed_batches(factory, entries, batch):
        generated, chunk = entries_batch
        generate_s += generated
        t0 = time.perf_counter()
        kb.put_kernels(chunk)
        batch_s.append(time.perf_counter() - t0)
        insert_s += batch_s[-1]
        done += len(chunk)
        if done >= next_report or done == entries:
            _progress(f"inserted {done}/{entries} in {insert_s:.0f} s "
                      f"({done / insert_s:.0f} entries/s; {time.perf_counter() - started:.0f} s "
                      f"with generation)")
            next_report += 10_000

    requests = make_requests(queries + WARMUP_QUERIES, seed)
    for request in requests[:WARMUP_QUERIES]:
        retrieve(kb, request.text, backend=request.backend, target=request.target,
                 problem=request.problem, n_examples=3)
        kb.query_kernels(request.text, n=10)
    requests = requests[WARMUP_QUERIES:]
    # the store was opened with the default embedding; time it alone for the breakdown
    embed = embedding_function_for(None)
    retrieve_s, raw_s, embed_s = [], [], []
    hits = text_hits = raw_hits = 0
    misses: list[str] = []
    stocked: dict[tuple[str, str], bool] = {}
    for request in requests:
        t0 = time.perf_counter()
        found = retrieve(kb, request.text, backend=request.backend, target=request.target,
                         problem=request.problem, n_examples=3)
        t1 = time.perf_counter()
        raw = kb.query_kernels(request.text, n=10)
        t2 = time.perf_counter()
        embed([request.text])
        t3 = time.perf_counter()
        retrieve_s.append(t1 - t0)
        raw_s.append(t2 - t1)
        embed_s.append(t3 - t2)
        top = found.best.problem if found.best else None
        hit = top == request.intended_problem
        key = (request.intended_problem, request.backend)
        if key not in stocked:  # outside the timed calls
            stocked[key] = bool(kb.kernels(where=where_equal(problem=key[0], backend=key[1]), limit=1))
        if not stocked[key]:
            continue  # nothing of that problem for that backend: no ranking could hit
        if request.problem:
            hits += hit
        else:
            text_hits += hit
        raw_hits += bool(raw) and raw[0][0].problem == request.intended_problem
        if not hit and len(misses) < 20:
            misses.append(f"{request.text!r} (problem={request.problem}, target={request.target},"
                          f" {request.backend}) -> {top}")
    answerable = [r for r in requests if stocked[(r.intended_problem, r.backend)]]
    with_problem = sum(1 for r in answerable if r.problem)
    text_only = len(answerable) - with_problem
    sizes = sorted(factory.source_sizes) or [0]
    return BenchmarkReport(
        location=location,
        mode=kb.mode,
        chromadb_version=chromadb.__version__,
        machine=f"{platform.machine()}, {_cpu_count()} cores",
        date=datetime.datetime.now(datetime.timezone.utc).date().isoformat(),
        entries_requested=entries,
        kernels_before=kernels_before,
        kernels_after=kb.kernel_count(),
        guidance_notes=len(kb.guidance()),
        batch_size=batch,
        seed=seed,
        source_kb_min=sizes[0] / 1024,
        source_kb_median=statistics.median(sizes) / 1024,
        source_kb_max=sizes[-1] / 1024,
        generate_s=generate_s,
        insert_s=insert_s,
        insert_entries_per_s=entries / insert_s if insert_s else 0.0,
        batch_ms=latency(batch_s or [0.0]),
        queries=len(requests),
        retrieve=latency(retrieve_s),
        query_kernels=latency(raw_s),
        query_embedding=latency(embed_s),
        problem_queries=sum(1 for r in requests if r.problem),
        answerable_queries=with_problem,
        problem_hit_rate=hits / with_problem if with_problem else 1.0,
        text_only_queries=text_only,
        text_only_hit_rate=text_hits / text_only if text_only else 1.0,
        raw_top1_hit_rate=raw_hits / len(answerable) if answerable else 1.0,
        misses=misses,
        store_mb=_disk_mb(location),
        peak_rss_mb=_peak_rss_mb(),
    )


def _timed_batches(factory: EntryFactory, count: int, size: int) -> Iterator[tuple[float, list]]:
    """Generation is timed apart from insertion: only put_kernels counts as insert time."""
    iterator = factory.batches(count, size)
    while True:
        t0 = time.perf_counter()
        chunk = next(iterator, None)
        if chunk is None:
            return
        yield time.perf_counter() - t0, chunk


def _cpu_count() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 0


def markdown(report: BenchmarkReport) -> str:
    r = report

    def row(name: str, lat: Latency) -> str:
        return (f"| {name} | {lat.p50_ms:.1f} | {lat.p95_ms:.1f} | {lat.p99_ms:.1f} | "
                f"{lat.max_ms:.1f} | {lat.mean_ms:.1f} |")

    store = f"{r.store_mb:.0f} MB" if r.store_mb is not None else "n/a (server)"
    lines = [
        f"{r.kernels_after} kernels ({r.entries_requested} synthetic + seeds"
        + (f" + {r.kernels_before} already there" if r.kernels_before else "")
        + f"), {r.guidance_notes} guidance notes, {r.mode} store, chromadb {r.chromadb_version}, "
        f"{r.machine}, {r.date}",
        "",
        "| insert | figure |",
        "|---|---|",
        f"| throughput (`put_kernels`, batches of {r.batch_size}) | "
        f"{r.insert_entries_per_s:.0f} entries/s ({r.insert_s:.0f} s in all) |",
        f"| per batch p50 / p95 / max | {r.batch_ms.p50_ms:.0f} / {r.batch_ms.p95_ms:.0f} / "
        f"{r.batch_ms.max_ms:.0f} ms |",
        f"| generating the entries (not counted above) | {r.generate_s:.0f} s |",
        f"| source size min / median / max | {r.source_kb_min:.1f} / {r.source_kb_median:.1f} / "
        f"{r.source_kb_max:.1f} KB |",
        f"| store on disk | {store} |",
        f"| peak RSS of the process | {r.peak_rss_mb:.0f} MB |",
        "",
        f"| per request ({r.queries} requests, after {WARMUP_QUERIES} warm-up) "
        "| p50 ms | p95 ms | p99 ms | max ms | mean ms |",
        "|---|---|---|---|---|---|",
        row("`retrieve(..., n_examples=3)` (examples + guidance)", r.retrieve),
        row("`kb.query_kernels(text, n=10)`", r.query_kernels),
        row("embedding the request text alone", r.query_embedding),
        "",
        "| retrieval quality | figure |",
        "|---|---|",
        f"| top example has the problem asked for (problem given, {r.answerable_queries} "
        "requests) | "
        f"{r.problem_hit_rate:.3f} |",
        f"| same, free text only (problem=None, {r.text_only_queries} requests) "
        f"| {r.text_only_hit_rate:.3f} |",
        f"| `query_kernels` top-1 has the problem named in the text | {r.raw_top1_hit_rate:.3f} |",
    ]
    if r.answerable_queries < r.problem_queries:
        lines.append(f"\n{r.problem_queries - r.answerable_queries} requests left out of the hit "
                     "rates: the store has no kernel of their problem for their backend.")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> BenchmarkReport:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kb", default=None, help="store directory or Chroma server URL "
                        "(default: a fresh store in a temporary directory)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument("--keep", action="store_true", help="keep the temporary store")
    args = parser.parse_args(argv)
    if args.entries < 0 or args.queries < 1 or args.batch < 1:
        parser.error("--entries must be >= 0, --queries and --batch >= 1")
    scratch = None if args.kb else Path(tempfile.mkdtemp(prefix="kgen-kb-bench-"))
    location = args.kb or str(scratch / "kb")
    try:
        report = run_benchmark(args.entries, args.queries, args.batch, args.seed, location)
    finally:
        if scratch is not None and not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
        elif scratch is not None:
            _progress(f"store kept at {location}")
    print(markdown(report))
    if report.misses:
        print("\nfirst misses: " + "; ".join(report.misses[:5]))
    if args.json:
        args.json.write_text(report.model_dump_json(indent=2) + "\n")
    return report


if __name__ == "__main__":
    main()
