"""Name bandwidth plateaus (L1, L2, ..., DRAM) from the breaks between them and the cache hints: one level per cache.

The plateau fit finds every flat stretch of a curve; not every one is a
memory level.  The rules, applied in this order (docs/method.md states them too):

1. Match: each plateau is matched to the cache whose aggregate capacity lies
   nearest (in log) to the break after it, never to a cache below one matched
   before.  A break within 1.5x of a cache's capacity is that cache's
   boundary: the plateaus after it belong to later levels.  Every plateau
   after the one matched to the largest cache is the memory.
2. Merge: neighbouring plateaus matched to the same cache are one level.  The
   exception is strong evidence of a level the hints do not list: both
   plateaus span at least a factor 2 of working set and the step between
   them is at least 6 sigma of the noisier one's points (plateaus.local_noise:
   the upper quartile of the absolute deviations of the log rates of every
   point in its range, members or not, scaled to a Gaussian sigma; at least
   0.5 %).  A stretch that other work slowed by varying amounts scatters
   too much to pass, however few of its points the fit kept.  Such a level
   is named after the level it follows with a letter (L2b), and a warning
   says so.  Below the first cache's capacity / 1.5 no break is such
   evidence: nothing there but L1.
3. Ramp: in the first cache's level, the plateaus before its fastest one that
   end below the first cache's capacity / 1.5 are the kernel's fixed per-call
   overhead at tiny working sets; so are the leading points of its first
   plateau that lie significantly below the rest (level_spans.split_ramp: the
   last more than 2 sigma, all of them more than 1 sigma below the median
   of the points past them), and the points before the level that the fit
   made no plateau of when their median is clearly slower.  The ramp is left
   out of the level and reported in a warning (from the sweep's first point);
   the level is its sustained bandwidth, the median of the points past it.
4. A cache level made of several plateaus takes the value of its fastest one
   (overhead, other tenants and transition knees only ever slow a kernel
   down); its points, range and spread are those of all of them, and a warning
   lists them.
5. The memory is one level however its plateaus differ (a host cache the
   guest does not see, or memory traffic that changed during the run); its
   value is the plateau at the largest working sets, its points every point
   from its first to the sweep's end, and a warning lists the modes. When
   the host's bandwidth changed during the run, ert.analysis.regimes roofs
   it at its fast mode (the rate 3 of its clean points reach).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from ..hwinfo import CacheInfo, aggregate_capacity_bytes
from ..units import human_bytes as fmt_bytes
from ..warning_codes import warn
from .level_spans import cover_to_end, merge_plateaus, points_before, split_ramp
from .plateaus import Curve, Plateau, local_noise

# A break within this factor of a cache's aggregate capacity matches it.
# Beyond it the hint and the measurement disagree and a warning says so: a VM
# may report its host's caches, and victim or non-inclusive caches move the
# break away from the nominal size.
_MATCH_FACTOR = 2.0
# A break this close to a cache's capacity is that cache's boundary (rule 1):
# strong enough evidence that what follows is a later level.  Transitions
# blur a break by about this much, so a closer match means nothing more.
_BOUNDARY_FACTOR = 1.5
# Rule 2: an extra level the hints do not list needs a plateau at least this
# wide (working-set ratio) on both sides of the step ...
_EXTRA_MIN_WIDTH = 2.0
# ... and a step (in log) at least this many sigmas of the noisier one's points
# (robust MAD of their log rates, plateaus.local_noise).  Noise, however it is
# distributed, does not make a step this many sigmas tall; a cache does.  A
# stretch that other work slowed by varying amounts scatters by about a third
# of its own step, so it stays well short.
_EXTRA_STEP_SIGMAS = 6.0
# Rule 3: points before the first level that the fit made no plateau of are
# its ramp when their median lies below the level by 2 sigmas of its spread,
# and at least this much.
_RAMP_MIN_DROP = 0.05
# p90 - p10 of a Gaussian is this many sigmas (for a plateau's spread).
_SPREAD_TO_SIGMA = 2.563
# Noise below this (relative) is not believed: rule 2 never sees a step as
# more sigmas than this floor allows.
_NOISE_FLOOR = 0.005
# A level faster than the one before it by more than this is no memory level
# (bandwidth only falls as working sets grow): warn.
_RISE_FACTOR = 1.12
_MEMORY = -1  # stands for the memory where a cache index is expected


@dataclass(frozen=True)
class NamedLevel:
    """A memory level: its name, its plateau and the evidence for the name.

    ``plateau`` is the level itself; where the fit found several plateaus in
    one level, it is their merge (``merge_plateaus``) and ``pieces`` lists
    them (empty when the level is one plateau).  ``ramp`` holds the
    overhead-bound plateaus at tiny working sets that belong to this level
    but are left out of its value, points and range (rule 3).
    """

    name: str  # "L1", "L2", "L3", ... or the memory's name ("DRAM", "HBM")
    plateau: Plateau
    basis: str  # one short sentence: what evidence named it
    pieces: tuple[Plateau, ...] = ()
    ramp: tuple[Plateau, ...] = ()


@dataclass(frozen=True)
class _Hint:
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
class _Match:
    """What rule 1 made of one plateau."""

    cache: int  # index into the hints, or _MEMORY
    basis: str
    warning: str | None  # the break after it disagrees with the hint
    right_break: float | None  # bytes; None for the last plateau


def cache_hints(caches: Sequence[CacheInfo], workers: int) -> list[_Hint]:
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
        hints.append(_Hint(level, cache, aggregate_capacity_bytes(cache, workers), instances))
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


def _describe(p: Plateau) -> str:
    lo, hi = p.wss_bytes
    return f"{p.gbytes_per_s:.4g} GB/s at {fmt_bytes(lo)} - {fmt_bytes(hi)}"


def _positional(plateaus: list[Plateau], memory_name: str) -> tuple[list[NamedLevel], list[str]]:
    n = len(plateaus)
    levels = []
    for k, p in enumerate(plateaus):
        name = memory_name if k == n - 1 else f"L{k + 1}"
        levels.append(NamedLevel(name, p, f"plateau {k + 1} of {n} by position (no cache hints)"))
    warning = warn("no-cache-sizes",
            f"no cache sizes known: the {n} levels are named by position, the last one {memory_name}")
    return levels, [warning]


def _match_caches(plateaus: list[Plateau], hints: list[_Hint]) -> list[_Match]:
    """Rule 1: the cache (or the memory) each plateau belongs to, from the break after it."""
    # On a tie the higher level counts as the largest: nothing lies beyond it.
    largest = max(range(len(hints)), key=lambda j: (hints[j].capacity_bytes, j))
    cap_max = hints[largest].capacity_bytes
    breaks = [math.sqrt(a.wss_bytes[1] * b.wss_bytes[0]) for a, b in zip(plateaus, plateaus[1:])]
    matches: list[_Match] = []
    previous = -1  # index of the last cache matched so far
    floor = 0  # the lowest cache the next plateau may belong to
    for k, plateau in enumerate(plateaus):
        left = breaks[k - 1] if k > 0 else None
        right = breaks[k] if k < len(breaks) else None
        if matches and matches[-1].cache in (largest, _MEMORY):
            basis = f"follows the break at {fmt_bytes(left)} past the largest cache ({hints[largest].describe()})"
            matches.append(_Match(_MEMORY, basis, None, right))
            continue
        if right is not None:
            nearest = min(range(len(hints)), key=lambda j: abs(math.log(right / hints[j].capacity_bytes)))
            j = max(nearest, previous, floor)
            hint = hints[j]
            off = _ratio(right, hint.capacity_bytes)
            warning = None
            if off <= _MATCH_FACTOR:
                basis = f"break at {fmt_bytes(right)} matches {hint.describe()}"
            else:
                basis = f"break at {fmt_bytes(right)} is {off:.1f}x off {hint.describe()}; named by order"
                warning = (f"the break at {fmt_bytes(right)} is {off:.1f}x off the L{hint.level} hint "
                           f"({fmt_bytes(hint.capacity_bytes)} = {hint.describe()}); named L{hint.level} by order")
                if j == largest and right > hint.capacity_bytes:
                    warning += _past_last_cache(right, hints)
            matches.append(_Match(j, basis, warning, right))
            previous = j
            # A break at the cache's boundary: what follows lies beyond this cache.
            floor = j + 1 if off <= _BOUNDARY_FACTOR else j
            continue
        # The last plateau, before which no plateau was matched to the largest cache.
        lo, hi = plateau.wss_bytes
        start = left if left is not None else lo
        # Share of the plateau's (log) extent lying beyond the largest cache.
        beyond = 1.0 if start >= cap_max else max(0.0, math.log(hi / cap_max)) / max(math.log(hi / start), 1e-12)
        if beyond > 0.5:
            matches.append(_Match(_MEMORY, f"lies mostly beyond the largest cache ({hints[largest].describe()})",
                                  None, None))
            continue
        j = min(max(previous + 1, floor), len(hints) - 1)
        # Named by where it lies, never below the order: a plateau that starts inside a cache but lies mostly
        # past it is the next cache's, whose rate it has (the first cache's own points read slow, as on a busy
        # host, so that no plateau of its own formed).  Its (log) middle picks the cache.
        middle = math.sqrt(lo * hi)
        inside = [i for i in range(len(hints)) if hints[i].capacity_bytes >= middle]
        by_extent = min(inside, key=lambda i: hints[i].capacity_bytes) if inside else largest
        skipped = None
        if by_extent > j and lo < hints[j].capacity_bytes:
            skipped = hints[j]
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
        matches.append(_Match(j, basis, warning, None))
        previous = j
    return matches


def _past_last_cache(brk: float, hints: list[_Hint]) -> str:
    """What a last-level break far past the largest cache's hint suggests, from the numbers at hand."""
    last = hints[-1]
    with_l2 = last.capacity_bytes + (hints[-2].capacity_bytes if len(hints) > 1 else 0)
    reasons = [f"an exclusive or victim L{last.level} adds the L{hints[-2].level}s to it "
               f"({fmt_bytes(with_l2)} together)" if len(hints) > 1 else None,
               f"the cores sit on {max(2, round(brk / last.capacity_bytes))} dies (CCDs) with an "
               f"L{last.level} each (the guest reports one)",
               f"the guest reports a cache size other than the one its cores use"]
    return ". What the data suggests: " + "; or ".join(r for r in reasons if r)


