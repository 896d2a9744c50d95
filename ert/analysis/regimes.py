"""The roof of a cache level: the best regime it sustains inside its cache's working-set range.

A roof is an upper bound.  Inside one cache the kernel's bandwidth need not
be flat: a prefetcher that needs a long stream to ramp up, a write-back
path that only saturates once the level is busy, or a step the plateau fit
took for a transition can all put two regimes inside one cache (measured on
Zen 5: read+write 570-760 GB/s from just past L1 to 0.4 x L2, then 940-1036
GB/s at 0.45-0.7 x L2).  The plateau fit keeps the longest flat stretch and
drops short ones as "transition fragments", so the level's value then
depended on which regime happened to form a plateau in a given run (601 or
928 GB/s between runs on the same machine).  Rule 6 of ert.analysis.levels,
applied here after the levels are named:

* **Window.**  A cache level L_k other than the first (whose value already
  excludes its overhead ramp, rule 3) is judged over the points whose
  working set lies from 2 x the aggregate capacity of L_(k-1) (past the
  transition out of the cache before it) up to the larger of L_k's
  aggregate capacity and its own last point, and that no other named level
  holds.  The memory (DRAM, HBM) has no cache after it and no regimes: see
  its modes below.
* **Regimes.**  The window's clean points (all points when fewer than three
  are clean), in working-set order, are split into constant stretches by the
  same optimal partition the plateau fit uses (L1 misfit in log rate plus a
  penalty of 3 sigma ln n per stretch, sigma the stretch-to-stretch noise of
  the window's points, at least 1 %); neighbouring stretches within
  max(3 sigma, 5 %) of each other are one regime.  A regime needs at least
  ``MIN_REGIME_POINTS`` (3) neighbouring points: one or two fast points are
  an outlier, never a roof.
* **Roof.**  A regime's rate is the rate at least ``MIN_REGIME_POINTS`` of
  its clean points reach (its third-fastest point).  Other tenants of a
  shared host only slow a kernel down, and on such a host the points of one
  cache scatter by 10-30 % from one working set to the next (Zen 4 read+write
  L2: 300-454 GB/s at random), so a median reads the host's load, not the
  cache; one or two fast points alone make no regime.  The level's value
  is the rate of its fastest regime, or its fastest confirmed point where
  that is higher (ert.analysis.roof_confirm: measured again, or a neighbour
  agrees; one or two working sets can be enough there).  Its
  points are its own plus the whole window, its spread is over all of them
  and ``range_gbytes_per_s`` gives their lowest and highest clean rates, so
  a slower regime still shows as a range, and ``regimes`` lists each regime's
  working sets, value and points.  A warning names the regimes when there
  are several.

The memory level (rule 5 names it one level however its plateaus differ) is
an upper bound too, and only from 2 x the last cache's aggregate capacity on,
its own plateau and a borrowed one alike; on a shared host it can be
re-valued at its fast mode (``ert.analysis.memory_level``).

Every level with a window (the memory's from 2 x the last cache on) takes
the rate the run confirmed there as its value whenever there is one
(``ert.analysis.roof_confirm``), above or below what the rules above give: no
entry carries a roof and a different confirmed rate.

Points of a curve that end up in no level are listed per curve with the
reason (``unassigned_points``): the overhead ramp below the first level, the
transition between two levels, or past the last one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np

from ert.analysis.cache_match import cache_hints
from ert.analysis.roof_confirm import DEFAULT_NOISE_THRESHOLD, Confirmed, Measured, confirmed_roof
from ert.analysis.levels import NamedLevel
from ert.analysis.memory_level import MIN_REGIME_POINTS, fast_mode, memory_from, no_memory_note, transition_note
from ert.analysis.plateaus import Plateau
from ert.analysis.stepfit import log_noise, median_cost_table, optimal_partition
from ert.hardware.hwinfo import CacheInfo
from ert.spec import WINDOW_START_FACTOR, plateau_spread
from ert.units import human_bytes as fmt_bytes
from ert.records.warning_codes import warn

# A regime is at least this many neighbouring points (MIN_REGIME_POINTS, ert.analysis.memory_level): with one
# point in a window lifted by chance (a quiet moment on a shared host), three points agreeing is the least that
# says the level sustains the rate.
# Neighbouring stretches closer than this (log) are one regime; and at least
# this many sigmas of the window's noise.
_SAME_REGIME = math.log1p(0.05)
_SAME_REGIME_SIGMAS = 3.0
_PENALTY_SIGMAS_PER_LOG_N = 3.0
_MIN_SIGMA = 0.01


@dataclass(frozen=True)
class Regime:
    """A constant stretch of a cache level's window; its rate is the one ``MIN_REGIME_POINTS`` of its points reach."""

    gbytes_per_s: float
    wss_bytes: tuple[int, int]
    n_points: int
    indices: tuple[int, ...]  # into the curve, ascending working set

    def as_dict(self) -> dict:
        return {"wss_bytes": [int(self.wss_bytes[0]), int(self.wss_bytes[1])],
                "gbytes_per_s": round(self.gbytes_per_s, 4), "n_points": self.n_points}


