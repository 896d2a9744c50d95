"""Memory ceilings from raw records: each curve's bandwidth plateaus named as levels; levels that cannot be, warned."""

from __future__ import annotations

from collections import defaultdict

from ert.analysis.roof_confirm import DEFAULT_NOISE_THRESHOLD, re_measurements
from ert.analysis.levels import NamedLevel, fmt_bytes, name_levels
from ert.analysis.plateaus import find_plateaus, level_over_range, scattered_tail
from ert.analysis.regimes import judge_levels, unassigned_points
from ert.hardware.hwinfo import CacheInfo
from ert.records.weather import Stretch, suspect as is_suspect
from ert.records.warning_codes import relabel, warn
from ert.spec import curve_name, rates

PRECISION_ORDER = {"fp64": 0, "fp32": 1, "fp16": 2, "int32": 3, "int64": 4}
# A level whose plateau_spread (ert.spec) is above this is not flat:
# it mixes levels the fit could not separate, or the machine changed under it.
NOT_FLAT_SPREAD = 0.25


def _own_levels(curve: list[dict], caches, *, workers: int, memory_name: str, label: str):
    """Plateaus of one curve, named: (named levels, warnings, the scattered-tail plateau or None)."""
    wss = [r["wss_bytes"] for r in curve]
    gbs = [rates(r).gbytes_per_s for r in curve]
    noisy = [r["noisy"] for r in curve]
    plateaus = find_plateaus(wss, gbs, noisy=noisy)
    warnings = []
    tail = scattered_tail(wss, gbs, plateaus, noisy=noisy)
    if tail is not None:
        plateaus.append(tail)
        warnings.append(warn("bandwidth-changed",
                        f"{label}: the {tail.n_points} points from {tail.wss_bytes[0] / 2**20:.0f} MiB on "
                        f"scatter too much to form a plateau (spread {tail.spread:.0%}); they form the last "
                        f"level (median {tail.gbytes_per_s:.4g} GB/s). Bandwidth changed during the run: measure again"))
    named, level_warnings = name_levels(plateaus, caches, workers=workers, memory_name=memory_name,
                                        wss_bytes=wss, gbytes_per_s=gbs, noisy=noisy)
    warnings.extend(relabel(w, f"{label}: {w}") for w in level_warnings)
    return named, warnings, tail


def _levels_over_reference(curve: list[dict], reference: list[NamedLevel], ref_label: str) -> list[NamedLevel]:
    """One curve measured over the working-set ranges of another curve's named levels."""
    wss = [r["wss_bytes"] for r in curve]
    gbs = [rates(r).gbytes_per_s for r in curve]
    noisy = [r["noisy"] for r in curve]
    out = []
    for lvl in reference:
        plateau = level_over_range(wss, gbs, lvl.plateau.wss_bytes, noisy=noisy)
        if plateau is not None:
            lo, hi = (fmt_bytes(b) for b in lvl.plateau.wss_bytes)
            out.append(NamedLevel(lvl.name, plateau, f"over the {ref_label} {lvl.name} range {lo} - {hi} "
                                                     f"(that curve separates the levels more clearly)"))
    return out


def _distinct_levels(named: list[NamedLevel]) -> int:
    return len({lvl.name for lvl in named if not lvl.name[-1].islower()})


def caches_by_access(cache_list: list[dict]) -> dict[str | None, list[CacheInfo]]:
    """Cache hints per access pattern from metadata entries.

    An entry may list the access patterns its level shows in (``access``:
    ["ro"] for a GPU's write-through L1, which read+write curves never show
    as a plateau); entries without it apply to every curve.  Key None holds
    the hints of an access pattern not listed.
    """
    def applies(entry: dict, access: str | None) -> bool:
        return "access" not in entry or (access is not None and access in entry["access"])

    return {access: [CacheInfo(level=c["level"], kind=c.get("kind", "Unified"), size_bytes=c["size_bytes"],
                               shared_cpu_count=c.get("shared_cpu_count", 1))
                     for c in cache_list if applies(c, access)]
            for access in (None, "rw", "ro")}


def _for_access(caches, access: str) -> list[CacheInfo]:
    if isinstance(caches, dict):
        return caches.get(access, caches.get(None, []))
    return list(caches)


def _applies(name: str, caches: list[CacheInfo], memory_name: str) -> bool:
    """Whether a level name (L2, L2b, DRAM ...) is one this access pattern's hints can produce."""
    base = name.rstrip("abcdefghijklmnopqrstuvwxyz") or name
    if not caches or base == memory_name or not base.startswith("L"):
        return True
    return base in {f"L{c.level}" for c in caches}


