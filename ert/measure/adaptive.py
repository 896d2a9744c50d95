"""The adaptive sweep: a coarse pass refined near level transitions, and a compute-peak search.

The planner chooses a subset of the dense plan's points (same ids, same
working-set grid), round by round.  Each round is a pure function of the
records of the rounds before it, so the whole plan can be replayed from the
points on disk: ``next_batch`` starts from the coarse pass every time and
stops at the first round with points not yet measured.  A resumed run thus
reconstructs exactly the decisions the killed run made, and a round measured
only in part is finished before anything new is decided.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, replace
from typing import Sequence

from ert.records.weather import disturbed_stretches, suspect
from ert.spec import NOISE_THRESHOLD, rates
from ert.measure.window_search import WindowSearch
from ert.measure.plan import Point

# Neighbouring bandwidth points further apart than this (relative) straddle a
# transition between levels, which is bisected down to the grid's resolution.
# Half the plateau finder's 12 % level step, so no step it can see is missed.
TRANSITION_STEP = 0.06
# The coarse pass spaces working sets about this factor apart.
COARSE_FACTOR = 2.0
# Points a plateau is sampled with at least (the plateau finder needs 3 per
# level and drops the knee points at its ends), and at most while its values
# still scatter more than its points' own spread.
PLATEAU_MIN_POINTS = 4
PLATEAU_MAX_POINTS = 8
# A compute peak has saturated when two more steps of FLOPs per element in a
# row gain less than this over the best before them.  One step is not enough:
# a noisy step, or one still bound by the cache's bandwidth (FLOPs 8 and 32
# can gain nothing over each other on a wide core and still be far from the
# peak), would stop the search early.
SATURATION_GAIN = 0.03
# Bandwidth points per octave of working set inside each cache's window (2 x the cache before it up to
# its capacity), at least: rule 6 of the level analysis needs 3 neighbouring points per regime, and a
# regime can be as narrow as 0.45-0.7 x L2 (Zen 5), under one octave.
WINDOW_PER_OCTAVE = 3
SATURATION_STEPS = 2


def _saturated(log_rates: list[float]) -> bool:
    """Whether the last SATURATION_STEPS log rates gained less than SATURATION_GAIN over every earlier one."""
    if len(log_rates) <= SATURATION_STEPS:
        return False
    before = max(log_rates[:-SATURATION_STEPS])
    return max(log_rates[-SATURATION_STEPS:]) - before <= math.log1p(SATURATION_GAIN)


@dataclass
class _Slot:
    """One working set of one kernel: its points (several where launch geometries differ)."""

    wss_bytes: int
    points: list[Point]


def _log_rate(slot: _Slot, records: dict[str, dict], *, compute: bool) -> float | None:
    """Log of the best valid rate at a slot, None when nothing valid was measured there."""
    measured = [rates(records[p.id]) for p in slot.points if p.id in records and records[p.id]["valid"]]
    values = [r.gflops_per_s if compute else r.gbytes_per_s for r in measured]
    values = [v for v in values if v > 0 and math.isfinite(v)]
    return math.log(max(values)) if values else None


def _slot_spread(slot: _Slot, records: dict[str, dict]) -> float:
    spreads = [records[p.id]["spread"] for p in slot.points if p.id in records]
    return min(spreads) if spreads else 0.0


class AdaptivePlanner:
    """Rounds of points chosen from ``candidates`` (the dense plan), each decided by the rounds before.

    ``cache_resident_bytes`` is the working set the compute-peak search uses:
    a size whose data stays in a cache private to each thread.
    """

    def __init__(self, candidates: list[Point], *, growth: float, cache_resident_bytes: int,
                 cache_windows: list[tuple[int, int]] = (), level_windows: list[tuple[float, float]] = (),
                 granule_bytes=None, noise_threshold: float = NOISE_THRESHOLD):
        self._stride = max(1, round(math.log(COARSE_FACTOR) / math.log(growth)))
        # Inside each cache after the first, the coarse pass samples WINDOW_PER_OCTAVE points per octave
        # (the grid's own spacing where it is coarser): a faster regime deep inside a cache lies between
        # breaks, where refinement alone would not look (ert.analysis.regimes judges the same windows).
        self._window_stride = max(1, math.floor(math.log(2) / WINDOW_PER_OCTAVE / math.log(growth)))
        self._windows = list(cache_windows)
        # Tensor-core points have no working-set grid: every one is measured in the coarse pass.
        self._tensor = [p for p in candidates if p.spec.tensor]
        by_spec: dict = defaultdict(dict)
        for p in candidates:
            if p.spec.tensor:
                continue
            by_spec[p.spec].setdefault(p.wss_bytes, []).append(p)
        grids = {spec: [_Slot(w, pts) for w, pts in sorted(slots.items())] for spec, slots in by_spec.items()}
        # The bandwidth curves are the kernels the analysis reads bandwidth from:
        # read-only, and read+write with the fewest FLOPs per element.
        fewest_rw = {}
        for spec in grids:
            if spec.access == "rw":
                key = spec.precision
                fewest_rw[key] = min(fewest_rw.get(key, spec.flops_per_element), spec.flops_per_element)
        self._curves = [grids[s] for s in grids
                        if s.access == "ro" or s.flops_per_element == fewest_rw.get(s.precision)]
        # Compute kernels, grouped by (precision, FMA) and ordered by FLOPs per element.
        groups: dict = defaultdict(list)
        for spec in grids:
            if spec.access == "rw" and spec.flops_per_element != fewest_rw.get(spec.precision):
                groups[(spec.precision, spec.fma, spec.op, spec.mix)].append(spec)
        self._compute = []
        for key in sorted(groups, key=lambda k: (k[0] != "fp64", not k[1], k[2:])):
            specs = sorted(groups[key], key=lambda s: s.flops_per_element)
            self._compute.append([(s, grids[s], self._nearest(grids[s], cache_resident_bytes)) for s in specs])
        # Where the memory's window starts (2 x the last cache): no transitions are bisected past it.
        self._memory_from = max((lo for lo, hi in level_windows if math.isinf(hi)), default=math.inf)
        # Each level's roof: its window's maximum searched off the grid, then measured again
        # (ert.measure.window_search).
        self._search = WindowSearch([[slot.points for slot in grid] for grid in self._curves], level_windows,
                                    granule_bytes=granule_bytes, noise_threshold=noise_threshold)
        self._threshold = noise_threshold
        self._by_id = {p.id: p for p in candidates}
        self.planned: list[Point] = []

    @staticmethod
    def _nearest(grid: list[_Slot], target_bytes: int) -> int:
        return min(range(len(grid)), key=lambda i: (abs(math.log(grid[i].wss_bytes / target_bytes)), i))

    # ------------------------------------------------------------------ rounds
    def next_batch(self, records: dict[str, dict], sentinels: Sequence[dict] = ()) -> list[Point]:
        """The points to measure next, given every record on disk by id; [] when the sweep is done.

        ``sentinels`` are the run's sentinel records (``ert.measure.weather``): a re-measurement taken inside
        a disturbed stretch neither confirms nor fails its point.  ``planned`` is left holding every point
        decided so far.
        """
        stretches = disturbed_stretches(sentinels, self._threshold) if sentinels else []
        chosen: dict[str, Point] = {}
        batch = self._coarse()
        while batch:
            for p in batch:
                chosen.setdefault(p.id, p)
            self.planned = list(chosen.values())
            missing = [p for p in batch if p.id not in records]
            if missing:
                return missing
            known = {pid: records[pid] for pid in chosen}
            # Once each: the search may name a grid point the refinement adds in the same round.
            batch = list({p.id: p for p in self._refine(known) + self._search.search(known, chosen)
                          if p.id not in chosen}.values())
            if not batch:  # the plan has settled: each window's fastest point is measured again
                batch = [p for p in self._search.again(known, chosen, lambda rec: suspect(rec, stretches))
                         if p.id not in chosen]
        # Every point and re-measurement on disk stays part of the plan: a decision taken on a reading the weather
        # later measured again, or found disturbed, may go another way when replayed, but what it measured was
        # planned (the rounds above still decide from their own rounds' records only).
        for pid, rec in records.items():
            point = self._by_id.get(pid) or (None if rec.get("type") == "confirm" else self._search.point_of(rec))
            if point is not None:
                chosen.setdefault(pid, point)
        for p in list(chosen.values()):
            k = 1
            while not p.again and (again := replace(p, again=k)).id in records:
                chosen.setdefault(again.id, again)
                k += 1
        self.planned = list(chosen.values())
        return []

    def _coarse(self) -> list[Point]:
        out = []
        for grid in self._curves:
            # Anchored at the largest set (memory needs it), stepping down to the smallest.
            n = len(grid)
            picks = set(range(n - 1, -1, -self._stride))
            if min(picks) > self._stride // 2:
                picks.add(0)
            for lo, hi in self._windows:
                inside = [i for i in range(n) if lo <= grid[i].wss_bytes <= hi]
                picks.update(inside[::-1][::self._window_stride])
            for i in sorted(picks):
                out += grid[i].points
        for group in self._compute:
            for spec, grid, target in group[:2]:
                out += grid[target].points
        return out + self._tensor

    def _refine(self, known: dict[str, dict]) -> list[Point]:
        out = []
        for grid in self._curves:
            out += [p for i in self._refine_curve(grid, known) for p in grid[i].points]
        for group in self._compute:
            out += self._refine_compute(group, known)
        return out

    def _refine_curve(self, grid: list[_Slot], known: dict[str, dict]) -> list[int]:
        """Grid indices to add to one bandwidth curve: transition midpoints and plateau samples."""
        measured = [i for i, slot in enumerate(grid) if any(p.id in known for p in slot.points)]
        values = {i: _log_rate(grid[i], known, compute=False) for i in measured}
        measured = [i for i in measured if values[i] is not None]
        step = math.log1p(TRANSITION_STEP)
        noise = {i: math.log1p(_slot_spread(grid[i], known)) for i in measured}
        add: set[int] = set()
        runs: list[list[int]] = [[measured[0]]] if measured else []
        memory = self._memory_from
        for a, b in zip(measured, measured[1:]):
            # Two points further apart than their own repeats scatter (and than
            # the step) lie on different levels or on the slope between them.
            # From 2 x the last cache on there is one level, the memory: what changes there is the host's
            # state (a shared host's modes), which more points do not settle; its fastest point is measured
            # again instead (ert.measure.window_search).
            in_memory = grid[a].wss_bytes >= memory
            if abs(values[a] - values[b]) > max(step, (noise[a] + noise[b]) / 2) and not in_memory:
                if b - a > 1:
                    add.add((a + b) // 2)  # bisect the transition
                runs.append([b])
            else:
                runs[-1].append(b)
        for run in runs:
            gaps = [(b - a, a, b) for a, b in zip(run, run[1:]) if b - a > 1]
            if not gaps:
                continue
            level = [values[i] for i in run]
            scatter = max(level) - min(level)
            own = statistics.median(_slot_spread(grid[i], known) for i in run)
            stable = scatter <= max(step, 2 * math.log1p(own))
            scattered = not stable and grid[run[0]].wss_bytes < memory
            if len(run) < PLATEAU_MIN_POINTS or (scattered and len(run) < PLATEAU_MAX_POINTS):
                _, a, b = max(gaps)
                add.add((a + b) // 2)  # sample the plateau's widest gap
        return sorted(add)

    def _refine_compute(self, group: list[tuple], known: dict[str, dict]) -> list[Point]:
        """FLOPs per element raised until GFLOP/s saturates, then the best confirmed at two more sizes."""
        done = [(spec, grid, target, _log_rate(grid[target], known, compute=True)) for spec, grid, target in group
                if any(p.id in known for p in grid[target].points)]
        measured = [d for d in done if d[3] is not None]
        if len(done) < len(group) and not _saturated([d[3] for d in measured]):
            spec, grid, target = group[len(done)]
            return list(grid[target].points)  # not yet saturated: the next FLOP count
        if not measured:
            return []
        spec, grid, target, _ = max(measured, key=lambda d: d[3])
        out = []
        for i in (target - self._stride, target + self._stride):
            if 0 <= i < len(grid):
                out += grid[i].points
        return out