def find_regimes(wss_bytes: Sequence[int], gbytes_per_s: Sequence[float], indices: Sequence[int], *,
                 noisy: Sequence[bool] | None = None) -> list[Regime]:
    """The regimes (ascending working set) of the curve's points ``indices``; stretches too short are left out."""
    wss = np.asarray(wss_bytes, dtype=float)
    bw = np.asarray(gbytes_per_s, dtype=float)
    flags = np.zeros(bw.size, dtype=bool) if noisy is None else np.asarray(noisy, dtype=bool)
    idx = np.array([i for i in indices if np.isfinite(bw[i]) and bw[i] > 0], dtype=int)
    idx = idx[np.argsort(wss[idx], kind="stable")]
    clean = idx[~flags[idx]]
    fit = clean if clean.size >= MIN_REGIME_POINTS else idx
    if fit.size < MIN_REGIME_POINTS:
        return []
    y = np.log(bw[fit])
    sigma = max(log_noise(y), _MIN_SIGMA)
    segments = optimal_partition(median_cost_table(y), _PENALTY_SIGMAS_PER_LOG_N * sigma * math.log(max(y.size, 3)))
    same = max(_SAME_REGIME, _SAME_REGIME_SIGMAS * sigma)
    merged: list[list[int]] = []
    for start, end in segments:
        if merged and abs(float(np.median(y[merged[-1][0]:merged[-1][1]])) - float(np.median(y[start:end]))) < same:
            merged[-1][1] = end
        else:
            merged.append([start, end])
    regimes = []
    for start, end in merged:
        if end - start < MIN_REGIME_POINTS:
            continue
        members = fit[start:end]
        # Other work on the host only ever slows a kernel down: the rate the
        # regime sustains is the one MIN_REGIME_POINTS of its points reach.
        regimes.append(Regime(gbytes_per_s=float(np.sort(bw[members])[-MIN_REGIME_POINTS]),
                              wss_bytes=(int(wss[members].min()), int(wss[members].max())),
                              n_points=int(members.size), indices=tuple(int(i) for i in members)))
    return regimes


@dataclass(frozen=True)
class JudgedLevel:
    """A named level after rule 6: the level, its regimes (empty when it was not judged) and its rate range."""

    level: NamedLevel
    regimes: tuple[Regime, ...] = ()
    range_gbytes_per_s: tuple[float, float] | None = None
    confirmed: Confirmed | None = None  # the window's fastest confirmed point (ert.analysis.roof_confirm)


def _is_cache(name: str) -> bool:
    return name.startswith("L") and name[1:].isdigit()


def _window(level: NamedLevel, capacities: dict[int, int], taken: set[int], wss: np.ndarray,
            before: NamedLevel | None = None) -> np.ndarray | None:
    """The curve indices rule 6 judges ``level`` over, or None when the level is not a judged cache level.

    ``before`` is the named level before it: one the hints do not list (L1b) moves the window's start to 2 x its
    last working set, past its own transition."""
    name = level.name
    if not _is_cache(name):
        return None  # the memory, or a level the hints do not list (L2b)
    k = int(name[1:])
    if k not in capacities or (k - 1 not in capacities and k != min(capacities)):
        return None  # a level without a known cache before it
    # The first cache's window starts at the sweep's first point (its overhead ramp is slower, never a roof).
    lo = WINDOW_START_FACTOR * capacities[k - 1] if k - 1 in capacities else 0.0
    if before is not None and before.name[-1].islower():
        lo = max(lo, WINDOW_START_FACTOR * before.plateau.wss_bytes[1])
    hi = max(capacities[k], level.plateau.wss_bytes[1])
    inside = np.flatnonzero((wss >= lo) & (wss <= hi))
    return np.array([i for i in inside if i not in taken], dtype=int)


