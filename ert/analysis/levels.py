"""Name bandwidth plateaus (L1, L2, ..., DRAM) from the breaks between them and the cache hints: one level per cache.

The plateau fit finds every flat stretch of a curve; not every one is a
memory level.  The rules, applied in this order (docs/method.md states them too):

0. Cut (ert.analysis.level_spans.split_at_capacities): a plateau that runs
   across the aggregate capacity of a cache other than the last is cut there
   (pieces of fewer than 3 points are left out as transition): a working set
   that fits in a cache is that cache's, so no level holds the working sets
   of the cache before it, however alike their rates.  A piece inside a
   capacity that reads no faster than the piece after it is left out too: no
   roof for its cache (its points read like the next level's).
1. Match (ert.analysis.cache_match): each plateau is matched to the cache whose aggregate capacity lies
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

from ert.hardware.hwinfo import CacheInfo
from ert.units import human_bytes as fmt_bytes
from ert.records.warning_codes import relabel, warn
from ert.analysis.cache_match import BOUNDARY_FACTOR, MEMORY, CacheHint, CacheMatch, cache_hints, match_caches
from ert.analysis.level_spans import Cut, cover_to_end, merge_plateaus, points_before, split_at_capacities, split_ramp
from ert.analysis.plateaus import Curve, Plateau, local_noise

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

    cut_warnings: list[str] = []
    if wss_bytes is not None and gbytes_per_s is not None and len(hints) > 1:
        # Rule 0: a level never holds the working sets of the cache before it.
        plateaus, cut = split_at_capacities(plateaus, [h.capacity_bytes for h in hints[:-1]],
                                            Curve.of(wss_bytes, gbytes_per_s, noisy))
        cut_warnings = [_cut_warning(c, hints[:-1]) for c in cut]
    matches = match_caches(plateaus, hints)
    groups: list[list[int]] = []  # runs of neighbouring plateaus matched to one cache
    for k, m in enumerate(matches):
        if groups and matches[groups[-1][-1]].cache == m.cache:
            groups[-1].append(k)
        else:
            groups.append([k])
    ramp_below = hints[0].capacity_bytes / BOUNDARY_FACTOR
    curve = (wss_bytes, gbytes_per_s, noisy)

    drafts: list[_Draft] = []
    for g, group in enumerate(groups):
        cache = matches[group[0]].cache
        if cache == MEMORY:
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
        if closing is not None and d.cache != MEMORY:
            warnings.append(relabel(closing, closing.replace("{memory_name}", memory_name)))
        warnings.extend(level_warnings)
    warnings = _rises(levels) + cut_warnings + warnings

    # Cache levels between named ones that no level ends at.
    named = sorted({d.cache for d in drafts if d.cache != MEMORY})
    reached = max(named) if named else -1
    if any(d.cache == MEMORY for d in drafts):
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


def _cut_warning(cut: Cut, hints: list[CacheHint]) -> str:
    whole = cut.whole
    crossed = " and ".join(f"L{h.level} ({fmt_bytes(h.capacity_bytes)})" for h in hints
                           if whole.wss_bytes[0] <= h.capacity_bytes < whole.wss_bytes[1])
    text = (f"one plateau of the fit ({_describe(whole)}) runs across the capacity of {crossed}, and a working set "
            f"that fits in a cache is that cache's: cut there into {', '.join(_describe(p) for p in cut.kept)}")
    if cut.slow:
        text += (f"; left out, as they read no faster than the working sets past them (no roof for their cache: a "
                 f"busy host, or a kernel that does not reach the cache's rate there; measure again): "
                 f"{', '.join(_describe(p) for p in cut.slow)}")
    if cut.short:
        text += f"; {cut.short} point(s) too few for a level of their own left out as transition"
    return warn("level-cut", text)


def _build_level(d: _Draft, name: str, plateaus: list[Plateau], matches: list[CacheMatch], hints: list[CacheHint], *,
                 first: bool, ramp_below: float, curve: tuple) -> tuple[NamedLevel, list[str]]:
    """One level from its draft: rules 3-5 (ramp, merged cache level, memory modes); (level, its warnings)."""
    wss_bytes, gbytes_per_s, noisy = curve
    points = Curve.of(wss_bytes, gbytes_per_s, noisy) if wss_bytes is not None and gbytes_per_s is not None else None
    pieces = [plateaus[k] for k in d.positions]
    warnings: list[str] = []
    ramp: list[Plateau] = []
    if d.cache == MEMORY:
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
    if d.cache == MEMORY and points is not None:
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
