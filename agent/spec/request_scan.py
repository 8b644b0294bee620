"""A request sentence read word by word: its GPUs, dtypes, backends, sizes and direction.

The catalog matcher and the model reader both read a request through here, so "H100s",
"bf16", "cute dsl" or "hidden 4096" mean the same to both. A GPU-like word kgen does not know
("h900", "rtx 4090") or a kernel language it does not write ("cuda") is an error, never a
word quietly dropped; what is left once every recognised span is blanked is the operation.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from kgen.agent.spec.kernel_spec import Direction, SpecError
from kgen.backends.registry import DEFAULT_BACKEND, backend_for_word, known_backends
from kgen.backends.targets import DEFAULT_TARGET, UnknownTargetError, all_targets, resolve_target
from kgen.evals.problem.catalog import normalise_name

# --------------------------------------------------------------------------------------
# Vocabulary
# --------------------------------------------------------------------------------------

#: Kernel languages kgen does not write: naming one is an error, not a silent switch to Triton.
_OTHER_BACKENDS = frozenset(
    {"cuda", "hip", "opencl", "metal", "pallas", "tilelang", "thunderkittens", "mojo", "numba",
     "cupy", "helion", "tvm", "taichi", "sycl"}
)
DTYPE_WORDS = {
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
#: Names of sizes a person types; one set per meaning (normalised: no case, spaces or underscores).
SIZE_GROUPS: tuple[frozenset[str], ...] = tuple(
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
_SIZE_WORDS = frozenset().union(*SIZE_GROUPS)
#: Words that begin a GPU name; "rtx 4090" is an unknown target, not two stray words.
_GPU_FAMILIES = frozenset({"sm", "gfx", "rtx", "gtx", "tesla", "quadro", "radeon", "titan", "mi", "jetson"})
#: A GPU-model-looking word (h900, v100, mi250x, rtx4090): unknown ones are errors, not content.
_GPU_LIKE = re.compile(r"(?:h|a|b|l|v|p|k|g[bha]|ad|mi|sm|gfx|rtx|gtx)\d{2,4}[a-z]{0,3}")
TOKEN = re.compile(r"[a-z0-9]+")
#: "both backends", "all the backends", "every kernel backend", "each backend"
_EVERY_BACKEND = re.compile(r"\b(?:both|all|every|each)\s+(?:(?:the|of|kernel|the kernel)\s+)*backends?\b")
_TARGET_GAP = re.compile(r"[\s\-_.:]+")
_DIMS = re.compile(r"(?<![a-z0-9.])\d+(?:\s*[x×*]\s*\d+)+(?![a-z0-9.])")


# --------------------------------------------------------------------------------------
# Scanning a request
# --------------------------------------------------------------------------------------


@dataclass
class ShapeHint:
    """A size the request names ("hidden 4096", "N=4096", "4096x8192"), as typed."""

    text: str
    #: normalised size name, or None for an unnamed "4096x8192"
    name: str | None
    values: list[int]


@dataclass
class RequestScan:
    """A request read left to right; each recognised span is blanked so it is read once."""

    text: str
    rest: str = ""
    targets: list[str] = field(default_factory=list)
    dtypes: list[str] = field(default_factory=list)
    backends: list[str] = field(default_factory=list)
    shapes: list[ShapeHint] = field(default_factory=list)
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
        return list(TOKEN.finditer(self.rest))


def add_once(items: list[str], value: str) -> None:
    """Append ``value`` unless it is there already (a request may name a GPU twice)."""
    if value not in items:
        items.append(value)


def _known_targets() -> str:
    return ", ".join(t.name for t in all_targets())


def unknown_target(word: str) -> SpecError:
    key = normalise_name(word)
    names = [t.name for t in all_targets()]
    near = difflib.get_close_matches(key, names, n=2, cutoff=0.6)
    hint = f" (nearest: {', '.join(near)})" if near else ""
    return SpecError(f"unknown hardware target '{word}'; known: {_known_targets()}{hint}")


def resolve_target_word(phrase: str) -> str | None:
    """The canonical target a phrase names ("H100s" too), or None."""
    for candidate in (phrase, phrase[:-1] if phrase.endswith("s") else None):
        if candidate:
            try:
                return resolve_target(candidate).name
            except UnknownTargetError:
                continue
    return None


def _scan_targets(scan: RequestScan) -> None:
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
            name = resolve_target_word(phrase)
            if name is not None:
                add_once(scan.targets, name)
                scan.blank(group[0].start(), group[-1].end())
                taken = n
                break
        if taken:
            i += taken
            continue
        word = tokens[i].group()
        nxt = tokens[i + 1].group() if i + 1 < len(tokens) else ""
        if word in _GPU_FAMILIES and nxt[:1].isdigit():
            raise unknown_target(scan.typed(tokens[i].start(), tokens[i + 1].end()))
        if _GPU_LIKE.fullmatch(word) and word not in DTYPE_WORDS and word not in _UNSUPPORTED_DTYPES:
            raise unknown_target(scan.typed(tokens[i].start(), tokens[i].end()))
        i += 1


def _scan_words(scan: RequestScan) -> None:
    """Dtypes and backends: single words, plus the registry's two-word names ("cute dsl")."""
    tokens = scan.tokens()
    i = 0
    while i < len(tokens):
        token, end = tokens[i], tokens[i].end()
        word = token.group()
        pair = _backend_pair(scan, tokens, i)
        if pair is not None:
            add_once(scan.backends, pair)
            end = tokens[i + 1].end()
            i += 1
        elif word in DTYPE_WORDS:
            add_once(scan.dtypes, DTYPE_WORDS[word])
        elif word in _UNSUPPORTED_DTYPES:
            scan.notes.append(f"ignored '{word}': kgen's problems take bfloat16, float16 or float32 inputs")
        elif (backend := backend_for_word(word)) is not None:
            add_once(scan.backends, backend)
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


