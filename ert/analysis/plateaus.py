"""Find the flat bandwidth plateaus (one per memory level) in a noisy working-set sweep."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ert.analysis.stepfit import log_noise, median_cost_table, optimal_partition
from ert.spec import plateau_spread

# Relative noise is never taken below this: on near-noiseless data a zero
# estimate would make every tiny wiggle worth a segment of its own.
_NOISE_FLOOR = 0.005
# Penalty per segment, in units of sigma * ln(n).  A segment's L1 misfit falls
# by about |shift| for every point it fits better, so a spurious segment must
# save more than this.  Calibrated on pure-noise lines (one plateau over many
# seeds) and on staircases with 20-50 % outliers.
_PENALTY_SIGMAS_PER_LOG_N = 3.0
# Widest transition between two levels, as a working-set ratio.  Cache-to-cache
# transitions span a factor of about 1.5-3; anything found between two levels
# closer together than this is part of the transition, not a level.
_MAX_TRANSITION_FACTOR = 4.0
# Members of a plateau lie within this many sigmas (and at least min_step) of
# its median: further points are outliers from other tenants.
_MEMBER_SIGMAS = 3.0
# End points further than this many sigmas (and half of min_step) from the
# median, or more than _KNEE_SIGMAS off it towards the neighbouring level, are
# the knee of a transition and are trimmed off the plateau.
_EDGE_SIGMAS = 2.0
_KNEE_SIGMAS = 1.5


@dataclass(frozen=True)
class Plateau:
    """One flat stretch of the bandwidth curve: the samples of one memory level.

    ``gbytes_per_s`` is the median of the member points that the caller did
    not flag noisy (of all members if every one was flagged); ``spread`` is
    ``(p90 - p10) / median`` over the same points, or ``(max - min) / median``
    for fewer than three.  (A level merged from several plateaus by
    ``level_spans.merge_plateaus`` takes its value from one of them; see there.)  ``indices`` point into the caller's arrays, sorted;
    they need not be contiguous, because outliers inside a level are left out.
    ``wss_bytes`` is the (lowest, highest) working set among the members.
    """

    gbytes_per_s: float
    spread: float
    wss_bytes: tuple[int, int]
    n_points: int
    indices: tuple[int, ...]
    noisy_points: int



@dataclass(frozen=True)
class Curve:
    """One bandwidth curve as arrays, indexed like ``Plateau.indices``: working sets, GB/s, noisy flags."""

    wss: np.ndarray
    bw: np.ndarray
    flags: np.ndarray  # the points the caller flagged noisy (all False when it flagged none)

    @classmethod
    def of(cls, wss_bytes: Sequence[int], gbytes_per_s: Sequence[float],
           noisy: Sequence[bool] | None = None) -> "Curve":
        bw = np.asarray(gbytes_per_s, dtype=float)
        flags = np.zeros(bw.size, dtype=bool) if noisy is None else np.asarray(noisy, dtype=bool)
        return cls(wss=np.asarray(wss_bytes, dtype=float), bw=bw, flags=flags)

    def usable(self, where: np.ndarray) -> np.ndarray:
        """Indices of the points where ``where`` holds and the rate is finite and positive."""
        return np.flatnonzero(where & np.isfinite(self.bw) & (self.bw > 0))

    def level(self, idx: np.ndarray, *, min_points: int, value) -> Plateau:
        """A Plateau of the points ``idx``: ``value`` and spread over the clean ones when there are enough."""
        clean = idx[~self.flags[idx]]
        values = self.bw[clean if clean.size >= min_points else idx]
        return Plateau(
            gbytes_per_s=float(value(values)),
            spread=plateau_spread(values),
            wss_bytes=(int(self.wss[idx].min()), int(self.wss[idx].max())),
            n_points=int(idx.size),
            indices=tuple(int(i) for i in np.sort(idx)),
            noisy_points=int(np.count_nonzero(self.flags[idx])),
        )


def robust_noise(values: Sequence[float]) -> float:
    """Relative point-to-point noise of positive ``values``: a sigma of their logs.

    The median absolute deviation of successive log differences, divided by
    sqrt(2): level steps and isolated outliers are a minority of the
    differences and barely move it.  Values must be in sweep order.  Returns
    0.0 for fewer than 3 usable (finite, positive) values.
    """
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v) & (v > 0)]
    return log_noise(np.log(v))



# local_noise reads the scatter at this quantile of the absolute deviations:
# the upper quartile still ignores the one or two points in eight that other
# tenants slowed, and is far steadier than the median on a handful of points.
# For Gaussian noise it lies at this many sigmas.
_LOCAL_QUANTILE = 0.75
_LOCAL_QUANTILE_SIGMAS = 1.1503


def local_noise(wss_bytes: Sequence[int], gbytes_per_s: Sequence[float], wss_range: tuple[int, int]) -> float:
    """Relative noise of the points whose working set lies in ``wss_range`` (inclusive): a sigma of their logs.

    The upper quartile of the absolute deviations of the log rates from their
    median, scaled to a Gaussian sigma: the scatter of the points around the
    level they stand for, whether or not the fit kept them as members, that
    still ignores the odd outlier (up to a quarter of the points).  Unlike ``robust_noise`` (successive differences) it also sees
    a stretch whose points scatter at random around a shifted value (other
    work slowing the kernel by what it happens to be doing).  Returns 0.0 for
    fewer than 3 usable points.
    """
    wss = np.asarray(wss_bytes, dtype=float)
    bw = np.asarray(gbytes_per_s, dtype=float)
    inside = (wss >= wss_range[0]) & (wss <= wss_range[1]) & np.isfinite(bw) & (bw > 0)
    if np.count_nonzero(inside) < 3:
        return 0.0
    y = np.log(bw[inside])
    return float(np.quantile(np.abs(y - np.median(y)), _LOCAL_QUANTILE)) / _LOCAL_QUANTILE_SIGMAS




def _merge_similar(anchors: list[list[int]], y: np.ndarray, step_log: float) -> None:
    """Merge the closest pair of consecutive anchors until all neighbours differ by step_log.

    Bandwidth does not rise with working set, so whatever lies between two
    anchors at the same level (an outlier, a dip) is a disturbance of that
    level, never another level.
    """
    while len(anchors) > 1:
        levels = [float(np.median(y[s:e])) for s, e in anchors]
        gaps = np.abs(np.diff(levels))
        k = int(np.argmin(gaps))
        if gaps[k] >= step_log:
            return
        anchors[k : k + 2] = [[anchors[k][0], anchors[k + 1][1]]]


def _drop_transition_fragments(anchors: list[list[int]], wss: np.ndarray, y: np.ndarray, tolerance: float) -> None:
    """Remove anchors lying inside a transition, i.e. between neighbours less than one apart.

    A wide, smooth transition sampled densely contains stretches that look
    flat for a few points; a real level pushes its neighbours further apart
    than any one transition spans.  A neighbour's edge is its outermost point
    within ``tolerance`` (log) of its median: an outlier that the partition
    happened to put at a segment's end is no evidence of where the level
    begins or ends.
    """

    def edges(anchor: list[int]) -> tuple[float, float]:
        s, e = anchor
        inside = np.flatnonzero(np.abs(y[s:e] - np.median(y[s:e])) <= tolerance)
        if inside.size == 0:
            return float(wss[s]), float(wss[e - 1])
        return float(wss[s + inside[0]]), float(wss[s + inside[-1]])

    k = 1
    while k < len(anchors) - 1:
        left_end = edges(anchors[k - 1])[1]
        right_start = edges(anchors[k + 1])[0]
        if right_start <= left_end * _MAX_TRANSITION_FACTOR:
            del anchors[k]
            k = max(k - 1, 1)  # the new neighbours of the previous anchor need a look too
        else:
            k += 1


def _extend_over_short(
    anchors: list[list[int]], segments: list[tuple[int, int]], y: np.ndarray, step_log: float, min_points: int
) -> None:
    """Stretch each anchor over nearby short segments at its own level.

    A short run of the level cut off by an outlier (e.g. the last two points
    of the sweep after a dropped sample) belongs to the level.  The search
    stops at any long segment and at the neighbouring anchors.
    """
    for k, anchor in enumerate(anchors):
        level = float(np.median(y[anchor[0] : anchor[1]]))
        limit_right = anchors[k + 1][0] if k + 1 < len(anchors) else y.size
        limit_left = anchors[k - 1][1] if k > 0 else 0
        for s, e in segments:
            if s < anchor[1] or e > limit_right:
                continue
            if e - s >= min_points:
                break
            if abs(float(np.median(y[s:e])) - level) < step_log:
                anchor[1] = e
        for s, e in reversed(segments):
            if e > anchor[0] or s < limit_left:
                continue
            if e - s >= min_points:
                break
            if abs(float(np.median(y[s:e])) - level) < step_log:
                anchor[0] = s


def _members(
    y_span: np.ndarray,
    clean: np.ndarray,
    sigma: float,
    step_log: float,
    before: float | None,
    after: float | None,
    min_points: int,
) -> np.ndarray:
    """Boolean mask of the points of a plateau's span that belong to its level.

    ``clean`` marks the points not flagged noisy: the level is their median.
    ``before`` and ``after`` are the (log) levels of the neighbouring
    plateaus, None at the ends of the sweep.
    """
    level = float(np.median(y_span[clean] if clean.any() else y_span))
    signed = y_span - level
    tolerance = max(_MEMBER_SIGMAS * sigma, step_log)
    idx = np.flatnonzero(np.abs(signed) <= tolerance)
    edge = max(_EDGE_SIGMAS * sigma, step_log / 2)

    def is_knee(pos: int, neighbour: float | None) -> bool:
        # Knee points sit on the slope of a transition: far from the level, or
        # clearly off it towards the neighbouring level.
        if abs(signed[pos]) > edge:
            return True
        return neighbour is not None and signed[pos] * math.copysign(1.0, neighbour - level) > _KNEE_SIGMAS * sigma

    def cut_off(inward: np.ndarray, neighbour: float | None) -> int:
        # Leading members split from the rest by a point beyond the tolerance on
        # the side of a faster neighbour, too few to be a run of this level,
        # are dropped samples of that neighbour (outliers only ever slow a run
        # down).  Returns how many leading members to drop.
        if neighbour is None or neighbour <= level or inward.size < 2:
            return 0
        group_start = 0
        for k in range(1, inward.size):
            lo_pos, hi_pos = sorted((int(inward[k - 1]), int(inward[k])))
            if np.any(signed[lo_pos + 1 : hi_pos] > tolerance):
                if k - group_start >= min_points:
                    break
                group_start = k
        return group_start

    lo, hi = 0, idx.size - 1
    while True:
        start = (lo, hi)
        while lo < hi and is_knee(idx[lo], before):
            lo += 1
        while hi > lo and is_knee(idx[hi], after):
            hi -= 1
        lo += cut_off(idx[lo : hi + 1], before)
        hi -= cut_off(idx[lo : hi + 1][::-1], after)
        if (lo, hi) == start or lo >= hi:
            break
    mask = np.zeros(y_span.size, dtype=bool)
    mask[idx[lo : hi + 1]] = True
    return mask


def find_plateaus(
    wss_bytes: Sequence[int],
    gbytes_per_s: Sequence[float],
    *,
    noisy: Sequence[bool] | None = None,
    min_points: int = 3,
    min_step: float = 0.12,
) -> list[Plateau]:
    """Split a bandwidth-vs-working-set sweep into level plateaus, ascending by working set.

    Log bandwidth, in working-set order, is optimally partitioned into
    constant segments (dynamic programming, L1 misfit about each segment's
    median plus a per-segment penalty proportional to ``robust_noise``).
    Then:

    * segments of at least ``min_points`` points anchor candidate levels;
    * consecutive anchors within ``min_step`` (relative) are one level, so a
      level split by an outlier, a dip or slow drift is made whole again;
    * an anchor whose neighbours are closer than a transition's width (a
      factor 4 in working set) is a piece of that transition and is dropped;
      so are all segments shorter than ``min_points``;
    * a plateau's members are the points of its span within 3 sigma (at
      least ``min_step``) of its median, minus knee points at its two ends;
      a plateau needs ``min_points`` members.

    ``noisy`` flags points the caller distrusts: when at least half of the
    points (and ``2 * min_points``) are clean, the partition is fit to clean
    points only; flagged points inside a plateau's span still become members
    (counted in ``noisy_points``) but do not enter its value or spread.
    Points with non-positive or non-finite values are ignored.  Input order
    does not matter; indices refer to the caller's arrays.
    """
    wss = np.asarray(wss_bytes, dtype=float)
    bw = np.asarray(gbytes_per_s, dtype=float)
    if wss.ndim != 1 or wss.shape != bw.shape:
        raise ValueError("wss_bytes and gbytes_per_s must be 1-D and the same length")
    flags = np.zeros(bw.size, dtype=bool) if noisy is None else np.asarray(noisy, dtype=bool)
    if flags.shape != bw.shape:
        raise ValueError("noisy must have the same length as gbytes_per_s")
    if min_points < 1:
        raise ValueError("min_points must be at least 1")
    if min_step <= 0:
        raise ValueError("min_step must be positive")

    usable = np.flatnonzero(np.isfinite(bw) & (bw > 0) & np.isfinite(wss) & (wss > 0))
    # Stable sort so equal working sets keep the caller's order.
    order = usable[np.argsort(wss[usable], kind="stable")]
    if order.size < min_points:
        return []
    bw_sorted = bw[order]
    y_all = np.log(bw_sorted)
    wss_sorted = wss[order]
    flagged = flags[order]
    if np.count_nonzero(~flagged) >= max(2 * min_points, order.size / 2):
        fit_pos = np.flatnonzero(~flagged)  # sorted positions the partition is fit to
    else:
        fit_pos = np.arange(order.size)
    y = y_all[fit_pos]

    cost = median_cost_table(y)
    log_n = math.log(max(y.size, 3))
    sigma = max(log_noise(y), _NOISE_FLOOR)
    segments = optimal_partition(cost, _PENALTY_SIGMAS_PER_LOG_N * sigma * log_n)

    step_log = math.log1p(min_step)
    anchors = [[s, e] for s, e in segments if e - s >= min_points]
    _merge_similar(anchors, y, step_log)
    _drop_transition_fragments(anchors, wss_sorted[fit_pos], y, max(_MEMBER_SIGMAS * sigma, step_log))
    # Dropping a fragment can leave two equal levels side by side.
    _merge_similar(anchors, y, step_log)
    _extend_over_short(anchors, segments, y, step_log, min_points)

    levels = [float(np.median(y[s:e])) for s, e in anchors]
    plateaus = []
    for k, (start, end) in enumerate(anchors):
        # The span in sorted positions takes in flagged points between its fit points.
        span = np.arange(int(fit_pos[start]), int(fit_pos[end - 1]) + 1)
        before = levels[k - 1] if k > 0 else None
        after = levels[k + 1] if k + 1 < len(levels) else None
        members = span[_members(y_all[span], ~flagged[span], sigma, step_log, before, after, min_points)]
        if members.size < min_points:
            continue
        clean = members[~flagged[members]]
        values = bw_sorted[clean if clean.size else members]
        member_wss = wss_sorted[members]
        plateaus.append(
            Plateau(
                gbytes_per_s=float(np.median(values)),
                spread=plateau_spread(values),
                wss_bytes=(int(member_wss.min()), int(member_wss.max())),
                n_points=int(members.size),
                indices=tuple(int(i) for i in np.sort(order[members])),
                noisy_points=int(np.count_nonzero(flagged[members])),
            )
        )
    return plateaus




def scattered_tail(
    wss_bytes: Sequence[int],
    gbytes_per_s: Sequence[float],
    plateaus: list[Plateau],
    *,
    noisy: Sequence[bool] | None = None,
    min_points: int = 4,
    transition_factor: float = 4.0,
) -> Plateau | None:
    """The points past the last plateau, as one level, when they scatter too much to form one.

    A shared machine's memory bandwidth can change during a run (another
    tenant starts streaming).  With working sets measured in interleaved order
    the largest sizes then alternate between two values and no flat stretch
    forms, so the last level would silently vanish.  This returns the points
    lying beyond ``transition_factor`` x the last plateau's largest working set
    (past its transition) as a level: median value, true (large) spread.  None
    when there are fewer than ``min_points`` such points.  The caller must say
    that the level is scattered.
    """
    curve = Curve.of(wss_bytes, gbytes_per_s, noisy)
    start = plateaus[-1].wss_bytes[1] * transition_factor if plateaus else 0.0
    tail = curve.usable(curve.wss >= start)
    if plateaus:
        tail = tail[~np.isin(tail, plateaus[-1].indices)]
    if tail.size < min_points:
        return None
    return curve.level(tail, min_points=min_points, value=np.median)


def _densest_median(values: np.ndarray, *, window: float) -> float:
    """Median of the largest cluster of values lying within +-``window`` (relative) of one another.

    A range that the fit did not shape can hold a few disturbed points (a
    busy host only ever slows a kernel down); a plain median would follow
    them once they are many, the densest cluster does not.  Ties go to the
    faster cluster.
    """
    y = np.sort(np.log(values))
    h = math.log1p(window)
    best = (0, -np.inf, 0, 0)
    for i in range(y.size):
        j = int(np.searchsorted(y, y[i] + 2 * h, side="right"))
        best = max(best, (j - i, y[i], i, j))
    _, _, i, j = best
    return float(np.exp(np.median(y[i:j])))


def level_over_range(
    wss_bytes: Sequence[int],
    gbytes_per_s: Sequence[float],
    wss_range: tuple[int, int],
    *,
    noisy: Sequence[bool] | None = None,
    min_points: int = 3,
) -> Plateau | None:
    """The points whose working set lies in ``wss_range`` (inclusive), as one level.

    Used to measure one curve over the level ranges another curve of the same
    run separated more clearly (cache capacities do not depend on the access
    pattern).  The value is the median of the densest cluster of the clean
    points (all points when fewer than ``min_points`` are clean); the spread
    is over all of them, so disturbed points still widen it.  None when fewer than ``min_points`` points
    fall in the range.
    """
    curve = Curve.of(wss_bytes, gbytes_per_s, noisy)
    inside = curve.usable((curve.wss >= wss_range[0]) & (curve.wss <= wss_range[1]))
    if inside.size < min_points:
        return None
    return curve.level(inside, min_points=min_points, value=lambda values: _densest_median(values, window=0.08))