def _extra_level_evidence(a: Plateau, b: Plateau, curve: tuple) -> str | None:
    """Rule 2: why neighbouring plateaus of one cache are two levels, or None when they are one.

    The noise is that of the points in each plateau's working-set range
    (``local_noise``: robust MAD of the log rates, members or not), so a
    stretch that other work slowed by varying amounts reads as the scatter it
    is, however few of its points the fit kept.  Without the curve, a
    plateau's spread (p90 - p10, about 2.56 sigma) stands for it.
    """
    wss_bytes, gbytes_per_s, _ = curve
    widths = [p.wss_bytes[1] / p.wss_bytes[0] for p in (a, b)]
    step = abs(math.log(a.gbytes_per_s / b.gbytes_per_s))
    if wss_bytes is not None and gbytes_per_s is not None:
        sigmas = [local_noise(wss_bytes, gbytes_per_s, p.wss_bytes) for p in (a, b)]
    else:
        sigmas = [p.spread / _SPREAD_TO_SIGMA for p in (a, b)]
    sigma = max(max(sigmas), _NOISE_FLOOR)
    if min(widths) < _EXTRA_MIN_WIDTH or step < _EXTRA_STEP_SIGMAS * sigma:
        return None
    return (f"both are flat over {min(widths):.1f}x or more of working set and the step between them "
            f"({math.expm1(step):.0%}) is {step / sigma:.0f} sigma of their points' noise")


