"""Levels from chosen spans of a curve beside the fit: plateaus merged, the memory to the end, the lead, the ramp."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ert.analysis.plateaus import Curve, Plateau
from ert.analysis.stepfit import log_noise
from ert.spec import plateau_spread

# Rule 3 of ert.analysis.levels inside one plateau.  A leading point is on
# the ramp only when it lies significantly below the level's sustained value:
# more than _RAMP_SIGMAS sigmas of the plateau's noise (robust_noise of its
# points, at least _RAMP_MIN_SIGMA); the points before it may be less far
# below, but at least _RAMP_LEAD_SIGMAS.  A ramp needs _RAMP_MIN_POINTS such
# points (one slow point at the start is an outlier, not a ramp).
_RAMP_SIGMAS = 2.0
_RAMP_LEAD_SIGMAS = 1.0
_RAMP_MIN_SIGMA = 0.015
_RAMP_MIN_POINTS = 2


def merge_plateaus(
    pieces: Sequence[Plateau],
    *,
    value_from: Plateau,
    gbytes_per_s: Sequence[float] | None = None,
    noisy: Sequence[bool] | None = None,
) -> Plateau:
    """One level made of several plateaus of the fit: its points, range and spread are theirs together.

    The value is ``value_from``'s (which piece stands for the level is the
    naming's decision: ert.analysis.levels).  The spread is over the clean
    points of all pieces (all points if none is clean) when the caller gives
    the curve's ``gbytes_per_s`` (indexed like ``Plateau.indices``);
    without them each piece counts as ``n_points`` points at its own value,
    so the spread still shows how far the pieces lie apart.
    """
    if not pieces:
        raise ValueError("no plateaus to merge")
    if len(pieces) == 1 and value_from is pieces[0]:
        return pieces[0]
    indices = np.array(sorted({i for p in pieces for i in p.indices}), dtype=int)
    if gbytes_per_s is not None:
        bw = np.asarray(gbytes_per_s, dtype=float)
        flags = np.zeros(bw.size, dtype=bool) if noisy is None else np.asarray(noisy, dtype=bool)
        clean = indices[~flags[indices]]
        values = bw[clean if clean.size else indices]
    else:
        values = np.repeat([p.gbytes_per_s for p in pieces], [p.n_points for p in pieces])
    return Plateau(
        gbytes_per_s=value_from.gbytes_per_s,
        spread=plateau_spread(values),
        wss_bytes=(min(p.wss_bytes[0] for p in pieces), max(p.wss_bytes[1] for p in pieces)),
        n_points=int(indices.size),
        indices=tuple(int(i) for i in indices),
        noisy_points=sum(p.noisy_points for p in pieces),
    )


def cover_to_end(curve: Curve, plateau: Plateau) -> Plateau:
    """``plateau`` widened to every usable point of ``curve`` from its lowest working set to the sweep's end.

    For the last level (the memory): nothing lies beyond it, so points the
    fit left out at its end (an outlier at the largest working set, the knee
    between two memory modes) are still the memory's.  The value stays the
    plateau's; the spread is over the clean points of the widened range.
    """
    idx = np.union1d(curve.usable(curve.wss >= plateau.wss_bytes[0]), np.array(plateau.indices, dtype=int))
    if idx.size == plateau.n_points:
        return plateau
    return curve.level(idx, min_points=1, value=lambda _: plateau.gbytes_per_s)


def points_before(curve: Curve, plateau: Plateau, *, min_points: int = 2) -> Plateau | None:
    """The usable points below ``plateau``'s lowest working set, as one Plateau (median value), or None.

    For the first level: a ramp the fit made no plateau of (too short, or too
    steep to look flat) still lies there.  None with fewer than ``min_points``.
    """
    idx = curve.usable(curve.wss < plateau.wss_bytes[0])
    if idx.size < min_points:
        return None
    return curve.level(idx, min_points=1, value=np.median)


def split_ramp(curve: Curve, plateau: Plateau, *, min_points: int = 3) -> tuple[Plateau, Plateau | None]:
    """(sustained part, ramp or None) of a plateau whose first points rise towards its level.

    A fixed per-call overhead makes bandwidth rise with the working set at
    the smallest sizes; a smooth rise can end up inside the first plateau
    and pull its median down.  The reference is the median of the points
    past the ramp (found by iterating from the whole plateau's median until
    the ramp no longer changes), sigma the plateau's point-to-point noise
    (``robust_noise``, at least 1.5 %).  The ramp is the longest leading run
    of points that all lie more than 1 sigma below the reference and whose
    last point lies more than 2 sigma below it: only points significantly
    slower than the level are cut, so a flat noisy plateau keeps its points.
    It needs at least 2 points and must leave ``min_points``.  The sustained
    part's value is the median of all its points (those past the ramp), its
    spread over the same points.
    """
    idx = np.array(plateau.indices, dtype=int)
    idx = idx[np.argsort(curve.wss[idx], kind="stable")]
    y = np.log(curve.bw[idx])
    sigma = max(log_noise(y), _RAMP_MIN_SIGMA)
    n_ramp, seen = 0, set()
    while n_ramp not in seen:  # the reference is the median of the points past the ramp: iterate to agree
        seen.add(n_ramp)
        below = float(np.median(y[n_ramp:])) - y
        n_ramp = 0
        for k in range(idx.size):
            if below[k] <= _RAMP_LEAD_SIGMAS * sigma:
                break
            if below[k] > _RAMP_SIGMAS * sigma:
                n_ramp = k + 1
        n_ramp = min(n_ramp, idx.size - 1)
    if n_ramp < _RAMP_MIN_POINTS or idx.size - n_ramp < min_points:
        return plateau, None
    rest, ramp = idx[n_ramp:], idx[:n_ramp]
    return (curve.level(rest, min_points=1, value=np.median), curve.level(ramp, min_points=1, value=np.median))



@dataclass(frozen=True)
class Cut:
    """A plateau cut at cache capacities (``split_at_capacities``): the whole, pieces kept, slow pieces left out."""

    whole: Plateau
    kept: tuple[Plateau, ...]
    slow: tuple[Plateau, ...]  # pieces inside a capacity that read no faster than the piece after them
    short: int  # points in pieces too short for a level


def split_at_capacities(plateaus: Sequence[Plateau], capacities: Sequence[float], curve: Curve, *,
                        min_points: int = 3) -> tuple[list[Plateau], list[Cut]]:
    """Plateaus cut where they cross a cache's aggregate capacity: (the plateaus, what was cut).

    A working set that fits in a cache is that cache's, whatever the level after it streams at: a plateau that
    runs across a capacity (a read+write curve whose L1 and L2 rates the fit could not tell apart on a shared
    host, or a busy stretch that blurred L2 into L3) holds two levels' working sets.  Each piece keeps the
    points on its side (working sets up to the capacity, then above it) and is valued as the fit values a
    plateau (the median of its clean points).  Left out: a piece of fewer than ``min_points`` points (a
    transition), and a piece inside a capacity that reads no faster than the piece after it (no cache streams
    slower than the one after it: its points read like the next level's, a busy host or a kernel that does not
    reach the cache's rate at those sizes, and are no roof for it).  A plateau with no piece that long is kept
    whole.
    """
    cuts = sorted(float(c) for c in capacities)
    out: list[Plateau] = []
    done: list[Cut] = []
    for p in plateaus:
        inside = [c for c in cuts if p.wss_bytes[0] <= c < p.wss_bytes[1]]
        if not inside:
            out.append(p)
            continue
        idx = np.array(p.indices, dtype=int)
        edges = [-np.inf, *inside, np.inf]
        parts = [idx[(curve.wss[idx] > lo) & (curve.wss[idx] <= hi)] for lo, hi in zip(edges, edges[1:])]
        pieces = [curve.level(part, min_points=1, value=np.median) for part in parts if part.size >= min_points]
        if not pieces:
            out.append(p)
            continue
        slow = [a for a, b in zip(pieces, pieces[1:]) if a.gbytes_per_s <= b.gbytes_per_s]
        kept = [piece for piece in pieces if piece not in slow]
        out.extend(kept)
        done.append(Cut(p, tuple(kept), tuple(slow), p.n_points - sum(piece.n_points for piece in pieces)))
    return out, done