def _raised(judged: JudgedLevel, confirmed: Confirmed | None, window: np.ndarray, wss: np.ndarray, bw: np.ndarray,
            flags: np.ndarray) -> JudgedLevel:
    """``judged`` with ``confirmed`` attached and its value set to the confirmed rate (higher or lower)."""
    if confirmed is None:
        return judged
    level = judged.level
    before = level.plateau.gbytes_per_s
    if confirmed.gbytes_per_s == before:
        return replace(judged, confirmed=confirmed)
    points = np.union1d(np.array(level.plateau.indices, dtype=int), np.array([confirmed.index], dtype=int))
    plateau = replace(level.plateau, gbytes_per_s=confirmed.gbytes_per_s, n_points=int(points.size),
                      wss_bytes=(int(wss[points].min()), int(wss[points].max())),
                      indices=tuple(int(i) for i in points), noisy_points=int(np.count_nonzero(flags[points])))
    basis = f"{level.basis}; roof: the fastest rate confirmed inside its window, {confirmed.describe()}"
    if confirmed.gbytes_per_s < before:
        basis += f" (the {before:.4g} GB/s of the rules before is not confirmed by any measurement)"
    lo_hi = judged.range_gbytes_per_s
    if lo_hi is None and window.size:
        clean = window[~flags[window]]
        values = bw[clean if clean.size else window]
        lo_hi = (float(values.min()), float(values.max()))
    if lo_hi is not None:  # the range holds its roof
        lo_hi = (min(lo_hi[0], confirmed.gbytes_per_s), max(lo_hi[1], confirmed.gbytes_per_s))
    return replace(judged, level=replace(level, plateau=plateau, basis=basis), range_gbytes_per_s=lo_hi,
                   confirmed=confirmed)