@dataclass
class _Draft:
    """A level being built: its plateaus (positions), its cache and its raw name."""

    positions: list[int]
    cache: int
    name: str = ""
    evidence: str | None = None  # why it is apart from the level before it (rule 2)


def _split_group(group: list[int], plateaus: list[Plateau], *, ramp_below: float | None,
                 curve: tuple) -> list[_Draft]:
    """Rule 2 on one run of plateaus matched to the same cache: the levels it holds."""
    drafts = [_Draft([group[0]], cache=-2)]
    for left, right in zip(group, group[1:]):
        brk = math.sqrt(plateaus[left].wss_bytes[1] * plateaus[right].wss_bytes[0])
        evidence = None
        if ramp_below is None or brk >= ramp_below:
            evidence = _extra_level_evidence(plateaus[left], plateaus[right], curve)
        if evidence is None:
            drafts[-1].positions.append(right)
        else:
            drafts.append(_Draft([right], cache=-2, evidence=evidence))
    return drafts


def name_levels(
    plateaus: list[Plateau],
    caches: list[CacheInfo],
    *,
    workers: int,
    memory_name: str = "DRAM",
    wss_bytes: Sequence[int] | None = None,
    gbytes_per_s: Sequence[float] | None = None,
    noisy: Sequence[bool] | None = None,
) -> tuple[list[NamedLevel], list[str]]:
    """The memory levels of a curve's plateaus (ascending working set) and warnings about doubtful evidence.

    The break between two plateaus is the geometric mean of the left one's
    highest and the right one's lowest working set; a cache's capacity is its
    aggregate for ``workers`` threads over every rank (``aggregate_capacity_bytes``).  The
    module docstring states the rules that turn plateaus into levels.  A
    level is named after its cache (``L2``) or the memory (``memory_name``);
    a level the hints do not list after the one it follows (``L2b``).

    Cache sizes are hints: a break more than a factor 2 from its cache's
    capacity still takes that cache's name (the order of levels is the better
    evidence) but adds a warning naming both sizes; cache levels that no
    level ends at are reported; a last plateau that does not lie mostly
    beyond the largest cache is a cache level, and a warning says that the
    sweep did not reach memory.  Without cache hints the plateaus are the
    levels, named by position (L1, L2, ..., last = memory), with a warning.

    ``wss_bytes``, ``gbytes_per_s`` and ``noisy`` are the curve the plateaus
    index (optional): with them a merged level's spread is over its points
    (see ``merge_plateaus``), and a smooth ramp inside the first level's
    plateau is found too (``split_ramp``).
    """
    if workers < 1:
        raise ValueError("workers must be at least 1")
    plateaus = list(plateaus)
    if not plateaus:
        return [], ["no plateaus: no levels to name"]
    hints = cache_hints(caches, workers)
    if not hints:
        levels, positional = _positional(plateaus, memory_name)
        return levels, positional + _rises(levels)

    matches = _match_caches(plateaus, hints)
    groups: list[list[int]] = []  # runs of neighbouring plateaus matched to one cache
    for k, m in enumerate(matches):
        if groups and matches[groups[-1][-1]].cache == m.cache:
            groups[-1].append(k)
        else:
            groups.append([k])
    ramp_below = hints[0].capacity_bytes / _BOUNDARY_FACTOR
    curve = (wss_bytes, gbytes_per_s, noisy)

    drafts: list[_Draft] = []
    for g, group in enumerate(groups):
        cache = matches[group[0]].cache
        if cache == _MEMORY:
            drafts.append(_Draft(group, cache, memory_name))  # rule 5: never split
            continue
        parts = _split_group(group, plateaus, ramp_below=ramp_below if g == 0 else None, curve=curve)
        # The level that keeps the cache's name is the one whose closing break lies nearest its capacity.
        capacity = hints[cache].capacity_bytes

        def distance(d: _Draft) -> float:
            brk = matches[d.positions[-1]].right_break
            return math.inf if brk is None else abs(math.log(brk / capacity))

        home = min(range(len(parts)), key=lambda i: (distance(parts[i]), -i))
        for i in range(home):  # an extra level before the cache's own: the evidence is the step after it
            parts[i].evidence = parts[i + 1].evidence
        for i, part in enumerate(parts):
            part.cache = cache
            # An extra level before the cache's own is named after the level it follows.
            follows = drafts[-1].name if drafts else f"L{hints[cache].level}"
            part.name = follows if i < home else f"L{hints[cache].level}"
            drafts.append(part)

    names = _disambiguate([d.name for d in drafts])
    warnings: list[str] = []
    levels: list[NamedLevel] = []
    for d, name in zip(drafts, names):
        level, level_warnings = _build_level(d, name, plateaus, matches, hints, first=not levels,
                                    ramp_below=ramp_below, curve=curve)
        levels.append(level)
        closing = matches[d.positions[-1]].warning
        if closing is not None and d.cache != _MEMORY:
            warnings.append(closing.replace("{memory_name}", memory_name))
        warnings.extend(level_warnings)
    warnings = _rises(levels) + warnings

    # Cache levels between named ones that no level ends at.
    named = sorted({d.cache for d in drafts if d.cache != _MEMORY})
    reached = max(named) if named else -1
    if any(d.cache == _MEMORY for d in drafts):
        reached = len(hints) - 1
    for j, hint in enumerate(hints[: reached + 1]):
        if j not in named:
            warnings.append(warn(
                "level-missing", f"no separate plateau for L{hint.level} ({fmt_bytes(hint.capacity_bytes)} = {hint.describe()})"
            ))
    raw_names = [d.name for d in drafts]
    for raw in sorted(set(raw_names)):
        if raw_names.count(raw) > 1:
            doubles = [(n, d) for n, d in zip(names, drafts) if d.name == raw]
            evidence = "; ".join(f"{n}: {d.evidence}" for n, d in doubles if d.evidence)
            warnings.append(warn("split-level",
                            f"{len(doubles)} plateaus map to {raw}: named {', '.join(n for n, _ in doubles)} "
                            f"(a level the cache hints do not list; {evidence})"))
    return levels, warnings


