"""Pick the roofs of a roofline from a ceilings document: one bandwidth per memory level, the compute peaks."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ert.errors import ErtError
from ert.spec import ACCESS_NAMES

PRECISIONS = ("fp64", "fp32", "fp16", "int32", "int64")
_CACHE_LEVEL_RE = re.compile(r"^L(\d+)[a-z]?$")
# What an application profile calls the memory behind the last cache.
MEMORY_ALIASES = ("DRAM", "HBM", "MEM", "MEMORY", "GDDR")
# Bytes a GPU kernel moved to or from host memory (Nsight Compute's sysmem aperture) go over the host link.
SYSTEM_MEMORY_ALIASES = ("SYSMEM", "SYSTEM", "HOST")
TRANSFER_KINDS = ("link", "peer", "network")


@dataclass(frozen=True)
class MemoryRoof:
    """One slanted roof: a memory level's sustained bandwidth."""

    level: str
    gbytes_per_s: float
    precision: str | None
    access: str | None
    wss_bytes: tuple[int, int]
    spread: float
    disturbed: bool = False  # measured while the host was disturbed (``disturbed: true``): not the machine's


@dataclass(frozen=True)
class ComputeRoof:
    """One flat roof: the peak FLOP/s of one precision, with or without FMA."""

    precision: str
    fma: bool
    gflops_per_s: float
    flops_per_element: int | None
    disturbed: bool = False

    @property
    def name(self) -> str:
        return f"{self.precision.upper()} {'FMA' if self.fma else 'no-FMA'}"


def is_cache_level(level: str) -> bool:
    """True for L1, L2, L3 ...; False for the memory behind them (DRAM, HBM, DRAMb)."""
    return _CACHE_LEVEL_RE.match(level) is not None


def basis_label(precision: str | None, access: str | None) -> str:
    """'fp64 read+write': the kernel whose bandwidth a set of memory roofs is."""
    parts = [precision or "any precision", ACCESS_NAMES.get(access or "", access or "any access")]
    return " ".join(parts)


def _memory_entries(doc: dict) -> list[dict]:
    """Memory levels only: link, peer and network levels (entries with a ``kind``) are not memory roofs."""
    return [e for e in doc.get("ceilings", {}).get("memory", []) if e.get("kind") is None]


@dataclass(frozen=True)
class TransferRoof:
    """A link, peer or network level: a bandwidth roof for bytes that cross it."""

    level: str
    kind: str
    variant: str
    gbytes_per_s: float
    latency_us: float | None
    spread: float

    @property
    def name(self) -> str:
        return f"{self.level} {self.variant}".strip()


def transfer_roofs(doc: dict, kinds: tuple[str, ...] = TRANSFER_KINDS) -> list[TransferRoof]:
    """Every link, peer and network level of a ceilings document, in document order."""
    out = []
    for e in doc.get("ceilings", {}).get("memory", []):
        if e.get("kind") in kinds:
            out.append(TransferRoof(level=e["level"], kind=e["kind"], variant=str(e.get("variant", "")),
                                    gbytes_per_s=float(e["gbytes_per_s"]), latency_us=e.get("latency_us"),
                                    spread=float(e.get("spread", 0.0))))
    return out


def system_memory_roof(doc: dict) -> TransferRoof | None:
    """The roof of a kernel's system-memory bytes: the fastest host-to-device link level (link-h2d)."""
    links = [r for r in transfer_roofs(doc, ("link",)) if r.level == "link-h2d"]
    return max(links, key=lambda r: r.gbytes_per_s) if links else None


def memory_bases(doc: dict) -> list[tuple[str | None, str | None]]:
    """Every (precision, access) pair that has memory ceilings, in document order."""
    seen: list[tuple[str | None, str | None]] = []
    for entry in _memory_entries(doc):
        key = (entry.get("precision"), entry.get("access"))
        if key not in seen:
            seen.append(key)
    return seen


