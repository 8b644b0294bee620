"""From a request sentence to a :class:`KernelSpec`: problem, backend, targets, dtypes, shapes.

Two readers produce the same result. :func:`parse_request` is a deterministic
matcher over the problem catalog's names and aliases, so kgen understands
"Triton RMSNorm backward for H100" with no model and no network.
:func:`parse_request_with_model` asks a model (through a callable the caller
injects) and then checks its answer against the catalog and the target
registry, because a model can name a problem that does not exist or a GPU
kgen has never heard of; nothing it says is used unchecked.

The matcher's hardest job is direction: "rmsnorm grad" and "rmsnorm" share
every content word, so the words that say backward or forward decide, and a
request for the backward of an operation the catalog only has forward is an
error rather than a silently wrong kernel.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

from kgen.backends.registry import (
    DEFAULT_BACKEND,
    UnknownBackendError,
    all_backend_info,
    backend_for_word,
    backend_info,
    known_backends,
)
from kgen.backends.targets import DEFAULT_TARGET, UnknownTargetError, all_targets, resolve_target
from kgen.errors import KgenUsageError
from kgen.evals.problem.catalog import catalog, nearest_names, normalise_name
from kgen.evals.problem.format import ProblemError, ProblemInfo, read_problem

#: The target used when neither the request nor the caller names one (kept for importers).
FALLBACK_TARGET = DEFAULT_TARGET

Direction = Literal["forward", "backward"]
JsonCompleter = Callable[[str, str, type[BaseModel]], Any]


class SpecError(KgenUsageError):
    """A request kgen cannot turn into a spec; the message is one line a user can act on."""


class KernelSpec(BaseModel):
    """What to generate: one problem, one backend, one or more hardware targets."""

    request: str
    #: catalog name, or the path of a problem file; "" when a reference problem must be written
    problem: str
    #: short human description of the operation
    operation: str
    #: a name from ``kgen.backends.registry`` (checked there, so a new backend needs no edit here)
    backend: str = DEFAULT_BACKEND
    #: canonical target names (``resolve_target(...).name``)
    targets: list[str] = Field(min_length=1)
    #: torch dtype names such as "bfloat16"; empty means the problem's own dtypes
    dtypes: list[str] = Field(default_factory=list)
    #: size-constant overrides, e.g. {"HIDDEN": 8192}
    shapes: dict[str, int] = Field(default_factory=dict)
    source: Literal["matcher", "model", "problem_file"]
    #: what was assumed or ignored, for the user to check
    notes: list[str] = Field(default_factory=list)

    @field_validator("backend")
    @classmethod
    def _known_backend(cls, value: str) -> str:
        try:
            return backend_info(value).name
        except UnknownBackendError as exc:
            raise ValueError(str(exc)) from exc

    @property
    def needs_reference_problem(self) -> bool:
        """True when the operation is not in the catalog and a problem file must be written."""
        return not self.problem


class SpecDraft(BaseModel):
    """A model's reading of a request, validated before it becomes a :class:`KernelSpec`."""

    problem: str | None = Field(
        default=None,
        description="exact catalog problem name, or null when no catalog problem is this operation",
    )
    operation: str = Field(description="one-line description of the requested operation")
    backend: str = Field(default=DEFAULT_BACKEND, description="a kernel backend name, e.g. 'triton'")
    targets: list[str] = Field(default_factory=list, description="hardware targets named, e.g. ['h100']")
    dtypes: list[str] = Field(default_factory=list, description="e.g. ['bfloat16']; empty if none named")
    shapes: dict[str, int] = Field(
        default_factory=dict, description="size constants named, e.g. {'HIDDEN': 4096}"
    )


# --------------------------------------------------------------------------------------
# Vocabulary
# --------------------------------------------------------------------------------------

