"""Rule 1 of the level naming: each plateau matched to a cache, or to the memory, from the break after it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from ert.hardware.hwinfo import CacheInfo, aggregate_capacity_bytes
from ert.units import human_bytes as fmt_bytes
from ert.analysis.plateaus import Plateau
from ert.records.warning_codes import warn

# A break within this factor of a cache's aggregate capacity matches it.
# Beyond it the hint and the measurement disagree and a warning says so: a VM
# may report its host's caches, and victim or non-inclusive caches move the
# break away from the nominal size.
_MATCH_FACTOR = 2.0
# A break this close to a cache's capacity is that cache's boundary (rule 1):
# strong enough evidence that what follows is a later level.  Transitions
# blur a break by about this much, so a closer match means nothing more.
BOUNDARY_FACTOR = 1.5
MEMORY = -1  # stands for the memory where a cache index is expected


@dataclass(frozen=True)
class CacheHint:
    """One cache level as the naming sees it: the cache, and its capacity over the run's workers."""

    level: int
    cache: CacheInfo
    capacity_bytes: int  # aggregate over the workers of the run
    instances: int

    @property
    def label(self) -> str:
        return f"L{self.level}{'d' if self.cache.kind == 'Data' else ''}"

    def describe(self) -> str:
        shared = f" shared by {self.cache.shared_cpu_count} cpus" if self.cache.shared_cpu_count > 1 else ""
        return f"{self.instances} x {fmt_bytes(self.cache.size_bytes)} {self.label}{shared}"


@dataclass(frozen=True)
class CacheMatch:
    """What rule 1 made of one plateau."""

    cache: int  # index into the hints, or MEMORY
    basis: str
    warning: str | None  # the break after it disagrees with the hint
    right_break: float | None  # bytes; None for the last plateau


def cache_hints(caches: Sequence[CacheInfo], workers: int) -> list[CacheHint]:
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
        instances = math.ceil(workers / max(cache.shared_cpu_count, 1))
        hints.append(CacheHint(level, cache, aggregate_capacity_bytes(cache, workers), instances))
    return hints


def _ratio(a: float, b: float) -> float:
    """How many times apart a and b are (>= 1)."""
    return max(a, b) / min(a, b)


