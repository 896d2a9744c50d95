"""The host's weather during a sweep: sentinel readings between points, and suspect points measured again.

A shared host (a login node, a cloud guest whose neighbours share its cores)
can slow a stretch of a run without any counter showing it: only a
measurement sees it.  So the sweep measures the host's state as it goes:

* **Sentinels.**  One short, fixed kernel per cache level (fp64 read+write,
  1 FLOP per element -- fp32 where the sweep has no fp64 bandwidth curve --,
  at a working set well inside L1, L2 and the last-level
  cache from the cache hints), each timed over ``SENTINEL_SAMPLES`` regions of
  a fixed trial count (calibrated once, to about ``SENTINEL_REGION_SECONDS``)
  and written at once as a "sentinel" record.  A reading is taken before the
  first point, then between points every ``every_seconds`` of sweep time,
  while the readings have taken at most ``budget`` of the time so far, and
  once more when the sweep ends.
* **Suspect points measured again.**  The disturbed stretches are the shared
  rule's (``ert.records.weather``): a sentinel below its level's best of the
  run by more than the noise threshold is disturbed, a stretch runs from the
  calm reading before to the calm one after.  A point measured inside a
  stretch is suspect; once the latest reading of every level is calm again
  it is measured again (a "point" record with the same id, ``remeasured_for``
  and ``disturbed_first``: the last record of an id is the one read; the points
  a ceiling can rest on first, ``by_weight``), while
  the re-measurements have taken at most ``remeasure_budget`` of the time so
  far.  At the end of the sweep a host still disturbed is read again every
  ``every_seconds`` within that budget; what stays suspect is left as it is,
  and the analysis says so.

The scheduling (``Weather``) is separate from the measuring (``Probe``), so a
fake clock and a fake probe can drive it in tests.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, Sequence

from ert.config.schema import WeatherOptions as Settings  # the config's ``weather`` block
from ert.records.rawio import sentinel_record
from ert.records.weather import disturbed_stretches, is_disturbed, ratios, suspect
from ert.spec import KernelSpec

# The sentinel kernel: fp64 read+write, 1 FLOP per element (the sweep's own bandwidth kernel).
SENTINEL_SPEC = KernelSpec("fp64", 1, False, "rw")
# Each reading times this many regions of the level's fixed trial count, after one untimed warm-up region.
SENTINEL_SAMPLES = 3
# The trial count of each level is calibrated once so that one region lasts at least this long.
SENTINEL_REGION_SECONDS = 0.002
# A point suspect again after being measured again is measured again at most this many times in all.
MAX_REMEASURES_PER_POINT = 2
# The cache levels a sentinel is kept for (the aggregate capacities, smallest first).
LEVEL_NAMES = ("L1", "L2", "L3")


@dataclass(frozen=True)
class Sentinel:
    """One level's sentinel: its aggregate working set and each thread's share of it."""

    level: str
    wss_bytes: int
    elements_per_thread: int
    launch: dict | None = None
    spec: KernelSpec = SENTINEL_SPEC


def sentinel_spec(specs) -> KernelSpec | None:
    """The sentinel's kernel: read+write, 1 FLOP per element, fp64, or fp32 where the sweep has no fp64 bandwidth
    curve; None where the sweep has neither (a tensor-only run: no weather)."""
    for spec in (SENTINEL_SPEC, KernelSpec("fp32", 1, False, "rw")):
        if spec in set(specs):
            return spec
    return None


def sentinel_sets(capacities: Sequence[int], *, workers: int, granule_elements: int,
                  itemsize: int = SENTINEL_SPEC.itemsize, shared_last: bool = False) -> list[tuple[str, int]]:
    """(level, elements per thread) of each level's sentinel, from the caches' aggregate capacities (smallest
    first, one per level).

    L1: half its capacity.  A later level: the geometric middle of its window (2 x the cache before it up
    to its own capacity, as the analysis's windows), at most a quarter of a last-level cache that other cpus
    share (neighbours take part of it).  Rounded to the backend's granule; a level whose window is empty
    (no room between the cache before and its own) gets no sentinel."""
    caps = sorted(set(int(c) for c in capacities if c > 0))[:len(LEVEL_NAMES)]
    out = []
    for k, cap in enumerate(caps):
        if k == 0:
            target = cap / 2
        else:
            low = 2 * caps[k - 1]
            if low >= cap:
                continue
            target = math.sqrt(low * cap)
            if shared_last and k == len(caps) - 1:
                target = max(low * 1.25, min(target, cap / 4))
        per_thread = int(target / itemsize / workers / granule_elements) * granule_elements
        if per_thread >= granule_elements:
            out.append((LEVEL_NAMES[k], per_thread))
    return out


class Probe:
    """The real sentinel measurement on the sweep's backend: ``timed(trials)`` is one region on every rank (after
    a barrier, the slowest rank's seconds: ``ert.measure.driver._timed``)."""

    def __init__(self, backend, comm, timed: Callable[[int], float]):
        self.backend, self.comm, self._timed = backend, comm, timed

    def _prepare(self, s: Sentinel) -> None:
        # The driver hands the backend unwrapped of fault injection (ert.measure.faults counts the sweep's points).
        self.backend.prepare(s.spec, elements_per_thread=s.elements_per_thread, launch=s.launch)

    def calibrate(self, s: Sentinel) -> int:
        """The level's trial count: grown until the fastest of a few regions lasts ``SENTINEL_REGION_SECONDS``
        (the fastest, so a region that other work stretched cannot fix the count too low for the whole run)."""
        self._prepare(s)
        trials = 1
        while True:
            fastest = min(self._timed(trials) for _ in range(SENTINEL_SAMPLES))
            if fastest >= SENTINEL_REGION_SECONDS or trials >= 1 << 30:
                return trials
            grow = 16 if fastest <= 0 else min(16, max(2, SENTINEL_REGION_SECONDS / fastest * 1.2))
            trials = min(1 << 30, math.ceil(trials * grow))

    def read(self, s: Sentinel, trials: int) -> tuple[list[float], bool]:
        """(seconds of each timed region, whether every rank's output checked)."""
        self._prepare(s)
        self._timed(trials)  # warm-up: the threads awake, the set in its cache
        samples = [self._timed(trials) for _ in range(SENTINEL_SAMPLES)]
        ok = self.backend.check().ok
        return samples, all(self.comm.allgather(ok)) if self.comm.size > 1 else ok


def by_weight(points: list) -> list:
    """Suspect points in the order they are measured again, the budget being short on a busy host: first those a
    ceiling can rest on -- the bandwidth points (1 FLOP per element: every memory level's roof) and each kernel
    family's highest FLOPs per element among them (its compute peak) --, then the others, most FLOPs first; the
    sweep's order within each.  On the Zen 4 guest a run disturbed for all its 47 s measured 35 suspect points
    again in its budget and left 241."""
    def family(p) -> tuple:
        return p.spec.precision, p.spec.fma, p.spec.access, p.spec.op, p.spec.mix

    top: dict[tuple, int] = {}
    for p in points:
        top[family(p)] = max(top.get(family(p), 0), p.spec.flops_per_element)

    def weight(p) -> tuple[int, int]:
        f = p.spec.flops_per_element
        return (0, 0) if f == 1 or f == top[family(p)] else (1, -f)

    return sorted(points, key=weight)


class Weather:
    """When to read the sentinels and which points to measure again, over one sweep.

    ``probe`` measures (``Probe``, or a fake), ``append(record)`` writes a
    record (rank 0), ``share(value)`` hands rank 0's value to every rank
    (``comm.bcast``), ``clock`` is monotonic seconds and ``wall`` unix time
    (what records carry).  ``previous`` are the sentinel records a resumed
    run already holds (their ids are not reused); ``earlier`` each level's best
    in earlier runs on this machine, written into its records.
    """

    def __init__(self, *, probe, sentinels: Sequence[Sentinel], settings: Settings, noise_threshold: float,
                 ranks: int, threads_per_rank: int, append: Callable[[dict], None], share=None,
                 previous: Sequence[dict] = (), clock=time.monotonic, wall=time.time, sleep=time.sleep,
                 earlier: dict[str, float] | None = None):
        self.probe, self.sentinels, self.settings = probe, list(sentinels), settings
        self.threshold = noise_threshold
        self.ranks, self.threads = ranks, threads_per_rank
        self._append, self._share = append, share or (lambda v: v)
        self.records: list[dict] = list(previous)
        self.earlier = dict(earlier or {})  # level -> its best in earlier runs here (ert.measure.history)
        numbers = [r["id"].rsplit("-", 1)[-1] for r in previous]
        self._next = 1 + max((int(n) for n in numbers if n.isdigit()), default=-1)
        self._clock, self._wall, self._sleep = clock, wall, sleep
        self._trials: dict[str, int] = {}
        self._start = clock()
        self._last = -math.inf
        self._cost = 0.0               # what the latest reading took: the next one's estimate
        self.reading_seconds = 0.0     # spent on sentinel readings (calibration included)
        self.remeasure_seconds = 0.0   # spent on measuring suspect points again
        self.remeasured: dict[str, int] = {}  # point id -> times measured again for the weather

    # ---------------------------------------------------------------- readings
    def _elapsed(self) -> float:
        return max(self._clock() - self._start, 1e-9)

    def start(self, after_point: str | None = None) -> None:
        """Calibrate each level's trial count once, then take the first reading."""
        t0 = self._clock()
        for s in self.sentinels:
            self._trials[s.level] = self.probe.calibrate(s)
        self.reading_seconds += self._clock() - t0
        self.read(after_point)

    def due(self) -> bool:
        """A reading is due: ``every_seconds`` since the last, and the readings, this one too (estimated as the
        last), within their budget (rank 0's clock decides for every rank)."""
        now = self._clock()
        ready = (now - self._last >= self.settings.every_seconds
                 and self.reading_seconds + self._cost <= self.settings.budget * (now - self._start))
        return bool(self._share(ready))

    def read(self, after_point: str | None) -> list[dict]:
        """One reading of every level's sentinel, each record written at once."""
        t0 = self._clock()
        out = []
        for s in self.sentinels:
            samples, valid = self.probe.read(s, self._trials[s.level])
            record = sentinel_record(index=self._next, level=s.level, spec=s.spec.to_dict(),
                                     wss_bytes=s.wss_bytes, elements_per_thread=s.elements_per_thread,
                                     ranks=self.ranks, threads_per_rank=self.threads, trials=self._trials[s.level],
                                     samples=samples, valid=valid, after_point=after_point, now=self._wall(),
                                     earlier_best=self.earlier.get(s.level))
            self._next += 1
            if 0 < min(samples) < SENTINEL_REGION_SECONDS / 2:
                # Calibrated while other work stretched every region: longer regions from the next reading on
                # (the rate is per trial, so readings stay comparable).
                self._trials[s.level] = math.ceil(self._trials[s.level] * SENTINEL_REGION_SECONDS / min(samples))
            self._append(record)
            self.records.append(record)
            out.append(record)
        self._last = self._clock()
        self._cost = self._last - t0
        self.reading_seconds += self._cost
        return out

    def calm(self) -> bool:
        """Whether the latest reading of every level reads within the noise threshold of its level's best."""
        latest: dict[str, float] = {}
        for rec, ratio in ratios(self.records):
            latest[rec["level"]] = ratio
        return all(not is_disturbed(r, self.threshold) for r in latest.values())

    # ---------------------------------------------------------------- suspect points
    def suspects(self, records: dict[str, dict]) -> list[str]:
        """Ids of the sweep points (rank 0's ``records``, by id) measured inside a disturbed stretch that may be
        measured again now: the host is calm again, and the point was not measured again too often."""
        if not self.records or not self.calm():
            return []
        stretches = disturbed_stretches(self.records, self.threshold)
        if not stretches:
            return []
        return [pid for pid, rec in records.items()
                if rec.get("type") == "point" and self.remeasured.get(pid, 0) < MAX_REMEASURES_PER_POINT
                and suspect(rec, stretches)]

    def remeasure_allowed(self) -> bool:
        return self.remeasure_seconds <= self.settings.remeasure_budget * self._elapsed()

    def after_point(self, point_id: str | None, records: dict[str, dict] | None, remeasure: Callable,
                    lookup: Callable) -> None:
        """Between points: a reading when one is due, then the suspect points measured again while the host is
        calm and the budget lasts (a reading between them when due: a new disturbance stops them).

        ``records`` are rank 0's records by id (None on the other ranks), ``lookup(id)`` the point of an id
        (None: not one this sweep can measure) and ``remeasure(point)`` measures it again (every rank)."""
        if self.due():
            self.read(point_id)
        ids = self.suspects(records) if records is not None else []
        todo = self._share(by_weight([p for p in map(lookup, ids) if p is not None]))
        for point in todo:
            if not self._share(self.remeasure_allowed() and self.calm()):
                break
            t0 = self._clock()
            remeasure(point)
            self.remeasured[point.id] = self.remeasured.get(point.id, 0) + 1
            self.remeasure_seconds += self._clock() - t0
            if self.due():
                self.read(point.id)

    def waiting(self, records: dict[str, dict] | None) -> bool:
        """Whether the host is disturbed now with points measured inside the stretch (rank 0 decides)."""
        if records is None or self.calm():
            return bool(self._share(False))
        stretches = disturbed_stretches(self.records, self.threshold)
        return bool(self._share(any(
            rec.get("type") == "point" and self.remeasured.get(pid, 0) < MAX_REMEASURES_PER_POINT
            and suspect(rec, stretches) for pid, rec in records.items())))

    def finish(self, point_id: str | None, records: dict[str, dict] | None, remeasure: Callable,
               lookup: Callable) -> None:
        """The sweep's last reading; while the host stays disturbed and points are suspect, read again every
        ``every_seconds`` (the waiting and its readings count as re-measuring time) until the re-measuring
        budget of the sweep so far is spent, measuring them again once it is calm."""
        self.read(point_id)
        allowed = self.settings.remeasure_budget * self._elapsed() - self.remeasure_seconds
        waited = 0.0
        while True:
            self.after_point(point_id, records, remeasure, lookup)
            if not (self.waiting(records) and self._share(waited < allowed)):
                return
            waited += self._wait(point_id)

    def _wait(self, point_id: str | None) -> float:
        """``every_seconds`` asleep, then a reading; its seconds (counted as re-measuring time, once)."""
        t0 = self._clock()
        self._sleep(self.settings.every_seconds)
        self.read(point_id)
        self.reading_seconds -= self._cost
        spent = self._clock() - t0
        self.remeasure_seconds += spent
        return spent

    def wait_calm(self, point_id: str | None) -> None:
        """Before a window's point is measured again (``ert.measure.window_search``): while the latest reading is
        disturbed, wait and read again, within the re-measuring budget."""
        while not self._share(self.calm()) and self._share(self.remeasure_allowed()):
            self._wait(point_id)

    def summary(self) -> dict:
        """What the weather cost and did (for the sweep's end record)."""
        return {"sentinel_seconds": round(self.reading_seconds, 3),
                "remeasure_seconds": round(self.remeasure_seconds, 3),
                "remeasured_points": sum(self.remeasured.values())}