#: Kernel languages kgen does not write: naming one is an error, not a silent switch to Triton.
_OTHER_BACKENDS = frozenset(
    {"cuda", "hip", "opencl", "metal", "pallas", "tilelang", "thunderkittens", "mojo", "numba",
     "cupy", "helion", "tvm", "taichi", "sycl"}
)
_DTYPE_WORDS = {
    "bf16": "bfloat16", "bfloat16": "bfloat16",
    "fp16": "float16", "f16": "float16", "float16": "float16", "half": "float16",
    "fp32": "float32", "f32": "float32", "float32": "float32",
    "fp64": "float64", "float64": "float64",
}
_UNSUPPORTED_DTYPES = frozenset({"fp8", "float8", "e4m3", "e4m3fn", "e5m2", "fp4", "nvfp4", "mxfp8", "mxfp4", "int8"})
_BACKWARD_WORDS = frozenset(
    {"backward", "backwards", "bwd", "grad", "grads", "gradient", "gradients", "backprop", "dgrad", "wgrad", "vjp"}
)
_FORWARD_WORDS = frozenset({"forward", "fwd", "inference"})
#: Words that carry no operation; removed from requests and aliases alike.
_STOPWORDS = frozenset(
    """a an the for on in of with and to using use via as at by from that this it its me my i we
    please pls write make generate create give build implement produce need want get
    kernel kernels op ops operator pass fast faster fastest optimized optimised optimize optimise
    efficient high performance performant gpu gpus nvidia amd pytorch torch version variant
    implementation precision dtype dtypes shape shapes sizes mode compute computation then over
    dsl""".split()
)
#: Content words too generic to report as "not used" when they go unmatched.
_FILLER = frozenset({"loss", "function", "activation", "operation", "fused", "layer", "module"})
#: Names of sizes a person types; one set per meaning (normalised: no case, spaces or underscores).
_SIZE_GROUPS: tuple[frozenset[str], ...] = tuple(
    frozenset(group.split())
    for group in (
        "hidden hiddensize hiddendim dim dmodel modeldim embeddim embeddingdim features",
        "rows tokens ntokens numtokens",
        "cols columns ncols",
        "vocab vocabsize vocabulary nvocab",
        "seq seqlen seqlength sequence sequencelength ctx context contextlength",
        "batch batchsize bs",
        "heads nheads numheads",
        "headdim dhead headsize",
        "intermediate intermediatesize ffn ffndim ffnsize dff mlpdim",
        "channels nchannels",
        "kernelsize ksize",
    )
)
_SIZE_WORDS = frozenset().union(*_SIZE_GROUPS)
#: Words that begin a GPU name; "rtx 4090" is an unknown target, not two stray words.
_GPU_FAMILIES = frozenset({"sm", "gfx", "rtx", "gtx", "tesla", "quadro", "radeon", "titan", "mi", "jetson"})
#: A GPU-model-looking word (h900, v100, mi250x, rtx4090): unknown ones are errors, not content.
_GPU_LIKE = re.compile(r"(?:h|a|b|l|v|p|k|g[bha]|ad|mi|sm|gfx|rtx|gtx)\d{2,4}[a-z]{0,3}")
_TOKEN = re.compile(r"[a-z0-9]+")
#: "both backends", "all the backends", "every kernel backend", "each backend"
_EVERY_BACKEND = re.compile(r"\b(?:both|all|every|each)\s+(?:(?:the|of|kernel|the kernel)\s+)*backends?\b")
_TARGET_GAP = re.compile(r"[\s\-_.:]+")
_DIMS = re.compile(r"(?<![a-z0-9.])\d+(?:\s*[x×*]\s*\d+)+(?![a-z0-9.])")


# --------------------------------------------------------------------------------------
# Scanning a request
# --------------------------------------------------------------------------------------


@dataclass
class _ShapeHint:
    text: str
    #: normalised size name, or None for an unnamed "4096x8192"
    name: str | None
    values: list[int]


