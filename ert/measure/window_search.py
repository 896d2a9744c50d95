"""The planner's search for each level's roof: every window's maximum found, then measured again.

A cache can stream faster over part of its capacity than the rest (Zen 5:
fp64 read+write L2 884-948 GB/s only at 0.45-0.7 x L2 per thread, half an
octave), so the sweep's coarse grid can hold one or no point of its fastest
stretch.  After the first pass, for every bandwidth curve (precision x
access) and every level's window (ert.analysis.roof_confirm: L1 up to its
capacity, each later cache from 2 x the cache before it, the memory from 2 x
the last cache on):

* **Search.**  Where a measured grid neighbour of the window's fastest
  valid point, inside the window, reads slower by more than the noise
  threshold (a change within one grid step inside the cache: a faster
  stretch narrower than the grid may lie there; on a plateau the grid
  already samples the maximum, and a drop past the window is the transition
  to the next level), points at
  ``SEARCH_STEPS[0]`` (1/6 octave) on both sides, then at the next, finer
  step (1/12 octave) around whichever point is fastest then; a point found
  at the finest step ends the search, which stops when the best point's
  neighbours at the finest step are slower (the next step would be below
  1/12 of an octave).  The points are off the dense grid (their own ids),
  rounded to the backend's granule.
* **Measure again.**  When no window searches any more, the fastest point
  of every window is measured again ("confirm" records), with a fresh
  calibration, in one batch with the other curves' (so never straight after
  its first measurement).  A point is reproduced when two of its
  measurements (its record and its re-measurements, each taken at another
  time), neither inside a disturbed stretch of the host's weather
  (``ert.records.weather``) and one of them clean, agree within the noise
  threshold.  Until one point of the window is, round after round, the
  window's next re-measurement goes to the fastest point that no calm, clean
  re-measurement failed to reproduce: the next-fastest after a failure, the
  same point again later (never straight after its own latest measurement)
  when its re-measurement was disturbed or noisy, up to the window's budget
  (``MAX_AGAIN_PER_WINDOW`` calm re-measurements).  A point flagged noisy
  (a burst of other work in one of its regions) that a clean re-measurement
  reproduces is confirmed like a clean one: the interleaved re-measurement
  replaces the immediate one, which repeats the point under the same
  disturbance.

The memory's window is measured again but not searched: what varies there
is the host's state over time (modes of a shared host), not a narrow range
of working sets, and its points cost the most.

Every decision is a pure function of the records on disk, like the rest of
the adaptive plan, so ``--resume`` replays it.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Callable, Sequence

from ert.measure.plan import Point
from ert.spec import WINDOW_START_FACTOR, KernelSpec, rates

# Steps of the search around a window's best point, in octaves of working set: finer while it finds faster points.
SEARCH_STEPS = (1.0 / 6.0, 1.0 / 12.0)
# A window's budget: at most this many re-measurements outside disturbed stretches (twice this in all), until one
# of its points reproduces, MAX_AGAIN_IN_ALL with those inside disturbed stretches; one point is measured again at most
# MAX_AGAIN_PER_POINT times.  (A quiet host confirms most windows at the first; before the weather, two per window.)
MAX_AGAIN_PER_WINDOW = 3
MAX_AGAIN_IN_ALL = 5
MAX_AGAIN_PER_POINT = 2


def level_windows(capacities: Sequence[int]) -> list[tuple[float, float]]:
    """(low, high) aggregate working sets of each level's window, from the caches' aggregate capacities.

    L1 from 0 to its capacity; each later cache from 2 x the one before to its own; the memory from 2 x the
    last cache on (to infinity)."""
    caps = sorted(set(int(c) for c in capacities if c > 0))
    if not caps:
        return []
    out = [(0.0, float(caps[0]))]
    out += [(WINDOW_START_FACTOR * a, float(b)) for a, b in zip(caps, caps[1:]) if WINDOW_START_FACTOR * a < b]
    out.append((WINDOW_START_FACTOR * caps[-1], math.inf))
    return out


def _best(row: tuple) -> tuple:
    """The order of a working set's geometries: a clean one before a noisy one, then the faster (no rate last)."""
    _, rate, clean = row
    return (rate is not None, bool(clean), rate or 0.0)


def _rate(record: dict) -> float | None:
    if not record.get("valid"):
        return None
    value = rates(record).gbytes_per_s
    return value if value > 0 and math.isfinite(value) else None