def _scan_every_backend(scan: RequestScan) -> bool:
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
    scan = RequestScan(text or "")
    every = _scan_every_backend(scan)
    _scan_words(scan)
    if every:  # the default backend's run first, then the others
        return [DEFAULT_BACKEND, *(b for b in known_backends() if b != DEFAULT_BACKEND)]
    return scan.backends if len(scan.backends) > 1 else []


def _backend_pair(scan: RequestScan, tokens: list[re.Match[str]], i: int) -> str | None:
    """The backend two adjacent words name together ("cute dsl", "cute-dsl"), or None."""
    if i + 1 >= len(tokens):
        return None
    gap = scan.rest[tokens[i].end() : tokens[i + 1].start()]
    if not _TARGET_GAP.fullmatch(gap):
        return None
    first, second = tokens[i].group(), tokens[i + 1].group()
    return backend_for_word(f"{first} {second}") or backend_for_word(f"{first}{gap.strip()}{second}")


def _scan_shapes(scan: RequestScan) -> None:
    """'4096x8192', 'N=4096', 'hidden 4096', 'hidden size of 4096', '8192 tokens'."""
    for match in _DIMS.finditer(scan.rest):
        values = [int(v) for v in re.findall(r"\d+", match.group())]
        scan.shapes.append(ShapeHint(scan.typed(match.start(), match.end()), None, values))
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


def _named_before(scan: RequestScan, tokens: list[re.Match[str]], k: int, used: set[int]) -> ShapeHint | None:
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
            return ShapeHint(text, name, [int(tokens[k].group())])
    return None


def _named_after(scan: RequestScan, tokens: list[re.Match[str]], k: int, used: set[int]) -> ShapeHint | None:
    if k + 1 >= len(tokens) or k + 1 in used:
        return None
    name = tokens[k + 1].group()
    if name not in _SIZE_WORDS:
        return None
    used.update([k, k + 1])
    return ShapeHint(scan.typed(tokens[k].start(), tokens[k + 1].end()), name, [int(tokens[k].group())])


def request_direction(text: str) -> Direction | None:
    """"backward" if the text says backward/bwd/grad, "forward" if forward/fwd, else None."""
    words = set(TOKEN.findall(text.lower()))
    back, fwd = bool(words & _BACKWARD_WORDS), bool(words & _FORWARD_WORDS)
    if back and fwd:
        raise SpecError(
            "the request asks for both a forward and a backward; kgen writes one kernel per "
            "request, so ask for each separately"
        )
    return "backward" if back else "forward" if fwd else None


def read_request(text: str) -> RequestScan:
    """The request with its GPUs, every-backend words, dtypes, backends and sizes read (in
    that order, each span blanked once read): ``rest`` holds what is left, the operation."""
    scan = RequestScan(text)
    _scan_targets(scan)
    if _scan_every_backend(scan):
        scan.notes.append("the request asks for every backend: each has a run of its own unless --backend picks one")
    _scan_words(scan)
    _scan_shapes(scan)
    return scan


def content_words(words: Iterable[str]) -> list[str]:
    """The words that can name an operation: no stopwords, no direction words."""
    return [w for w in words if w not in _STOPWORDS and w not in _BACKWARD_WORDS and w not in _FORWARD_WORDS]


def default_targets(default_target: str | None) -> tuple[list[str], str]:
    """The target a request that names none gets (the caller's, else ``DEFAULT_TARGET``), and
    the note that says so."""
    name = default_target or DEFAULT_TARGET
    try:
        canonical = resolve_target(name).name
    except UnknownTargetError as exc:
        raise unknown_target(name) from exc
    return [canonical], f"no target named: using {canonical}"