def _build_level(d: _Draft, name: str, plateaus: list[Plateau], matches: list[_Match], hints: list[_Hint], *,
                 first: bool, ramp_below: float, curve: tuple) -> tuple[NamedLevel, list[str]]:
    """One level from its draft: rules 3-5 (ramp, merged cache level, memory modes); (level, its warnings)."""
    wss_bytes, gbytes_per_s, noisy = curve
    points = Curve.of(wss_bytes, gbytes_per_s, noisy) if wss_bytes is not None and gbytes_per_s is not None else None
    pieces = [plateaus[k] for k in d.positions]
    warnings: list[str] = []
    ramp: list[Plateau] = []
    if d.cache == _MEMORY:
        value_from = pieces[-1]
        basis = matches[d.positions[0]].basis
        if len(pieces) > 1:
            basis += f"; one level from {len(pieces)} plateaus, valued at the largest working sets"
            warnings.append(warn("level-changes",
                         f"{name} changes within the level: {', '.join(_describe(p) for p in pieces)}. One level "
                         f"(a host cache the guest does not see, or memory traffic that changed during the run), "
                         f"its plateau at the largest working sets ({value_from.gbytes_per_s:.4g} GB/s); read it as "
                         f"a range"))
    else:
        if first:
            fastest = max(range(len(pieces)), key=lambda i: pieces[i].gbytes_per_s)
            # Rule 3: before the sustained plateau, below the first cache, only per-call overhead.
            while len(ramp) < fastest and (matches[d.positions[len(ramp)]].right_break or 0) < ramp_below:
                ramp.append(pieces[len(ramp)])
            pieces = pieces[len(ramp):]
            # A smooth rise can also sit inside the first plateau left (needs the curve's points).
            if points is not None and pieces[0].wss_bytes[0] < ramp_below:
                sustained, inner = split_ramp(points, pieces[0])
                if inner is not None:
                    ramp.append(inner)
                    pieces[0] = sustained
            # Points before the level that the fit made no plateau of: a ramp too, when clearly slower.
            if not ramp and points is not None:
                lead = points_before(points, pieces[0])
                slow = max(2 * pieces[0].spread / _SPREAD_TO_SIGMA, _RAMP_MIN_DROP)
                if lead is not None and lead.gbytes_per_s < pieces[0].gbytes_per_s * (1 - slow):
                    ramp.append(lead)
            elif ramp and points is not None:
                # The ramp starts at the sweep's first point, whether or not the fit kept it.
                lead = points_before(points, ramp[0], min_points=1)
                if lead is not None:
                    ramp.insert(0, lead)
        value_from = max(pieces, key=lambda p: p.gbytes_per_s)
        basis = matches[d.positions[-1]].basis
        if len(pieces) > 1:
            basis += f"; one level from {len(pieces)} plateaus, valued at its fastest"
            warnings.append(warn("merged-plateaus",
                         f"{name}: {len(pieces)} plateaus with no cache boundary between them "
                         f"({', '.join(_describe(p) for p in pieces)}) are one level, valued at its fastest "
                         f"({value_from.gbytes_per_s:.4g} GB/s); its spread covers them all"))
        if ramp:
            lo, hi = ramp[0].wss_bytes[0], ramp[-1].wss_bytes[1]
            speeds = ", ".join(f"{p.gbytes_per_s:.4g}" for p in ramp)
            basis += f"; below {fmt_bytes(pieces[0].wss_bytes[0])} an overhead ramp, left out"
            warnings.append(warn("ramp",
                         f"{name}: from {fmt_bytes(lo)} to {fmt_bytes(hi)} the kernel is overhead-bound "
                         f"({speeds} GB/s): a ramp of {name}, not a level; {name} is its sustained "
                         f"{value_from.gbytes_per_s:.4g} GB/s from {fmt_bytes(pieces[0].wss_bytes[0])}"))
    plateau = merge_plateaus(pieces, value_from=value_from, gbytes_per_s=gbytes_per_s, noisy=noisy)
    if d.cache == _MEMORY and points is not None:
        # Rule 5: every point from the memory's first one to the sweep's end is the memory's, outliers too.
        plateau = cover_to_end(points, plateau)
    return NamedLevel(name, plateau, basis, tuple(pieces) if len(pieces) > 1 else (), tuple(ramp)), warnings


def _rises(levels: list[NamedLevel]) -> list[str]:
    """Warnings for a level faster than the one before it: no memory level does that."""
    warnings = []
    for left, right in zip(levels, levels[1:]):
        a, b = left.plateau, right.plateau
        if b.gbytes_per_s > a.gbytes_per_s * _RISE_FACTOR:
            warnings.append(warn(
                "rise", f"bandwidth rises from {a.gbytes_per_s:.0f} to {b.gbytes_per_s:.0f} GB/s at "
                f"{fmt_bytes(b.wss_bytes[0])}: not a memory-level step (start-up overhead or interference?)"
            ))
    return warnings