@dataclass
class _Scan:
    """A request read left to right; each recognised span is blanked so it is read once."""

    text: str
    rest: str = ""
    targets: list[str] = field(default_factory=list)
    dtypes: list[str] = field(default_factory=list)
    backends: list[str] = field(default_factory=list)
    shapes: list[_ShapeHint] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rest = self.text.lower()
        # the typed spelling, for messages; lower() can change a string's length, rarely
        self.original = self.text if len(self.rest) == len(self.text) else self.rest

    def typed(self, start: int, end: int) -> str:
        return " ".join(self.original[start:end].split())

    def blank(self, start: int, end: int) -> None:
        self.rest = self.rest[:start] + " " * (end - start) + self.rest[end:]

    def tokens(self) -> list[re.Match[str]]:
        return list(_TOKEN.finditer(self.rest))


def _add(items: list[str], value: str) -> None:
    if value not in items:
        items.append(value)


def _known_targets() -> str:
    return ", ".join(t.name for t in all_targets())


def _unknown_target(word: str) -> SpecError:
    key = normalise_name(word)
    names = [t.name for t in all_targets()]
    near = difflib.get_close_matches(key, names, n=2, cutoff=0.6)
    hint = f" (nearest: {', '.join(near)})" if near else ""
    return SpecError(f"unknown hardware target '{word}'; known: {_known_targets()}{hint}")


def _resolve_word(phrase: str) -> str | None:
    """The canonical target a phrase names ("H100s" too), or None."""
    for candidate in (phrase, phrase[:-1] if phrase.endswith("s") else None):
        if candidate:
            try:
                return resolve_target(candidate).name
            except UnknownTargetError:
                continue
    return None


def _scan_targets(scan: _Scan) -> None:
    """Longest n-gram first, so "h100 pcie" is one target and not h100 plus a stray word."""
    tokens = scan.tokens()
    i = 0
    while i < len(tokens):
        taken = 0
        for n in (4, 3, 2, 1):
            group = tokens[i : i + n]
            if len(group) < n or (n == 1 and group[0].group().isdigit()):
                continue
            gaps = [scan.rest[a.end() : b.start()] for a, b in zip(group, group[1:], strict=False)]
            if not all(_TARGET_GAP.fullmatch(gap) for gap in gaps):
                continue
            phrase = scan.rest[group[0].start() : group[-1].end()]
            name = _resolve_word(phrase)
            if name is not None:
                _add(scan.targets, name)
                scan.blank(group[0].start(), group[-1].end())
                taken = n
                break
        if taken:
            i += taken
            continue
        word = tokens[i].group()
        nxt = tokens[i + 1].group() if i + 1 < len(tokens) else ""
        if word in _GPU_FAMILIES and nxt[:1].isdigit():
            raise _unknown_target(scan.typed(tokens[i].start(), tokens[i + 1].end()))
        if _GPU_LIKE.fullmatch(word) and word not in _DTYPE_WORDS and word not in _UNSUPPORTED_DTYPES:
            raise _unknown_target(scan.typed(tokens[i].start(), tokens[i].end()))
        i += 1


def _scan_words(scan: _Scan) -> None:
    """Dtypes and backends: single words, plus the registry's two-word names ("cute dsl")."""
    tokens = scan.tokens()
    i = 0
    while i < len(tokens):
        token, end = tokens[i], tokens[i].end()
        word = token.group()
        pair = _backend_pair(scan, tokens, i)
        if pair is not None:
            _add(scan.backends, pair)
            end = tokens[i + 1].end()
            i += 1
        elif word in _DTYPE_WORDS:
            _add(scan.dtypes, _DTYPE_WORDS[word])
        elif word in _UNSUPPORTED_DTYPES:
            scan.notes.append(f"ignored '{word}': kgen's problems take bfloat16, float16 or float32 inputs")
        elif (backend := backend_for_word(word)) is not None:
            _add(scan.backends, backend)
        elif word in _OTHER_BACKENDS:
            raise SpecError(f"unknown backend '{word}'; known: {', '.join(known_backends())}")
        else:
            i += 1
            continue
        scan.blank(token.start(), end)
        i += 1
    if len(scan.backends) > 1:
        scan.notes.append(f"the request names {' and '.join(scan.backends)}: each backend has a run of its own "
                          "unless --backend picks one")