def choose_basis(doc: dict, *, precision: str = "fp64", access: str = "rw") -> tuple[str | None, str | None]:
    """The (precision, access) whose bandwidths become the roofs.

    Rule: the asked pair if measured; else the same access in another precision
    (fp64, fp32, fp16 order), since bytes per second barely depend on the type;
    else the asked precision with the other access; else the first pair present.
    Entries without precision or access (both optional in the schema) form their own pair.
    """
    bases = memory_bases(doc)
    if not bases:
        raise ErtError("has no memory ceilings to draw roofs from", key="ceilings.memory")
    order = [(precision, access)]
    order += [(p, access) for p in PRECISIONS if p != precision]
    order += [(precision, a) for a in ACCESS_NAMES if a != access]
    order += [(p, a) for p in PRECISIONS for a in ACCESS_NAMES]
    for key in order:
        if key in bases:
            return key
    return bases[0]


def memory_roofs(doc: dict, *, precision: str = "fp64", access: str = "rw") -> tuple[list[MemoryRoof], str]:
    """One roof per level (fastest level first, i.e. by working set) and the basis label of the rule used."""
    chosen = choose_basis(doc, precision=precision, access=access)
    roofs = []
    for entry in _memory_entries(doc):
        if (entry.get("precision"), entry.get("access")) != chosen:
            continue
        low, high = entry["wss_bytes"]
        roofs.append(MemoryRoof(level=entry["level"], gbytes_per_s=float(entry["gbytes_per_s"]),
                                precision=chosen[0], access=chosen[1], wss_bytes=(int(low), int(high)),
                                spread=float(entry.get("spread", 0.0)), disturbed=entry.get("disturbed") is True))
    roofs.sort(key=lambda r: r.wss_bytes[0])
    return roofs, basis_label(*chosen)


def is_vector_fp(entry: dict) -> bool:
    """Whether a compute entry is a floating-point roof of the vector units (what "the FP64 FMA roof" means).

    Not: integer roofs (``unit: GIOP/s``), tensor-core roofs
    (``pipe: tensor``), and measured mixes (entries with ``mix``).
    """
    return (entry.get("unit") != "GIOP/s" and entry.get("precision") not in ("int32", "int64")
            and entry.get("pipe", "vector") == "vector" and not entry.get("mix"))


def compute_roofs(doc: dict) -> list[ComputeRoof]:
    """Every floating-point compute ceiling of the vector units: by precision (fp64 first), FMA before no-FMA.

    Integer, tensor and mix roofs are left out (``is_vector_fp``): they are
    ``extra_roofs``, which ``ert plot`` draws in their own groups and
    ``ert profile`` places integer and tensor work under.
    """
    roofs = [ComputeRoof(precision=e["precision"], fma=bool(e["fma"]), gflops_per_s=float(e["gflops_per_s"]),
                         flops_per_element=e.get("flops_per_element"), disturbed=e.get("disturbed") is True)
             for e in doc.get("ceilings", {}).get("compute", []) if is_vector_fp(e)]
    rank = {p: i for i, p in enumerate(PRECISIONS)}
    roofs.sort(key=lambda r: (rank.get(r.precision, 9), not r.fma))
    return roofs


def fma_roof(doc: dict, precision: str) -> ComputeRoof | None:
    """The FMA roof of one precision, or its no-FMA roof when FMA was not measured."""
    roofs = [r for r in compute_roofs(doc) if r.precision == precision]
    with_fma = [r for r in roofs if r.fma]
    return (with_fma or roofs or [None])[0]


@dataclass(frozen=True)
class ExtraRoof:
    """A compute roof beside the vector FP ones: integer (GIOP/s), tensor core, or a measured mix."""

    group: str           # "integer", "tensor" or "mix"
    precision: str
    value: float         # in ``unit``
    unit: str            # "GFLOP/s" or "GIOP/s"
    name: str            # "FP16 tensor (m16n8k16, f32 accumulate)", "INT32 multiply-add"
    entry: dict


EXTRA_GROUPS = ("integer", "tensor", "mix")