def judge_levels(named: list[NamedLevel], caches: Sequence[CacheInfo], *, workers: int,
                 wss_bytes: Sequence[int], gbytes_per_s: Sequence[float], noisy: Sequence[bool],
                 label: str, again: Sequence[Sequence[Measured]] | None = None,
                 noise_threshold: float = DEFAULT_NOISE_THRESHOLD,
                 suspect: Sequence[bool] | None = None) -> tuple[list[JudgedLevel], list[str]]:
    """Rule 6 over one curve's named levels: each judged cache level valued at its fastest sustained regime, and
    every level with a window roofed by the fastest rate the run confirmed there (ert.analysis.roof_confirm).

    ``again[i]`` are point i's re-measurements (None: no re-measurements at all); ``suspect[i]`` whether point i
    was measured inside a disturbed stretch (None: none was; ert.records.weather)."""
    wss = np.asarray(wss_bytes, dtype=float)
    bw = np.asarray(gbytes_per_s, dtype=float)
    flags = np.asarray(noisy, dtype=bool)
    rerun = again if again is not None else [()] * wss.size
    capacities = {h.level: h.capacity_bytes for h in cache_hints(caches, workers)}
    judged, warnings = [], []

    def confirm(window) -> Confirmed | None:
        return (confirmed_roof(wss, bw, flags, window, rerun, threshold=noise_threshold, suspect=suspect)
                if len(window) else None)

    named = list(named)
    dropped = np.array([], dtype=int)
    memory = bool(named) and not _is_cache(named[-1].name) and bool(capacities)
    start = WINDOW_START_FACTOR * max(capacities.values()) if capacities else 0.0
    if memory:  # the memory only from 2 x the last cache on, whichever curve its range came from
        trimmed, dropped = memory_from(named[-1], start, wss, bw, flags)
        if trimmed is None:
            warnings.append(no_memory_note(named[-1].name, start, dropped, wss, label))
            named, memory = named[:-1], False
        else:
            named[-1] = trimmed
    for k, lvl in enumerate(named):
        taken = {i for j, other in enumerate(named) if j != k for i in other.plateau.indices}
        if memory and k == len(named) - 1:
            window = np.array([i for i in np.flatnonzero(wss >= start) if i not in taken], dtype=int)
            confirmed = confirm(window)
            level, lo_hi, note = fast_mode(lvl, start, taken, wss, bw, flags, label,
                                           confirmed.gbytes_per_s if confirmed else None)
            judged.append(_raised(JudgedLevel(level, (), lo_hi), confirmed, window, wss, bw, flags))
            roof = judged[-1].level.plateau.gbytes_per_s
            warnings += [w for w in (note, transition_note(lvl, dropped, roof, wss, bw, label)) if w]
            continue
        window = _window(lvl, capacities, taken, wss, named[k - 1] if k else None)
        if window is None:
            judged.append(JudgedLevel(lvl))
            continue
        confirmed = confirm(window)
        first = int(lvl.name[1:]) == min(capacities)  # L1: its ramp rule stands, no regimes
        regimes = [] if first or window.size < MIN_REGIME_POINTS else find_regimes(wss, bw, window, noisy=flags)
        if not regimes:
            judged.append(_raised(JudgedLevel(lvl), confirmed, window, wss, bw, flags))
            continue
        best = max(regimes, key=lambda r: r.gbytes_per_s)
        points = np.union1d(np.array(lvl.plateau.indices, dtype=int), window)
        clean = points[~flags[points]]
        values = bw[clean if clean.size else points]
        plateau = Plateau(gbytes_per_s=best.gbytes_per_s, spread=plateau_spread(values),
                          wss_bytes=(int(wss[points].min()), int(wss[points].max())), n_points=int(points.size),
                          indices=tuple(int(i) for i in points), noisy_points=int(np.count_nonzero(flags[points])))
        basis = (f"{lvl.basis}; roof: its fastest sustained regime, {best.n_points} points at "
                 f"{fmt_bytes(best.wss_bytes[0])} - {fmt_bytes(best.wss_bytes[1])}")
        level = _raised(JudgedLevel(replace(lvl, plateau=plateau, basis=basis), tuple(regimes),
                                    (float(values.min()), float(values.max()))), confirmed, window, wss, bw, flags)
        judged.append(level)
        roof = level.level.plateau.gbytes_per_s
        slower = [r for r in regimes if r.gbytes_per_s * (1 + noise_threshold) < roof]
        if len(regimes) > 1 or slower:
            listing = ", ".join(f"{r.gbytes_per_s:.4g} GB/s at {fmt_bytes(r.wss_bytes[0])} - "
                                f"{fmt_bytes(r.wss_bytes[1])} ({r.n_points} points)" for r in regimes)
            why = ("the fastest regime" if roof == best.gbytes_per_s else
                   f"confirmed at {fmt_bytes(level.confirmed.wss_bytes)}, {level.confirmed.by}")
            warnings.append(warn("regimes",
                            f"{label} {lvl.name}: {len(regimes)} regime{'s' if len(regimes) > 1 else ''} inside the "
                            f"cache ({listing}); the roof is {roof:.4g} GB/s ({why}; a kernel can sustain it with its "
                            f"data in {lvl.name}), the slower ones show in its range"))
    return judged, warnings


def unassigned_points(named: list[NamedLevel], wss_bytes: Sequence[int], gbytes_per_s: Sequence[float],
                      noisy: Sequence[bool]) -> list[dict]:
    """The curve's usable points in no level (nor a level's ramp), each with why: ramp, transition or tail."""
    wss = np.asarray(wss_bytes, dtype=float)
    bw = np.asarray(gbytes_per_s, dtype=float)
    held = {i for lvl in named for i in lvl.plateau.indices}
    ramp = {i for lvl in named for p in lvl.ramp for i in p.indices}
    spans = sorted((lvl.plateau.wss_bytes, lvl.name) for lvl in named)
    out = []
    for i in np.argsort(wss, kind="stable"):
        i = int(i)
        if i in held or not (np.isfinite(bw[i]) and bw[i] > 0):
            continue
        if i in ramp or (spans and wss[i] < spans[0][0][0] and spans[0][1] == "L1"):
            why = f"overhead ramp below {spans[0][1]}" if spans else "ramp"
        elif spans and wss[i] < spans[0][0][0]:
            why = f"below {spans[0][1]}, in a cache with no level of its own"
        else:
            before = [name for (lo, hi), name in spans if hi < wss[i]]
            after = [name for (lo, hi), name in spans if lo > wss[i]]
            if before and after:
                why = f"transition {before[-1]} -> {after[0]}"
            elif before:
                why = f"past {before[-1]}"
            else:
                why = "inside a level's range but off its rate (an outlier)"
        if noisy[i]:
            why += "; noisy"
        out.append({"wss_bytes": int(wss[i]), "gbytes_per_s": round(float(bw[i]), 4), "why": why})
    return out