def _scan_every_backend(scan: _Scan) -> bool:
    """Blank "both backends" / "all backends" (the words are no part of the operation's name)
    and say whether the request had them."""
    found = _EVERY_BACKEND.search(scan.rest)
    if found is not None:
        scan.blank(found.start(), found.end())
    return found is not None


def requested_backends(text: str) -> list[str]:
    """The backends a request asks for when it asks for several: every registered backend for
    "both backends" / "all backends" / "each backend", else the ones it names (two or more
    names); an empty list for a request of one backend or none (an ordinary run)."""
    scan = _Scan(text or "")
    every = _scan_every_backend(scan)
    _scan_words(scan)
    if every:  # the default backend's run first, then the others
        return [DEFAULT_BACKEND, *(b for b in known_backends() if b != DEFAULT_BACKEND)]
    return scan.backends if len(scan.backends) > 1 else []


def _backend_pair(scan: _Scan, tokens: list[re.Match[str]], i: int) -> str | None:
    """The backend two adjacent words name together ("cute dsl", "cute-dsl"), or None."""
    if i + 1 >= len(tokens):
        return None
    gap = scan.rest[tokens[i].end() : tokens[i + 1].start()]
    if not _TARGET_GAP.fullmatch(gap):
        return None
    first, second = tokens[i].group(), tokens[i + 1].group()
    return backend_for_word(f"{first} {second}") or backend_for_word(f"{first}{gap.strip()}{second}")


def _scan_shapes(scan: _Scan) -> None:
    """'4096x8192', 'N=4096', 'hidden 4096', 'hidden size of 4096', '8192 tokens'."""
    for match in _DIMS.finditer(scan.rest):
        values = [int(v) for v in re.findall(r"\d+", match.group())]
        scan.shapes.append(_ShapeHint(scan.typed(match.start(), match.end()), None, values))
        scan.blank(match.start(), match.end())
    tokens = scan.tokens()
    used: set[int] = set()
    for k, token in enumerate(tokens):
        if not token.group().isdigit() or k in used:
            continue
        hint = _named_before(scan, tokens, k, used) or _named_after(scan, tokens, k, used)
        if hint is not None:
            scan.shapes.append(hint)
    for k in sorted(used, reverse=True):
        scan.blank(tokens[k].start(), tokens[k].end())


def _named_before(scan: _Scan, tokens: list[re.Match[str]], k: int, used: set[int]) -> _ShapeHint | None:
    j = k - 1
    explicit = False
    if j >= 0:
        gap = scan.rest[tokens[j].end() : tokens[k].start()]
        explicit = "=" in gap or ":" in gap
        if not explicit and tokens[j].group() in ("of", "is") and j > 0:
            j -= 1
    if j < 0 or j in used or tokens[j].group().isdigit():
        return None
    one = tokens[j].group()
    options: list[tuple[list[int], str]] = []
    if j > 0 and j - 1 not in used and not tokens[j - 1].group().isdigit():
        between = scan.rest[tokens[j - 1].end() : tokens[j].start()]
        two = tokens[j - 1].group() + one
        if two in _SIZE_WORDS or (explicit and between == "_"):
            options.append(([j - 1, j], two))
    options.append(([j], one))
    for indices, name in options:
        if name in _SIZE_WORDS or explicit:
            used.update([*indices, k, *range(indices[-1] + 1, k)])
            text = scan.typed(tokens[indices[0]].start(), tokens[k].end())
            return _ShapeHint(text, name, [int(tokens[k].group())])
    return None


def _named_after(scan: _Scan, tokens: list[re.Match[str]], k: int, used: set[int]) -> _ShapeHint | None:
    if k + 1 >= len(tokens) or k + 1 in used:
        return None
    name = tokens[k + 1].group()
    if name not in _SIZE_WORDS:
        return None
    used.update([k, k + 1])
    return _ShapeHint(scan.typed(tokens[k].start(), tokens[k + 1].end()), name, [int(tokens[k].group())])