def _extra_of(entry: dict) -> ExtraRoof | None:
    precision = str(entry.get("precision", "?"))
    value = float(entry["gflops_per_s"])
    if entry.get("pipe") == "tensor":
        shape = " ".join(str(x) for x in (entry.get("instruction"), entry.get("mma_shape")) if x)
        detail = ", ".join(str(x) for x in (shape,
                                           f"{entry['accumulate']} accumulate" if entry.get("accumulate") else None)
                           if x)
        # int8 (s32 accumulate) is an integer roof: GIOP/s (schema 1.9), every other type GFLOP/s.
        unit = "GIOP/s" if entry.get("unit") == "GIOP/s" else "GFLOP/s"
        return ExtraRoof("tensor", precision, float(entry.get("giops_per_s", value)) if unit == "GIOP/s" else value,
                         unit, f"{precision.upper()} tensor" + (f" ({detail})" if detail else ""), entry)
    if entry.get("mix"):  # fma+add (GFLOP/s), int32+fp32 / int64+fp64 (GOP/s)
        return ExtraRoof("mix", precision, value, str(entry.get("unit", "GFLOP/s")),
                         f"{precision.upper()} {entry['mix']} mix", entry)
    if entry.get("unit") == "GIOP/s" or precision in ("int32", "int64"):
        kind = "add" if entry.get("op") == "add" else "multiply-add"
        return ExtraRoof("integer", precision, float(entry.get("giops_per_s", value)), "GIOP/s",
                         f"{precision.upper()} {kind}", entry)
    return None


def extra_roofs(doc: dict) -> list[ExtraRoof]:
    """Every integer, tensor and mix roof, grouped (integer, tensor, mix), fastest first within a group."""
    out = [r for e in doc.get("ceilings", {}).get("compute", []) if (r := _extra_of(e)) is not None]
    out.sort(key=lambda r: (EXTRA_GROUPS.index(r.group), -r.value))
    return out


def tensor_roof(doc: dict, precision: str) -> ExtraRoof | None:
    """The tensor roof of one input type (fp16, bf16, tf32, fp64, fp8, int8); fp16 and bf16 stand in for each other."""
    roofs = [r for r in extra_roofs(doc) if r.group == "tensor"]
    for want in (precision, {"fp16": "bf16", "bf16": "fp16"}.get(precision)):
        found = [r for r in roofs if r.precision == want]
        if found:
            return found[0]
    return None


def integer_roof(doc: dict, precision: str = "int32") -> ExtraRoof | None:
    """The integer roof of one precision (int32, int64): its multiply-add roof, else its add roof.

    An integer instruction count is placed under the fastest of them: Nsight
    Compute's integer count mixes adds, multiply-adds and logic, each one op.
    """
    roofs = [r for r in extra_roofs(doc) if r.group == "integer" and r.precision == precision]
    return max(roofs, key=lambda r: r.value) if roofs else None


def match_level(app_level: str, roofs: list[MemoryRoof]) -> MemoryRoof | None:
    """The roof an application's byte count at ``app_level`` moves through.

    Cache levels match by name (L1, L2 ...). DRAM/HBM/... match the first
    roof that is not a cache: a GPU run names it HBM, a CPU run DRAM.
    """
    wanted = app_level.strip()
    for roof in roofs:
        if roof.level.upper() == wanted.upper():
            return roof
    if wanted.upper() in MEMORY_ALIASES:
        for roof in roofs:
            if not is_cache_level(roof.level):
                return roof
    return None


def machine_label(doc: dict) -> str:
    """'vm, AMD EPYC (2 threads), numba-cpu, 2026-11-21': what machine a ceilings file describes."""
    meta = doc.get("metadata", {})
    tool = meta.get("tool")
    parts = [f"from {tool} {meta.get('tool_version', '')}".strip() if tool and tool != "ert" else None,
             meta.get("host"), meta.get("device") or meta.get("cpu_model"), meta.get("backend"),
             str(meta.get("date", ""))[:10] or None]
    return ", ".join(str(p) for p in parts if p)