class WindowSearch:
    """The window search and the re-measurements of one sweep; the planner calls ``next_points`` each round.

    ``curves`` are the bandwidth curves as lists of grid slots, one per working set: the points measured there,
    one per launch geometry (numba-cpu's chain count: one; a device backend's blocks x threads or global x local
    sizes: several), or a bare point for a slot of one.  ``granule_bytes(spec)`` is the step working sets are
    rounded to (None: no search off the grid).

    At each working set the curve reads its best geometry (``_best``: the fastest clean one, as
    ``ert.records.rawio.best_launches`` picks for the analysis); a point off the grid takes the launch of the
    best geometry where the search started, and a re-measurement measures the best geometry's point again.
    """

    def __init__(self, curves: Sequence[Sequence[Point | Sequence[Point]]], windows: Sequence[tuple[float, float]],
                 *, granule_bytes: Callable | None, noise_threshold: float):
        self._curves = [[p for slot in c for p in ([slot] if isinstance(slot, Point) else slot)]
                        for c in curves if c]
        self._windows = list(windows)
        self._granule = granule_bytes
        self._threshold = noise_threshold

    # ---------------------------------------------------------------- points
    def _point_at(self, like: Point, wss: float) -> Point:
        """The curve's point at ``wss`` (rounded to the granule), built like ``like``."""
        g = max(1, int(self._granule(like.spec)))
        size = max(g, int(round(wss / g)) * g)
        workers = like.wss_bytes // (like.elements_per_thread * like.spec.itemsize)
        return replace(like, wss_bytes=size, elements_per_thread=size // like.spec.itemsize // workers)

    def point_of(self, record: dict) -> Point | None:
        """The point off the grid a record on disk measured (a search's), rebuilt from its spec, launch and working
        set; None for any other."""
        if self._granule is None:
            return None
        spec, launch = KernelSpec.from_dict(record["spec"]), record.get("launch") or None
        for curve in self._curves:
            like = next((p for p in curve if p.spec == spec and p.launch_dict() == launch), None)
            if like is not None:
                point = self._point_at(like, record["wss_bytes"])
                return point if point.id == record["id"] else None
        return None

    def _measured(self, curve: list[Point], extra: dict[str, Point], known: dict[str, dict]) -> dict[int, tuple]:
        """wss -> (point, rate or None, clean) of the curve's best geometry at each working set (grid or searched)
        on disk."""
        out: dict[int, tuple] = {}
        for p in {q.id: q for q in [*curve, *extra.values()]}.values():
            rec = known.get(p.id)
            if rec is None:
                continue
            row = (p, _rate(rec), not rec.get("noisy") and rec.get("reproduced", True))
            if p.wss_bytes not in out or _best(row) > _best(out[p.wss_bytes]):
                out[p.wss_bytes] = row
        return out

    def _stands_out(self, best: int, inside: dict, measured: dict, grid: set[int]) -> bool:
        """Whether a measured grid neighbour of the best grid point inside the window (the next grid size
        measured either side) is slower by more than the noise threshold: the rate changes within a grid step
        inside the cache, so a faster stretch narrower than the grid may lie next to it.  (A neighbour past the
        window is the transition to the next level: no narrow window there.)"""
        sizes = sorted(w for w, v in measured.items() if v[1] is not None and w in grid)
        k = sizes.index(best)
        rate = inside[best][1]
        return any(sizes[j] in inside and measured[sizes[j]][1] * (1 + self._threshold) < rate
                   for j in (k - 1, k + 1) if 0 <= j < len(sizes))

    @staticmethod
    def _steps(best: int, grid: set[int]) -> tuple[float, ...]:
        """The steps still to search at around ``best``: every one for a grid point, the finer ones for a point a
        step added (found that far from a grid point), none for a point of the last step."""
        ordered = sorted(grid)
        spacing = min((math.log2(b / a) for a, b in zip(ordered, ordered[1:])), default=1.0)
        steps = tuple(s for s in SEARCH_STEPS if s < 0.99 * spacing)  # a grid that fine needs no such step
        near = min(abs(math.log2(best / g)) for g in grid)
        if near < 1e-9:
            return steps
        for k, step in enumerate(steps):
            if abs(near - step) < SEARCH_STEPS[-1] / 2:
                return steps[k + 1:]
        return ()

    # ---------------------------------------------------------------- rounds
    def search(self, known: dict[str, dict], chosen: dict[str, Point]) -> list[Point]:
        """Points the windows' searches add next (off the grid); [] when every search is done."""
        if self._granule is None:
            return []
        out: list[Point] = []
        for curve in self._curves:
            spec = curve[0].spec
            extra = {pid: p for pid, p in chosen.items() if p.spec == spec and not p.again}
            measured = self._measured(curve, extra, known)
            grid = {p.wss_bytes for p in curve if not p.again}
            for lo, hi in self._windows:
                if math.isinf(hi):
                    continue  # the memory: modes of a shared host, not a narrow window; measured again only
                lo, hi = max(lo, min(grid)), min(hi, max(grid))  # never past the sweep's own range
                # Where to look: noisy points too (a burst in one region leaves the median informative); only
                # clean points are measured again and can be roofs.
                inside = {w: v for w, v in measured.items() if lo <= w <= hi and v[1] is not None}
                if not inside:
                    continue
                best = max(inside, key=lambda w: (inside[w][1], -w))
                if best in grid and not self._stands_out(best, inside, measured, grid):
                    continue  # a plateau the grid already samples: nothing narrower to find
                # Both sides at the coarsest step not yet measured around the best point; finer once it is.
                for step in self._steps(best, grid):
                    like = measured[best][0]  # the best geometry's point: the search keeps its launch
                    sides = [self._point_at(like, best * 2.0 ** (side * step)) for side in (-1, 1)]
                    sides = [p for p in sides if lo <= p.wss_bytes <= hi and p.wss_bytes != best]
                    missing = [p for p in sides if p.wss_bytes not in measured and p.id not in known]
                    if missing:
                        out += missing
                        break
        return list({p.id: p for p in out}.values())

    def _history(self, point: Point, known: dict[str, dict], suspect) -> list[tuple[float | None, bool, bool]]:
        """(rate or None, clean, suspect) of each measurement of ``point``: its record, then its re-measurements
        (again 1, 2 ...) while they are on disk."""
        out = []
        k = 0
        while (rec := known.get(replace(point, again=k).id if k else point.id)) is not None:
            out.append((_rate(rec), not rec.get("noisy") and rec.get("reproduced", True), bool(suspect(rec))))
            k += 1
        return out

    def _reproduced(self, history) -> bool:
        """Two measurements taken at different times, neither suspect, one of them clean, agree within the noise
        threshold."""
        usable = [(rate, clean) for rate, clean, bad in history if rate is not None and not bad]
        return any((ca or cb) and max(a, b) <= min(a, b) * (1 + self._threshold)
                   for i, (a, ca) in enumerate(usable) for b, cb in usable[i + 1:])

    def again(self, known: dict[str, dict], chosen: dict[str, Point], suspect=lambda record: False) -> list[Point]:
        """Re-measurements to make next, one per window: [] when every window is confirmed or spent.

        A window is done when one of its points reproduced (``_reproduced``) or its budget is spent
        (``MAX_AGAIN_PER_WINDOW`` re-measurements not measured in a disturbed stretch, ``MAX_AGAIN_IN_ALL`` in all).
        Otherwise its next re-measurement goes to the point with the fewest calm, clean re-measurements that
        did not reproduce it, fastest first (its fastest measurement not ``suspect``): the fastest point first;
        when its re-measurement read another rate, the next-fastest; the fastest again later, when the host
        was disturbed or the re-measurement noisy.  Never straight after the point's own latest measurement
        (a rate is confirmed by a measurement taken at another time): another point of the window goes first.
        ``suspect(record)``: measured inside a disturbed stretch (``ert.records.weather``)."""
        latest = max(known.values(), key=lambda r: r.get("time", 0.0), default=None)
        out: list[Point] = []
        for curve in self._curves:
            spec = curve[0].spec
            extra = {pid: p for pid, p in chosen.items() if p.spec == spec and not p.again}
            measured = self._measured(curve, extra, known)
            for lo, hi in self._windows:
                rows = []
                spent = calm_spent = 0
                for point, rate, _ in (v for w, v in measured.items() if lo <= w <= hi and v[1] is not None):
                    history = self._history(point, known, suspect)
                    if self._reproduced(history):
                        rows = None
                        break
                    agains = history[1:]
                    spent += len(agains)
                    calm_spent += sum(1 for _, _, bad in agains if not bad)
                    first = history[0][0]
                    failed = sum(1 for r, clean, bad in agains if clean and not bad and r is not None
                                 and first is not None and not history[0][2]
                                 and max(r, first) > min(r, first) * (1 + self._threshold))
                    best = max((r for r, _, bad in history if r is not None and not bad), default=rate)
                    newest = known[replace(point, again=len(agains)).id if agains else point.id]
                    rows.append((failed, -best, point, len(agains), newest is latest))
                if rows is None or calm_spent >= MAX_AGAIN_PER_WINDOW or spent >= MAX_AGAIN_IN_ALL:
                    continue
                ready = sorted((r for r in rows if r[3] < MAX_AGAIN_PER_POINT and not r[4]), key=lambda r: r[:2])
                if ready:
                    out.append(replace(ready[0][2], again=ready[0][3] + 1))
        return out