def request_direction(text: str) -> Direction | None:
    """"backward" if the text says backward/bwd/grad, "forward" if forward/fwd, else None."""
    words = set(_TOKEN.findall(text.lower()))
    back, fwd = bool(words & _BACKWARD_WORDS), bool(words & _FORWARD_WORDS)
    if back and fwd:
        raise SpecError(
            "the request asks for both a forward and a backward; kgen writes one kernel per "
            "request, so ask for each separately"
        )
    return "backward" if back else "forward" if fwd else None


# --------------------------------------------------------------------------------------
# Matching the operation against the catalog
# --------------------------------------------------------------------------------------


@dataclass
class _Match:
    info: ProblemInfo
    score: float
    phrase: str
    covered: set[int]
    fuzzy: str = ""


def _content(words: Iterable[str]) -> list[str]:
    return [w for w in words if w not in _STOPWORDS and w not in _BACKWARD_WORDS and w not in _FORWARD_WORDS]


def _phrases(info: ProblemInfo) -> list[tuple[str, ...]]:
    phrases: list[tuple[str, ...]] = []
    for raw in (info.name, info.path.stem, *info.aliases):
        words = tuple(_content(_TOKEN.findall(raw.lower())))
        if words and words not in phrases:
            phrases.append(words)
    return phrases


def _spans(words: list[str], longest: int) -> dict[str, list[int]]:
    """Every run of up to ``longest`` adjacent words, joined: "rms norm" meets "rmsnorm"."""
    spans: dict[str, list[int]] = {}
    for i in range(len(words)):
        for j in range(i + 1, min(len(words), i + longest) + 1):
            spans.setdefault("".join(words[i:j]), list(range(i, j)))
    return spans


def _score(info: ProblemInfo, words: list[str]) -> _Match:
    """Characters of the best phrase the request contains: specific phrases beat short ones.

    A phrase found as adjacent words counts in full, one whose words all occur
    in another order counts 0.9, so "embedding rmsnorm" outranks "rmsnorm".
    """
    every, units = _spans(words, len(words)), _spans(words, 3)
    best = _Match(info, 0.0, "", set())
    for phrase in _phrases(info):
        joined = "".join(phrase)
        if joined in every:
            found = _Match(info, float(len(joined)), " ".join(phrase), set(every[joined]))
        elif all(w in units for w in phrase):
            covered = {i for w in phrase for i in units[w]}
            found = _Match(info, 0.9 * len(joined), " ".join(phrase), covered)
        else:
            continue
        if found.score > best.score:
            best = found
    return best


def _fuzzy_score(info: ProblemInfo, words: list[str]) -> _Match:
    """Typos ("rmsnrom"): a close spelling counts half, and the reading is noted."""
    best = _Match(info, 0.0, "", set())
    for phrase in _phrases(info):
        joined = "".join(phrase)
        if len(joined) < 4:
            continue
        for typed, indices in _spans(words, 3).items():
            if len(typed) >= 4 and difflib.SequenceMatcher(None, typed, joined).ratio() >= 0.85:
                score = 0.5 * len(joined)
                if score > best.score:
                    best = _Match(info, score, " ".join(phrase), set(indices), fuzzy=typed)
    return best


def _no_match(text: str, words: list[str], extra: str = "", near: list[str] | None = None) -> SpecError:
    near = near or nearest_names(" ".join(words) or text, limit=3)
    near_text = ", ".join(near) if near else "none (see `kgen problems list`)"
    return SpecError(
        f"no catalog problem matches '{text.strip()}'{extra}; nearest: {near_text}; "
        "give --problem FILE or configure a model to write a new reference problem"
    )