def memory_ceilings(points: list[dict], caches, *, workers: int, memory_name: str = "DRAM",
                    confirms: list[dict] = (), threshold: float = DEFAULT_NOISE_THRESHOLD,
                    stretches: list[Stretch] = ()) -> tuple[list[dict], list[str]]:
    """Plateaus of bandwidth versus working set, per (precision, access), named as levels.

    Bandwidth comes from the kernel with the fewest FLOPs per element in each
    group (the single add for rw, the sum for ro), the most memory-bound.
    Cache capacities do not depend on the access pattern, so when one curve
    separates more levels than another (on Zen 4, read+write runs at nearly
    the same speed in L1, L2 and L3 while read-only does not), the other
    curve's levels are measured over the clearer curve's level ranges, and a
    warning says so.  ``caches`` is a list (for every curve) or a dict by access
    pattern (``caches_by_access``): a level whose hint does not apply to an
    access pattern is never given to its curves.  ``confirms`` are the run's re-measurements ("confirm"
    records): every level is roofed by the fastest rate confirmed inside its window (ert.analysis.roof_confirm),
    within ``threshold`` (the run's noise threshold); a point or re-measurement taken inside one of the run's
    disturbed ``stretches`` (ert.records.weather) confirms nothing.
    """
    again = re_measurements(confirms, stretches)
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for rec in points:
        if rec["valid"] and rec["spec"].get("pipe", "vector") == "vector":  # tensor MMAs move no bytes
            groups[(rec["spec"]["precision"], rec["spec"]["access"])].append(rec)
    warnings: list[str] = []
    order = sorted(groups, key=lambda k: (k[1] != "rw", PRECISION_ORDER.get(k[0], 9)))
    curves, fits = {}, {}
    for key in order:
        recs = groups[key]
        fewest = min(r["spec"]["flops_per_element"] for r in recs)
        curve = sorted((r for r in recs if r["spec"]["flops_per_element"] == fewest), key=lambda r: r["wss_bytes"])
        if len(curve) < 3:
            warnings.append(warn("level-missing",
                    f"{curve_name(*key)}: only {len(curve)} bandwidth points, too few for plateaus"))
            continue
        curves[key] = curve
        fits[key] = _own_levels(curve, _for_access(caches, key[1]), workers=workers, memory_name=memory_name,
                                label=curve_name(*key))
    if not fits:
        return [], warnings
    ref_key = max(fits, key=lambda k: _distinct_levels(fits[k][0]))  # first of the best, in report order
    reference = fits[ref_key][0]

    ceilings = []
    for key, (named, own_warnings, tail) in fits.items():
        precision, access = key
        label = curve_name(*key)
        curve = curves[key]
        # Only the reference's levels this access pattern can have (no L1 for
        # a GPU's read+write curve).
        applicable = [lvl for lvl in reference if _applies(lvl.name, _for_access(caches, access), memory_name)]
        if _distinct_levels(named) < _distinct_levels(applicable):
            own = ", ".join(lvl.name for lvl in named) or "none"
            named = _levels_over_reference(curve, applicable, curve_name(*ref_key))
            warnings.append(warn("levels-borrowed",
                            f"{label}: its own curve separates fewer levels ({own}) than the {curve_name(*ref_key)} "
                            f"curve; its levels are measured over that curve's level ranges"))
        else:
            warnings.extend(own_warnings)
        wss = [r["wss_bytes"] for r in curve]
        gbs = [rates(r).gbytes_per_s for r in curve]
        noisy = [r["noisy"] for r in curve]
        judged, regime_warnings = judge_levels(named, _for_access(caches, access), workers=workers, wss_bytes=wss,
                                               gbytes_per_s=gbs, noisy=noisy, label=label,
                                               again=[again.get(r["id"], []) for r in curve],
                                               suspect=[is_suspect(r, stretches) for r in curve],
                                               noise_threshold=threshold)
        warnings.extend(regime_warnings)
        named = [j.level for j in judged]
        left_out = unassigned_points(named, wss, gbs, noisy)
        if left_out:
            reasons = sorted({u["why"] for u in left_out})
            warnings.append(warn("points-in-no-level", f"{label}: {len(left_out)} point(s) in no level: " + "; ".join(
                f"{sum(1 for u in left_out if u['why'] == why)} {why} "
                f"({fmt_bytes(min(u['wss_bytes'] for u in left_out if u['why'] == why))} - "
                f"{fmt_bytes(max(u['wss_bytes'] for u in left_out if u['why'] == why))})" for why in reasons)))
        for j in judged:
            lvl = j.level
            p = lvl.plateau
            entry = {
                "level": lvl.name,
                "gbytes_per_s": round(p.gbytes_per_s, 4),
                "spread": round(p.spread, 4),
                "wss_bytes": [int(p.wss_bytes[0]), int(p.wss_bytes[1])],
                "n_points": p.n_points,
                "precision": precision,
                "access": access,
                "flops_per_element": curve[0]["spec"]["flops_per_element"],
                "noisy_points": p.noisy_points,
                "basis": lvl.basis,
                "evidence": {"point_ids": [curve[i]["id"] for i in p.indices]},
            }
            if j.regimes:  # rule 6 judged this cache level
                entry["regimes"] = [r.as_dict() for r in j.regimes]
            if j.confirmed:  # the window's fastest confirmed point (schema 1.10)
                entry["confirmed"] = j.confirmed.as_dict(curve[j.confirmed.index]["id"])
            if j.range_gbytes_per_s:  # rule 6, or a memory valued at its fast mode
                entry["range_gbytes_per_s"] = [round(j.range_gbytes_per_s[0], 4), round(j.range_gbytes_per_s[1], 4)]
            ceilings.append(entry)
            scattered = tail is not None and (p is tail or tail in lvl.pieces)  # the tail has its own warning
            if p.spread > NOT_FLAT_SPREAD and not scattered:
                warnings.append(warn("not-flat",
                                f"{label} {lvl.name}: not flat (spread {p.spread:.0%} over {p.n_points} points): "
                                f"a ramp inside the level, levels of similar speed, or a machine that changed "
                                f"during the run; read it as a range"))
            if p.noisy_points:
                warnings.append(warn("noisy-level",
                        f"{label} {lvl.name}: built on {p.noisy_points} noisy point(s) of {p.n_points}"))
    return ceilings, warnings + consistency_warnings(ceilings, threshold, memory_name)


