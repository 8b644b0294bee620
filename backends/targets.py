"""Hardware targets kgen can compile for and reason about, whether or not one is present.

Each :class:`HardwareTarget` carries the vendor's headline figures (SM/CU count,
memory, bandwidth, dense peak throughput per precision, on-chip memory) and the
compiler target a backend needs to cross-compile for it (the string field
``compiler_target``, ``"cuda:90"`` / ``"hip:gfx942"``; the tuple form
``(backend, arch, warp_size)`` from :func:`compiler_target` or
:meth:`HardwareTarget.gpu_target`).

Figures are the vendor's *dense* (no structured sparsity) peaks at boost clock,
taken from these documents (datasheet tables quote the 2:4-sparse figure with a
footnote; those are halved here):

* [H100-WP]  NVIDIA H100 Tensor Core GPU Architecture whitepaper (Hopper, v1.0x),
             table "NVIDIA H100 ... compared to A100" — H100 SXM5 and H100 PCIe columns.
* [H100-DS]  NVIDIA H100 Tensor Core GPU datasheet (SXM and NVL/PCIe columns).
* [H200-DS]  NVIDIA H200 Tensor Core GPU datasheet (H200 SXM column).
* [DGXB200]  NVIDIA DGX B200 datasheet / NVIDIA HGX B200 specifications (8-GPU
             aggregate figures, divided by 8 for one B200).
* [B200-CC]  Chips and Cheese, "Nvidia's B200: Keeping the CUDA Juggernaut Rolling"
             (148 enabled SMs, 126 MB L2 — NVIDIA's datasheets do not state L2).
* [A100-WP]  NVIDIA A100 Tensor Core GPU Architecture whitepaper (Ampere, GA100).
* [A100-DS]  NVIDIA A100 Tensor Core GPU datasheet (A100 80GB SXM column).
* [L40S-DS]  NVIDIA L40S GPU datasheet; [ADA-WP] NVIDIA Ada GPU Architecture whitepaper.
* [CUDA-PG]  CUDA C++ Programming Guide, "Compute Capabilities" table: maximum
             shared memory per SM (8.0: 164 KB, 8.9: 100 KB, 9.0: 228 KB, 10.0: 228 KB).
* [MI300-DS] AMD Instinct MI300X accelerator data sheet;
  [CDNA3-WP] AMD CDNA 3 Instruction Set / "AMD CDNA 3 Architecture" whitepaper.

``fp32_tflops`` is the non-tensor (CUDA-core / vector ALU) FP32 rate;
``tf32_tflops``, ``bf16_tflops`` and ``fp8_tflops`` are tensor-core (matrix
core) rates; ``None`` where the hardware has no such tensor-core format
(A100 has no FP8).
"""

from __future__ import annotations

import difflib
import re
from functools import lru_cache
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from kgen.errors import KgenUsageError

#: The target a run, a prompt or ``kgen doctor`` assumes when nothing names one and no GPU
#: is present: the one place that default is written.
DEFAULT_TARGET = "h100"


class UnknownTargetError(KgenUsageError, LookupError):
    """A target name that matches no known hardware target."""


class HardwareTarget(BaseModel):
    """One GPU model: its compiler target and the vendor's headline figures."""

    model_config = ConfigDict(frozen=True)

    #: canonical short name, e.g. "h100"
    name: str
    #: human-readable name, e.g. "NVIDIA H100 SXM"
    display_name: str
    vendor: Literal["nvidia", "amd"]
    #: architecture / family name, e.g. "Hopper", "CDNA 3"
    architecture: str
    #: compiler target as "<backend>:<arch>", e.g. "cuda:90", "hip:gfx942"
    compiler_target: str
    #: threads per warp (NVIDIA) / wavefront (AMD CDNA)
    warp_size: Literal[32, 64]
    #: streaming multiprocessors (NVIDIA) or compute units (AMD)
    sm_count: int
    memory_gb: float
    memory_bandwidth_tbs: float
    #: dense peak TFLOP/s: FP32 on CUDA cores / vector ALUs (not tensor cores)
    fp32_tflops: float
    #: dense peak tensor-core TFLOP/s per input precision; None = unsupported
    tf32_tflops: float | None
    bf16_tflops: float | None
    fp8_tflops: float | None
    #: largest shared memory (AMD: LDS) one SM/CU can give its blocks, KB
    shared_memory_per_sm_kb: int
    #: L2 cache, MB (MI300X: all XCDs' L2s together; its 256 MB Infinity Cache is not counted)
    l2_mb: float
    #: other names resolve_target() accepts (matched case/space/dash/underscore-insensitively)
    aliases: tuple[str, ...] = Field(default_factory=tuple)

    @property
    def backend(self) -> str:
        """Compiler backend name: "cuda" or "hip"."""
        return self.compiler_target.split(":", 1)[0]

    @property
    def arch(self) -> int | str:
        """Compiler architecture: an int compute capability for CUDA (90), a gfx name for HIP."""
        arch = self.compiler_target.split(":", 1)[1]
        return int(arch) if arch.isdigit() else arch

    def gpu_target(self) -> tuple[str, int | str, int]:
        """``(backend, arch, warp_size)``: the fields of ``triton.backends.compiler.GPUTarget``."""
        return (self.backend, self.arch, self.warp_size)