def _match_problem(text: str, words: list[str], direction: Direction | None) -> tuple[ProblemInfo, list[str]]:
    notes: list[str] = []
    matches = [m for m in (_score(info, words) for info in catalog()) if m.score > 0]
    if not matches:
        matches = [m for m in (_fuzzy_score(info, words) for info in catalog()) if m.score > 0]
    if not matches:
        raise _no_match(text, words)
    preferred: Direction = direction or "forward"
    matches.sort(key=lambda m: (m.score, m.info.kind == preferred), reverse=True)
    top = matches[0].score
    if direction is not None:
        same = [m for m in matches if m.info.kind == direction]
        if not same or same[0].score < top:
            other = [m.info.name for m in matches if m.score == top]
            only = "backward" if direction == "forward" else "forward"
            raise _no_match(
                text, words, f" as a {direction} ({', '.join(other)} is {only} only)", near=other
            )
        matches = same
    best = matches[0]
    rivals = [m.info.name for m in matches[1:] if m.score == best.score and m.info.kind == best.info.kind]
    if rivals:
        names = ", ".join([best.info.name, *rivals])
        raise SpecError(f"'{text.strip()}' matches several catalog problems equally ({names}); name one")
    if best.fuzzy:
        notes.append(f"read '{best.fuzzy}' as '{best.phrase}'")
    if direction is None and best.info.kind == "backward":
        notes.append(f"no direction named and the catalog has {best.info.name} only as a backward")
    unused = [w for i, w in enumerate(words) if i not in best.covered and w not in _FILLER and not w.isdigit()]
    if unused:
        notes.append(f"words not used to choose {best.info.name}: {', '.join(unused)}")
    return best.info, notes


# --------------------------------------------------------------------------------------
# Shapes onto a problem's size constants
# --------------------------------------------------------------------------------------


def _size_for(name: str, sizes: dict[str, int]) -> tuple[str | None, str]:
    """The size constant a typed name means, or (None, why not)."""
    key = normalise_name(name)
    exact = [c for c in sizes if normalise_name(c) == key]
    if len(exact) == 1:
        return exact[0], ""
    group = next((g for g in _SIZE_GROUPS if key in g), frozenset())
    found = [c for c in sizes if normalise_name(c) in group]
    if len(found) == 1:
        return found[0], ""
    if found:
        return None, f"it could be {' or '.join(found)}"
    return None, "no size constant has that name"


def _apply_shapes(hints: list[_ShapeHint], info: ProblemInfo) -> tuple[dict[str, int], list[str]]:
    shapes: dict[str, int] = {}
    notes: list[str] = []
    sizes = info.sizes
    have = f"{info.name} has {', '.join(sizes) or 'no size constants'}"
    for hint in hints:
        if hint.name is None:
            names = list(sizes)
            if len(hint.values) != len(names):
                notes.append(
                    f"ignored '{hint.text}': {len(hint.values)} numbers, but {info.name} has "
                    f"{len(names)} sizes ({', '.join(names)})"
                )
                continue
            if {normalise_name(n) for n in names} == {"m", "n", "k"}:
                notes.append(f"ignored '{hint.text}': M, N, K order is ambiguous; give M=.. N=.. K=..")
                continue
            shapes.update(zip(names, hint.values, strict=True))
            notes.append(f"read '{hint.text}' as {', '.join(f'{n}={v}' for n, v in zip(names, hint.values, strict=True))}")
            continue
        constant, why = _size_for(hint.name, sizes)
        if constant is None:
            notes.append(f"ignored '{hint.text}': {why} ({have})")
            continue
        shapes[constant] = hint.values[0]
    bad = [k for k, v in shapes.items() if v <= 0]
    if bad:
        raise SpecError(f"sizes must be positive: {', '.join(f'{k}={shapes[k]}' for k in bad)}")
    return shapes, notes


# --------------------------------------------------------------------------------------
# The readers
# --------------------------------------------------------------------------------------


def _default_target(default_target: str | None) -> tuple[list[str], str]:
    name = default_target or FALLBACK_TARGET
    try:
        canonical = resolve_target(name).name
    except UnknownTargetError as exc:
        raise _unknown_target(name) from exc
    return [canonical], f"no target named: using {canonical}"