# ------------------------------------------------------------------ levels that cannot be
# Both come from the finished memory ceilings of one thread count, and both are "act on it" warnings: the run's
# numbers are not the machine's alone.
#
# * Precisions.  fp32 and fp64 kernels of one access pattern move the same bytes through the same level, so their
#   roofs agree within the run's noise threshold.  When the fastest and the slowest precision of a (level, access)
#   differ by more (the Zen 4 newcomer's read+write DRAM: fp32 306 GB/s, fp64 61), one warning names both.
# * Inversions.  Bandwidth only falls as the data moves away from the core: L2 can not stream faster than L1, L3
#   than L2, the memory than the last cache.  A curve whose level reads faster than the level above it by more than
#   the noise threshold (the same newcomer run: fp64 read+write L1 359 GB/s confirmed, L2 449) gets one warning.
PRECISIONS_CODE = "precisions-disagree"
INVERTED_CODE = "level-inverted"


def _apart(fast: float, slow: float, threshold: float) -> bool:
    return slow > 0 and fast > slow * (1.0 + threshold)


def precision_warnings(ceilings: list[dict], threshold: float) -> list[str]:
    """One warning per (level, access) whose fastest and slowest precision differ beyond the noise threshold."""
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for c in ceilings:
        groups[(c["level"], c["access"])].append(c)
    warnings = []
    for (level, access), same in groups.items():
        if len({c["precision"] for c in same}) < 2:
            continue
        fast = max(same, key=lambda c: c["gbytes_per_s"])
        slow = min(same, key=lambda c: c["gbytes_per_s"])
        if not _apart(fast["gbytes_per_s"], slow["gbytes_per_s"], threshold):
            continue
        ratio = fast["gbytes_per_s"] / slow["gbytes_per_s"]
        warnings.append(warn(PRECISIONS_CODE,
                        f"{level} {curve_name(fast['precision'], access)} {fast['gbytes_per_s']:.4g} GB/s against "
                        f"{curve_name(slow['precision'], access)} {slow['gbytes_per_s']:.4g} GB/s: the same bytes at "
                        f"{ratio:.2f}x the rate, beyond the noise threshold ({threshold:.0%}); one of them was "
                        f"measured while other work shared the host (or the {level} bandwidth changed during the "
                        f"run): neither value is the machine's alone; measure again"))
    return warnings


def _order(level: str, memory_name: str) -> int | None:
    """A level's place from the core out (L1 = 1 ... the memory last); None for a level the hints do not list."""
    if level == memory_name:
        return 1 << 20
    if level.startswith("L") and level[1:].isdigit():
        return int(level[1:])
    return None


def inversion_warnings(ceilings: list[dict], threshold: float, memory_name: str) -> list[str]:
    """One warning per curve level that reads faster than the level above it beyond the noise threshold."""
    curves: dict[tuple[str, str], list[tuple[int, dict]]] = defaultdict(list)
    for c in ceilings:
        place = _order(c["level"], memory_name)
        if place is not None:
            curves[(c["precision"], c["access"])].append((place, c))
    warnings = []
    for (precision, access), levels in curves.items():
        levels.sort(key=lambda pair: pair[0])
        for (_, upper), (_, lower) in zip(levels, levels[1:]):
            if not _apart(lower["gbytes_per_s"], upper["gbytes_per_s"], threshold):
                continue
            warnings.append(warn(INVERTED_CODE,
                            f"{curve_name(precision, access)} {lower['level']} {lower['gbytes_per_s']:.4g} GB/s reads "
                            f"faster than its {upper['level']} {upper['gbytes_per_s']:.4g} GB/s, beyond the noise "
                            f"threshold ({threshold:.0%}): no level streams faster than the one above it; one of "
                            f"them was measured while other work shared the host: measure again"))
    return warnings


def consistency_warnings(ceilings: list[dict], threshold: float, memory_name: str) -> list[str]:
    """The precision and inversion warnings of one set of memory ceilings."""
    return precision_warnings(ceilings, threshold) + inversion_warnings(ceilings, threshold, memory_name)