# --------------------------------------------------------------------------------------
# The registry. Keep the figures' sources next to them.
# --------------------------------------------------------------------------------------

_TARGETS: tuple[HardwareTarget, ...] = (
    HardwareTarget(
        name="h100",
        display_name="NVIDIA H100 SXM",
        vendor="nvidia",
        architecture="Hopper",
        compiler_target="cuda:90",
        warp_size=32,
        sm_count=132,  # [H100-WP] H100 SXM5: 132 SMs
        memory_gb=80,  # [H100-DS] 80 GB HBM3
        memory_bandwidth_tbs=3.35,  # [H100-DS] 3.35 TB/s
        fp32_tflops=66.9,  # [H100-WP] peak FP32 66.9 (datasheet rounds to 67)
        tf32_tflops=494.7,  # [H100-WP] 494.7 dense / 989.4 sparse
        bf16_tflops=989.4,  # [H100-WP] 989.4 dense / 1978.9 sparse
        fp8_tflops=1978.9,  # [H100-WP] 1978.9 dense / 3957.8 sparse
        shared_memory_per_sm_kb=228,  # [H100-WP], [CUDA-PG] cc 9.0
        l2_mb=50,  # [H100-WP] 50 MB L2
        aliases=(
            "h100 sxm", "h100 sxm5", "h100-sxm5-80gb", "h100 80gb hbm3", "hopper",
            "gh100", "sm90", "sm90a", "cuda:90", "cuda90",
        ),
    ),
    HardwareTarget(
        name="h100-pcie",
        display_name="NVIDIA H100 PCIe",
        vendor="nvidia",
        architecture="Hopper",
        compiler_target="cuda:90",
        warp_size=32,
        sm_count=114,  # [H100-WP] H100 PCIe: 114 SMs
        memory_gb=80,  # [H100-DS] 80 GB HBM2e
        memory_bandwidth_tbs=2.0,  # [H100-DS] 2 TB/s (PCIe column)
        fp32_tflops=51.2,  # [H100-WP]
        tf32_tflops=378.0,  # [H100-WP] 378 dense / 756 sparse
        bf16_tflops=756.0,  # [H100-WP] 756 dense / 1513 sparse
        fp8_tflops=1513.0,  # [H100-WP] 1513 dense / 3026 sparse
        shared_memory_per_sm_kb=228,  # [CUDA-PG] cc 9.0
        l2_mb=50,  # [H100-WP]
        aliases=("h100 pcie", "h100pcie", "h100 pcie 80gb"),
    ),
    HardwareTarget(
        name="h200",
        display_name="NVIDIA H200 SXM",
        vendor="nvidia",
        architecture="Hopper",
        compiler_target="cuda:90",
        warp_size=32,
        sm_count=132,  # same GH100 configuration as H100 SXM5
        memory_gb=141,  # [H200-DS] 141 GB HBM3e
        memory_bandwidth_tbs=4.8,  # [H200-DS] 4.8 TB/s
        fp32_tflops=66.9,  # [H200-DS] 67 TFLOPS (same clocks/SMs as H100 SXM5, [H100-WP] 66.9)
        tf32_tflops=494.7,  # [H200-DS] 989 sparse -> dense half
        bf16_tflops=989.4,  # [H200-DS] 1979 sparse -> dense half
        fp8_tflops=1978.9,  # [H200-DS] 3958 sparse -> dense half
        shared_memory_per_sm_kb=228,  # [CUDA-PG] cc 9.0
        l2_mb=50,  # GH100: 50 MB, as [H100-WP]
        aliases=("h200 sxm", "h200 sxm 141gb", "h200 141gb hbm3e"),
    ),
    HardwareTarget(
        name="b200",
        display_name="NVIDIA B200",
        vendor="nvidia",
        architecture="Blackwell",
        compiler_target="cuda:100",
        warp_size=32,
        sm_count=148,  # [B200-CC] 2 dies x 74 enabled SMs
        memory_gb=180,  # [DGXB200] 1,440 GB total HBM3e / 8 GPUs
        memory_bandwidth_tbs=8.0,  # [DGXB200] 64 TB/s total / 8 GPUs
        fp32_tflops=75.0,  # [DGXB200] HGX B200 FP32 600 TFLOPS / 8
        tf32_tflops=1125.0,  # [DGXB200] HGX B200 TF32 18 PFLOPS sparse / 8 / 2
        bf16_tflops=2250.0,  # [DGXB200] HGX B200 BF16 36 PFLOPS sparse / 8 / 2
        fp8_tflops=4500.0,  # [DGXB200] HGX B200 FP8 72 PFLOPS sparse / 8 / 2
        shared_memory_per_sm_kb=228,  # [CUDA-PG] cc 10.0
        l2_mb=126,  # [B200-CC] measured capacity
        aliases=(
            "b200 sxm", "hgx b200", "dgx b200", "blackwell", "gb100", "sm100", "sm100a",
            "cuda:100", "cuda100",
        ),
    ),
    HardwareTarget(
        name="a100",
        display_name="NVIDIA A100 SXM 80GB",
        vendor="nvidia",
        architecture="Ampere",
        compiler_target="cuda:80",
        warp_size=32,
        sm_count=108,  # [A100-WP] 108 SMs
        memory_gb=80,  # [A100-DS] 80 GB HBM2e
        memory_bandwidth_tbs=2.039,  # [A100-DS] 2,039 GB/s (SXM 80GB)
        fp32_tflops=19.5,  # [A100-DS]
        tf32_tflops=156.0,  # [A100-DS] 156 dense / 312 sparse
        bf16_tflops=312.0,  # [A100-DS] 312 dense / 624 sparse
        fp8_tflops=None,  # Ampere tensor cores have no FP8
        shared_memory_per_sm_kb=164,  # [A100-WP], [CUDA-PG] cc 8.0
        l2_mb=40,  # [A100-WP] 40 MB L2
        aliases=(
            "a100 sxm", "a100 sxm4", "a100 80gb", "a100 sxm4 80gb", "a100 sxm 80gb", "ampere",
            "ga100", "sm80", "cuda:80", "cuda80",
        ),
    ),
    HardwareTarget(
        name="l40s",
        display_name="NVIDIA L40S",
        vendor="nvidia",
        architecture="Ada Lovelace",
        compiler_target="cuda:89",
        warp_size=32,
        sm_count=142,  # [L40S-DS] 142 third-gen RT cores = 142 SMs
        memory_gb=48,  # [L40S-DS] 48 GB GDDR6 with ECC
        memory_bandwidth_tbs=0.864,  # [L40S-DS] 864 GB/s
        fp32_tflops=91.6,  # [L40S-DS]
        tf32_tflops=183.0,  # [L40S-DS] 183 dense / 366 sparse
        bf16_tflops=362.05,  # [L40S-DS] 362.05 dense / 733 sparse
        fp8_tflops=733.0,  # [L40S-DS] 733 dense / 1,466 sparse
        shared_memory_per_sm_kb=100,  # [CUDA-PG] cc 8.9
        l2_mb=96,  # [ADA-WP] AD102 96 MB L2
        aliases=("l40s", "l40 s", "ada", "ada lovelace", "lovelace", "ad102", "sm89", "cuda:89", "cuda89"),
    ),
    HardwareTarget(
        name="mi300x",
        display_name="AMD Instinct MI300X",
        vendor="amd",
        architecture="CDNA 3",
        compiler_target="hip:gfx942",
        warp_size=64,
        sm_count=304,  # [MI300-DS] 304 compute units
        memory_gb=192,  # [MI300-DS] 192 GB HBM3
        memory_bandwidth_tbs=5.3,  # [MI300-DS] 5.3 TB/s peak
        fp32_tflops=81.7,  # [MI300-DS] FP32 vector 81.7 (FP32 matrix: 163.4)
        tf32_tflops=653.7,  # [MI300-DS] 653.7 dense / 1307.4 sparse
        bf16_tflops=1307.4,  # [MI300-DS] 1307.4 dense / 2614.9 sparse
        fp8_tflops=2614.9,  # [MI300-DS] 2614.9 dense / 5229.8 sparse
        shared_memory_per_sm_kb=64,  # [CDNA3-WP] 64 KB LDS per CU
        l2_mb=32,  # [CDNA3-WP] 4 MB L2 per XCD x 8 XCDs (+256 MB Infinity Cache)
        aliases=("mi300", "mi 300x", "instinct mi300x", "cdna3", "cdna 3", "gfx942", "hip:gfx942"),
    ),
)