def _read_problem_file(problem_file: str) -> ProblemInfo:
    path = Path(problem_file).expanduser()
    if not path.is_file():
        raise SpecError(f"problem file not found: {problem_file}")
    try:
        return read_problem(path)
    except ProblemError as exc:
        raise SpecError(str(exc)) from exc


def parse_request(
    text: str, *, default_target: str | None = None, problem_file: str | None = None
) -> KernelSpec:
    """The deterministic matcher: a request sentence to a spec, no model involved.

    ``default_target`` is used (and noted) when the request names no GPU; the
    caller passes the local GPU's target, else ``DEFAULT_TARGET`` (backends/targets.py). With
    ``problem_file`` the operation comes from that file and the sentence only
    contributes backend, targets, dtypes and shapes.
    """
    text = text or ""
    if not text.strip() and problem_file is None:
        raise SpecError('empty request: say which kernel to write, e.g. "Triton RMSNorm backward for H100"')
    scan = _Scan(text)
    _scan_targets(scan)
    if _scan_every_backend(scan):
        scan.notes.append("the request asks for every backend: each has a run of its own unless --backend picks one")
    _scan_words(scan)
    _scan_shapes(scan)
    words = _content(_TOKEN.findall(scan.rest))
    notes = list(scan.notes)
    if problem_file is not None:
        info = _read_problem_file(problem_file)
        problem, source = str(info.path), "problem_file"
    else:
        direction = request_direction(scan.rest)
        if not [w for w in words if not w.isdigit()]:
            raise SpecError(
                f"no catalog problem matches '{text.strip()}': it names no operation; say which "
                "kernel, e.g. 'RMSNorm backward' (see `kgen problems list`), give --problem FILE "
                "or configure a model to write a new reference problem"
            )
        info, match_notes = _match_problem(text, words, direction)
        notes += match_notes
        problem, source = info.name, "matcher"
    # a number in the problem file's name is its name (KernelBench's "19_ReLU"), not a size
    named = set(re.findall(r"\d+", Path(problem_file).stem)) if problem_file is not None else set()
    stray = [w for w in words if w.isdigit() and w not in named]
    if stray:
        notes.append(f"ignored the number(s) {', '.join(stray)}: name the size, e.g. HIDDEN=4096")
    shapes, shape_notes = _apply_shapes(scan.shapes, info)
    notes += shape_notes
    targets = scan.targets
    if not targets:
        targets, note = _default_target(default_target)
        notes.append(note)
    return KernelSpec(
        request=text,
        problem=problem,
        operation=info.description or info.name,
        backend=scan.backends[0] if scan.backends else DEFAULT_BACKEND,
        targets=targets,
        dtypes=scan.dtypes,
        shapes=shapes,
        source=source,
        notes=notes,
    )


def _catalog_entry(name: str) -> ProblemInfo | None:
    key = normalise_name(name)
    for info in catalog():
        if key in {normalise_name(n) for n in (info.name, info.path.stem, *info.aliases)}:
            return info
    return None


def _draft_backend(value: str) -> str:
    name = backend_for_word(value or DEFAULT_BACKEND)
    if name is None:  # "CuTe_DSL", "cute.dsl": the separators a model may use
        name = backend_for_word(" ".join(_TOKEN.findall((value or "").lower())))
    if name is None:
        name = backend_for_word(normalise_name(value or ""))
    if name is None:
        raise SpecError(f"unknown backend '{value}'; known: {', '.join(known_backends())}")
    return name


def _draft_targets(values: list[str], default_target: str | None) -> tuple[list[str], list[str]]:
    targets: list[str] = []
    for value in values:
        name = _resolve_word(value.strip().lower()) if value.strip() else None
        if name is None:
            raise _unknown_target(value)
        _add(targets, name)
    if targets:
        return targets, []
    targets, note = _default_target(default_target)
    return targets, [note]