def match_caches(plateaus: list[Plateau], hints: list[CacheHint]) -> list[CacheMatch]:
    """Rule 1: the cache (or the memory) each plateau belongs to, from the break after it."""
    # On a tie the higher level counts as the largest: nothing lies beyond it.
    largest = max(range(len(hints)), key=lambda j: (hints[j].capacity_bytes, j))
    cap_max = hints[largest].capacity_bytes
    breaks = [math.sqrt(a.wss_bytes[1] * b.wss_bytes[0]) for a, b in zip(plateaus, plateaus[1:])]
    matches: list[CacheMatch] = []
    previous = -1  # index of the last cache matched so far
    floor = 0  # the lowest cache the next plateau may belong to
    for k, plateau in enumerate(plateaus):
        left = breaks[k - 1] if k > 0 else None
        right = breaks[k] if k < len(breaks) else None
        if matches and matches[-1].cache in (largest, MEMORY):
            basis = f"follows the break at {fmt_bytes(left)} past the largest cache ({hints[largest].describe()})"
            matches.append(CacheMatch(MEMORY, basis, None, right))
            continue
        # The smallest cache the whole plateau fits in: a plateau never belongs to a cache after it.
        fits = next((i for i, h in enumerate(hints) if plateau.wss_bytes[1] <= h.capacity_bytes), largest)
        if right is not None:
            nearest = min(range(len(hints)), key=lambda j: abs(math.log(right / hints[j].capacity_bytes)))
            j = max(min(max(nearest, floor), fits), previous)
            hint = hints[j]
            off = _ratio(right, hint.capacity_bytes)
            warning = None
            if off <= _MATCH_FACTOR:
                basis = f"break at {fmt_bytes(right)} matches {hint.describe()}"
            else:
                basis = f"break at {fmt_bytes(right)} is {off:.1f}x off {hint.describe()}; named by order"
                text = (f"the break at {fmt_bytes(right)} is {off:.1f}x off the L{hint.level} hint "
                        f"({fmt_bytes(hint.capacity_bytes)} = {hint.describe()}); named L{hint.level} by order")
                if j == largest and right > hint.capacity_bytes:
                    text += _past_last_cache(right, hints)
                warning = warn("break-off-cache", text)
            matches.append(CacheMatch(j, basis, warning, right))
            previous = j
            # A break at the cache's boundary: what follows lies beyond this cache.
            floor = j + 1 if off <= BOUNDARY_FACTOR else j
            continue
        # The last plateau, before which no plateau was matched to the largest cache.
        lo, hi = plateau.wss_bytes
        start = left if left is not None else lo
        # Share of the plateau's (log) extent lying beyond the largest cache.
        beyond = 1.0 if start >= cap_max else max(0.0, math.log(hi / cap_max)) / max(math.log(hi / start), 1e-12)
        if beyond > 0.5:
            matches.append(CacheMatch(MEMORY, f"lies mostly beyond the largest cache ({hints[largest].describe()})",
                                  None, None))
            continue
        j = max(min(max(previous + 1, floor), len(hints) - 1, fits), previous)
        # Named by where it lies, never below the order: a plateau that starts inside a cache but lies mostly
        # past it is the next cache's, whose rate it has (the first cache's own points read slow, as on a busy
        # host, so that no plateau of its own formed).  Its (log) middle picks the cache.
        middle = math.sqrt(lo * hi)
        inside = [i for i in range(len(hints)) if hints[i].capacity_bytes >= middle]
        by_extent = min(inside, key=lambda i: hints[i].capacity_bytes) if inside else largest
        skipped = None
        if by_extent > j:  # a plateau wholly past cache j is never that cache's (the naming reports j unseen)
            skipped = hints[j] if lo < hints[j].capacity_bytes else None
            j = by_extent
        if hi <= cap_max:
            basis = f"sweep ended at {fmt_bytes(hi)}, within {hints[j].describe()}"
            warning = (f"the last plateau ends at {fmt_bytes(hi)}, short of memory: the largest cache is "
                       f"L{hints[largest].level} ({fmt_bytes(cap_max)} aggregate), so no level is named "
                       f"{{memory_name}}")
        else:
            basis = f"no break from {fmt_bytes(start)} to the sweep's end; the level after the last named"
            warning = (f"no drop seen up to {fmt_bytes(hi)}, {hi / cap_max:.1f}x the "
                       f"L{hints[largest].level} hint ({fmt_bytes(cap_max)} aggregate): memory was not reached or "
                       f"the hint is wrong, so no level is named {{memory_name}}")
        if skipped is not None:
            basis += f"; it lies mostly past {skipped.describe()} (its middle, {fmt_bytes(middle)}, is in L{hints[j].level})"
            warning = ((warning + "; ") if warning else "") + (
                f"no plateau of L{skipped.level}'s own ({fmt_bytes(skipped.capacity_bytes)} aggregate): the points "
                f"there read like L{hints[j].level}, so the plateau from {fmt_bytes(lo)} to {fmt_bytes(hi)} is named "
                f"L{hints[j].level}, where most of it lies (a busy host, or L{skipped.level} as slow as "
                f"L{hints[j].level}); measure again for an L{skipped.level} roof")
        matches.append(CacheMatch(j, basis, warn("level-missing", warning) if warning else None, None))
        previous = j
    return matches


def _past_last_cache(brk: float, hints: list[CacheHint]) -> str:
    """What a last-level break far past the largest cache's hint suggests, from the numbers at hand."""
    last = hints[-1]
    with_l2 = last.capacity_bytes + (hints[-2].capacity_bytes if len(hints) > 1 else 0)
    reasons = [f"an exclusive or victim L{last.level} adds the L{hints[-2].level}s to it "
               f"({fmt_bytes(with_l2)} together)" if len(hints) > 1 else None,
               f"the cores sit on {max(2, round(brk / last.capacity_bytes))} dies (CCDs) with an "
               f"L{last.level} each (the guest reports one)",
               f"the guest reports a cache size other than the one its cores use"]
    return ". What the data suggests: " + "; or ".join(r for r in reasons if r)
