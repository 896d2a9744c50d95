"""Name bandwidth plateaus (L1, L2, ..., DRAM) from the breaks between them and the cache hints."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from ..hwinfo import CacheInfo, aggregate_capacity_bytes
from ..units import human_bytes as fmt_bytes
from .plateaus import Plateau

# A break within this factor of a cache's aggregate capacity matches it.
# Beyond it the hint and the measurement disagree and a warning says so: a VM
# may report its host's caches, and victim or non-inclusive caches move the
# break away from the nominal size.
_MATCH_FACTOR = 2.0
# A plateau faster than the one before it by more than this is no memory level
# (bandwidth only falls as working sets grow): warn.
_RISE_FACTOR = 1.12


@dataclass(frozen=True)
class NamedLevel:
    """A plateau with the memory level it measures and the evidence for the name."""

    name: str  # "L1", "L2", "L3", ... or the memory's name ("DRAM", "HBM")
    plateau: Plateau
    basis: str  # one short sentence: what evidence named it


@dataclass(frozen=True)
class _Hint:
    level: int
    cache: CacheInfo
    capacity_bytes: int  # aggregate over the threads of the run
    instances: int

    @property
    def label(self) -> str:
        return f"L{self.level}{'d' if self.cache.kind == 'Data' else ''}"

    def describe(self) -> str:
        shared = f" shared by {self.cache.shared_cpu_count} cpus" if self.cache.shared_cpu_count > 1 else ""
        return f"{self.instances} x {fmt_bytes(self.cache.size_bytes)} {self.label}{shared}"


def _hints(caches: Sequence[CacheInfo], threads: int) -> list[_Hint]:
    """One hint per cache level (the data cache where a level has several), by level."""
    by_level: dict[int, CacheInfo] = {}
    for cache in caches:
        if cache.kind == "Instruction":
            continue
        known = by_level.get(cache.level)
        # Prefer the data cache, then the larger one, when a level is listed twice.
        if known is None or (cache.kind == "Data", cache.size_bytes) > (known.kind == "Data", known.size_bytes):
            by_level[cache.level] = cache
    hints = []
    for level in sorted(by_level):
        cache = by_level[level]
        instances = math.ceil(threads / max(cache.shared_cpu_count, 1))
        hints.append(_Hint(level, cache, aggregate_capacity_bytes(cache, threads), instances))
    return hints


def _ratio(a: float, b: float) -> float:
    """How many times apart a and b are (>= 1)."""
    return max(a, b) / min(a, b)


def _disambiguate(names: list[str]) -> list[str]:
    """Suffix repeated names: L2, L2b, L2c ..."""
    seen: dict[str, int] = {}
    out = []
    for name in names:
        count = seen.get(name, 0)
        seen[name] = count + 1
        out.append(name if count == 0 else f"{name}{chr(ord('a') + count)}")
    return out


def _positional(plateaus: list[Plateau], memory_name: str) -> tuple[list[NamedLevel], list[str]]:
    n = len(plateaus)
    levels = []
    for k, p in enumerate(plateaus):
        name = memory_name if k == n - 1 else f"L{k + 1}"
        levels.append(NamedLevel(name, p, f"plateau {k + 1} of {n} by position (no cache hints)"))
    warning = f"no cache sizes known: the {n} levels are named by position, the last one {memory_name}"
    return levels, [warning]


def name_levels(
    plateaus: list[Plateau],
    caches: list[CacheInfo],
    *,
    threads: int,
    memory_name: str = "DRAM",
) -> tuple[list[NamedLevel], list[str]]:
    """Name each plateau (same order) and list warnings about doubtful evidence.

    The break between two plateaus is the geometric mean of the left one's
    highest and the right one's lowest working set.  A plateau followed by a
    break is named after the cache whose aggregate capacity for ``threads``
    threads (see ``aggregate_capacity_bytes``) lies nearest the break (in
    log), never a level below one already named; every plateau after the one
    named after the largest cache is ``memory_name``.  Otherwise the last
    plateau is the memory only if it lies mostly beyond the largest cache; if
    not, it is the next cache level and a warning says that the sweep did not
    reach memory.

    Cache sizes are hints: a break more than a factor 2 from its cache's
    capacity still takes that cache's name (the order of levels is the better
    evidence) but adds a warning naming both sizes; cache levels that no
    plateau ends at are reported; two plateaus mapping to one level are named
    ``L2`` and ``L2b`` with a warning.  Without cache hints the names are
    positional (L1, L2, ..., last = memory) with a warning.
    """
    if threads < 1:
        raise ValueError("threads must be at least 1")
    plateaus = list(plateaus)
    if not plateaus:
        return [], ["no plateaus: no levels to name"]
    warnings: list[str] = []
    for left, right in zip(plateaus, plateaus[1:]):
        if right.gbytes_per_s > left.gbytes_per_s * _RISE_FACTOR:
            warnings.append(
                f"bandwidth rises from {left.gbytes_per_s:.0f} to {right.gbytes_per_s:.0f} GB/s at "
                f"{fmt_bytes(right.wss_bytes[0])}: not a memory-level step (start-up overhead or interference?)"
            )
    hints = _hints(caches, threads)
    if not hints:
        levels, positional = _positional(plateaus, memory_name)
        return levels, positional + warnings

    # On a tie the higher level counts as the largest: nothing lies beyond it.
    largest = max(range(len(hints)), key=lambda j: (hints[j].capacity_bytes, j))
    cap_max = hints[largest].capacity_bytes
    breaks = [math.sqrt(a.wss_bytes[1] * b.wss_bytes[0]) for a, b in zip(plateaus, plateaus[1:])]
    memory = -1  # stands for the memory in `assigned`
    assigned: list[int] = []
    bases: list[str] = []
    previous = -1  # index of the last cache level named so far
    for k, plateau in enumerate(plateaus):
        left = breaks[k - 1] if k > 0 else None
        right = breaks[k] if k < len(breaks) else None
        if assigned and assigned[-1] in (largest, memory):
            assigned.append(memory)
            bases.append(
                f"follows the break at {fmt_bytes(left)} past the largest cache ({hints[largest].describe()})"
            )
            continue
        if right is not None:
            nearest = min(range(len(hints)), key=lambda j: abs(math.log(right / hints[j].capacity_bytes)))
            j = max(nearest, previous)
            hint = hints[j]
            off = _ratio(right, hint.capacity_bytes)
            if off <= _MATCH_FACTOR:
                bases.append(f"break at {fmt_bytes(right)} matches {hint.describe()}")
            else:
                bases.append(f"break at {fmt_bytes(right)} is {off:.1f}x off {hint.describe()}; named by order")
                warnings.append(
                    f"the break at {fmt_bytes(right)} is {off:.1f}x off the L{hint.level} hint "
                    f"({fmt_bytes(hint.capacity_bytes)} = {hint.describe()}); named L{hint.level} by order"
                )
            assigned.append(j)
            previous = j
            continue
        # The last plateau, before which no plateau was named after the largest cache.
        lo, hi = plateau.wss_bytes
        start = left if left is not None else lo
        # Share of the plateau's (log) extent lying beyond the largest cache.
        beyond = 1.0 if start >= cap_max else max(0.0, math.log(hi / cap_max)) / max(math.log(hi / start), 1e-12)
        if beyond > 0.5:
            assigned.append(memory)
            bases.append(f"lies mostly beyond the largest cache ({hints[largest].describe()})")
            continue
        j = min(previous + 1, len(hints) - 1)
        assigned.append(j)
        previous = j
        if hi <= cap_max:
            bases.append(f"sweep ended at {fmt_bytes(hi)}, within {hints[j].describe()}")
            warnings.append(
                f"the last plateau ends at {fmt_bytes(hi)}, short of memory: the largest cache is "
                f"L{hints[largest].level} ({fmt_bytes(cap_max)} aggregate), so no level is named {memory_name}"
            )
        else:
            bases.append(f"no break from {fmt_bytes(start)} to the sweep's end; the level after the last named")
            warnings.append(
                f"no drop seen up to {fmt_bytes(hi)}, {hi / cap_max:.1f}x the "
                f"L{hints[largest].level} hint ({fmt_bytes(cap_max)} aggregate): memory was not reached or the "
                f"hint is wrong, so no level is named {memory_name}"
            )

    # Cache levels between named ones that no plateau ends at.
    named = sorted({j for j in assigned if j != memory})
    reached = max(named) if named else -1
    if memory in assigned:
        reached = len(hints) - 1
    for j, hint in enumerate(hints[: reached + 1]):
        if j not in named:
            warnings.append(
                f"no separate plateau for L{hint.level} ({fmt_bytes(hint.capacity_bytes)} = {hint.describe()})"
            )
    raw_names = [memory_name if j == memory else f"L{hints[j].level}" for j in assigned]
    names = _disambiguate(raw_names)
    for name in sorted(set(raw_names)):
        if raw_names.count(name) > 1:
            doubles = [n for n, r in zip(names, raw_names) if r == name]
            warnings.append(f"{len(doubles)} plateaus map to {name}: named {', '.join(doubles)}")
    levels = [NamedLevel(n, p, b) for n, p, b in zip(names, plateaus, bases)]
    return levels, warnings