def _draft_dtypes(values: list[str]) -> tuple[list[str], list[str]]:
    dtypes: list[str] = []
    notes: list[str] = []
    for value in values:
        key = value.strip().lower().removeprefix("torch.")
        if key in _DTYPE_WORDS:
            _add(dtypes, _DTYPE_WORDS[key])
        else:
            notes.append(f"ignored dtype '{value}' from the model: not one kgen's problems take")
    return dtypes, notes


def spec_prompt(text: str) -> tuple[str, str]:
    """(system, user) messages that ask a model for a :class:`SpecDraft`."""
    from kgen.agent.llm.templates import render_template

    problems = [
        {"name": i.name, "kind": i.kind, "aliases": i.aliases, "description": i.description, "sizes": i.sizes}
        for i in catalog()
    ]
    targets = [{"name": t.name, "display_name": t.display_name, "aliases": list(t.aliases)} for t in all_targets()]
    backend_names = [
        {"name": b.name, "label": b.label, "aliases": [w for w in b.words if w != b.name]}
        for b in all_backend_info()
    ]
    common = {"problems": problems, "targets": targets, "backends": known_backends(),
              "backend_names": backend_names, "default_backend": DEFAULT_BACKEND, "request": text}
    return render_template("spec", part="system", **common), render_template("spec", part="user", **common)


def parse_request_with_model(
    text: str, complete_json: JsonCompleter, *, default_target: str | None = None
) -> KernelSpec:
    """A model reads the request; its answer is checked before it is believed.

    ``complete_json(system, user, SpecDraft)`` returns a :class:`SpecDraft`
    (or anything ``SpecDraft.model_validate`` accepts, or a ``(value, ...)`` tuple
    whose first item is one). A catalog name the
    catalog lacks, or one whose direction contradicts the request, falls back
    to the matcher (noted); if the matcher finds nothing either, SpecError.
    An operation the model says is not in the catalog comes back with
    ``problem=""`` so the caller writes a reference problem for it.
    """
    if not (text or "").strip():
        raise SpecError('empty request: say which kernel to write, e.g. "Triton RMSNorm backward for H100"')
    system, user = spec_prompt(text)
    raw = complete_json(system, user, SpecDraft)
    if isinstance(raw, tuple) and raw:  # (value, completions), as structured_output returns
        raw = raw[0]
    draft = SpecDraft.model_validate(raw.model_dump() if isinstance(raw, BaseModel) else raw)
    named = (draft.problem or "").strip()
    if named.lower() in ("null", "none"):
        named = ""
    info: ProblemInfo | None = None
    if named:
        info = _catalog_entry(named)
        direction = request_direction(text)
        wrong = (
            f"'{named}', which is not a catalog problem" if info is None
            else f"{info.name}, a {info.kind}, for a {direction} request"
            if direction is not None and info.kind != direction else ""
        )
        if wrong:
            try:
                spec = parse_request(text, default_target=default_target)
            except SpecError as exc:
                raise SpecError(f"the model named {wrong}, and the matcher found none: {exc}") from exc
            spec.notes.insert(0, f"the model named {wrong}; the matcher chose {spec.problem}")
            return spec
    backend = _draft_backend(draft.backend)
    targets, notes = _draft_targets(draft.targets, default_target)
    dtypes, dtype_notes = _draft_dtypes(draft.dtypes)
    notes += dtype_notes
    if info is None:
        operation = draft.operation.strip()
        if not operation:
            raise SpecError("the model matched no catalog problem and described no operation")
        notes.append("not in the catalog: a reference problem must be written for it")
        shapes = dict(draft.shapes)
    else:
        operation = info.description or info.name
        hints = [_ShapeHint(f"{k}={v}", k, [v]) for k, v in draft.shapes.items()]
        shapes, shape_notes = _apply_shapes(hints, info)
        notes += shape_notes
    return KernelSpec(
        request=text,
        problem=info.name if info is not None else "",
        operation=operation,
        backend=backend,
        targets=targets,
        dtypes=dtypes,
        shapes=shapes,
        source="model",
        notes=notes,
    )