# --------------------------------------------------------------------------------------
# Lookup
# --------------------------------------------------------------------------------------

_VENDOR_PREFIXES = ("nvidia", "amd", "instinct", "tesla", "geforce")


def _normalize(name: str) -> str:
    """Lower-case and drop spaces, dashes, underscores and dots; "sm_90a" -> "sm90a"."""
    key = re.sub(r"[\s\-_.]+", "", name.strip().lower())
    for prefix in _VENDOR_PREFIXES:
        if key.startswith(prefix) and len(key) > len(prefix):
            key = key[len(prefix):]
    return key


@lru_cache(maxsize=1)
def _alias_table() -> dict[str, HardwareTarget]:
    table: dict[str, HardwareTarget] = {}
    for target in _TARGETS:
        for alias in (target.name, target.display_name, *target.aliases):
            key = _normalize(alias)
            # first registration wins: "sm90"/"hopper" mean the H100 SXM, not H100 PCIe or H200
            table.setdefault(key, target)
    return table


def all_targets() -> list[HardwareTarget]:
    """Every known target, in registry order."""
    return list(_TARGETS)


def resolve_target(name: str | HardwareTarget) -> HardwareTarget:
    """The target a forgiving name means: "h100", "H100 SXM", "sm_90", "cuda:90", "MI300X", ...

    Matching ignores case, spaces, dashes, underscores, dots and a leading vendor
    word ("NVIDIA H100 80GB HBM3", as ``torch.cuda.get_device_name`` says it,
    resolves too). Raises :class:`UnknownTargetError` naming the nearest known
    targets otherwise.
    """
    if isinstance(name, HardwareTarget):
        return name
    if not isinstance(name, str) or not name.strip():
        raise UnknownTargetError(f"unknown hardware target {name!r}; known: {_known_names()}")
    key = _normalize(name)
    table = _alias_table()
    if key in table:
        return table[key]
    # "sm_90a"-style names whose suffix we do not list, and "cuda:9.0"
    m = re.fullmatch(r"(?:sm|cuda:?|compute)(\d+)[a-z]?", key)
    if m and (hit := table.get(f"sm{m.group(1)}")):
        return hit
    raise UnknownTargetError(_unknown_message(name, key))


def compiler_target(target: str | HardwareTarget) -> tuple[str, int | str, int]:
    """``(backend, arch, warp_size)`` for a target or target name, e.g. ("cuda", 90, 32)."""
    return resolve_target(target).gpu_target()


def _known_names() -> str:
    return ", ".join(t.name for t in _TARGETS)


def _unknown_message(name: str, key: str) -> str:
    table = _alias_table()
    nearest: list[str] = []
    for alias in difflib.get_close_matches(key, list(table), n=8, cutoff=0.5):
        target_name = table[alias].name
        if target_name not in nearest:
            nearest.append(target_name)
    if not nearest and len(key) >= 2:
        # substring match as a fallback ("h1" -> h100, h100-pcie)
        nearest = [t.name for t in _TARGETS if any(key in a or a in key for a in _keys_of(t))]
    hint = f"nearest known targets: {', '.join(nearest[:3])}" if nearest else "no close match"
    return f"unknown hardware target {name!r}; {hint} (known: {_known_names()})"


def _keys_of(target: HardwareTarget) -> list[str]:
    return [_normalize(a) for a in (target.name, target.display_name, *target.aliases) if len(_normalize(a)) >= 2]
